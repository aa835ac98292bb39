"""A stand-in for the kubelets' node Leases, for the test harness.

The harness's kwok (started without ``--node-lease-duration-seconds``) renews no node
Lease and refreshes the nodes' conditions only every 5 minutes, so kube-controller-
manager's node lifecycle controller sees every simulated node go silent after its grace
period (about 55 s) and marks it NotReady - and every pod on it Ready=False. kwok's
stages never make a pod Ready again, so a Deployment that has been running for a minute
reads as unavailable for good. The cluster-role tests wait for operator Deployments, so
they renew the Leases a kubelet would (``kube-node-lease/<node>``) while they run.

Usage: python fake_node_leases.py --kubeconfig PATH [--pidfile PATH] [--lifetime SECONDS]
It exits after ``--lifetime`` seconds, on SIGTERM, or when its pidfile is removed.
Importable: ``NodeLeases(api_client).renew()`` renews once; ``renewing(api_client)`` is a
context manager that renews in a thread.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import signal
import sys
import threading
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
INTERVAL = 10.0
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


class NodeLeases:
    def __init__(self, api_client):
        self.core = client.CoreV1Api(api_client)
        self.leases = client.CoordinationV1Api(api_client)

    def simulated_nodes(self):
        key, value = KWOK_NODE_ANNOTATION
        return [
            node.metadata.name
            for node in self.core.list_node().items
            if (node.metadata.annotations or {}).get(key) == value
        ]

    def renew(self):
        now = dt.datetime.now(dt.timezone.utc)
        for name in self.simulated_nodes():
            body = {
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
            }
            try:
                self.leases.patch_namespaced_lease(name, NAMESPACE, body)
            except ApiException as error:
                if error.status != 404:
                    raise
                with contextlib.suppress(ApiException):  # created meanwhile by someone else
                    self.leases.create_namespaced_lease(NAMESPACE, body)


@contextlib.contextmanager
def renewing(api_client, interval=INTERVAL):
    """Renew the node Leases every ``interval`` seconds while the block runs."""
    leases = NodeLeases(api_client)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            with contextlib.suppress(ApiException, OSError):
                leases.renew()
            stop.wait(interval)

    leases.renew()
    thread = threading.Thread(target=loop, name="fake-node-leases", daemon=True)
    thread.start()
    try:
        yield leases
    finally:
        stop.set()
        thread.join(timeout=interval + 5)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Renew the simulated nodes' Leases like kubelets do.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--pidfile")
    parser.add_argument("--lifetime", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=INTERVAL)
    args = parser.parse_args(argv)

    pidfile = Path(args.pidfile) if args.pidfile else None
    if pidfile:
        pidfile.write_text("%d\n" % os.getpid())
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(True))
    leases = NodeLeases(config.new_client_from_config(config_file=args.kubeconfig))
    deadline = time.monotonic() + args.lifetime
    while not stopping and time.monotonic() < deadline:
        if pidfile and not pidfile.exists():
            break
        try:
            leases.renew()
        except (ApiException, OSError) as error:
            print("fake_node_leases: %s" % error, file=sys.stderr, flush=True)
        time.sleep(args.interval)
    if pidfile and pidfile.exists():
        pidfile.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())

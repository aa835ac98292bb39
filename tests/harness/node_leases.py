"""The harness's stand-in for the kubelets' node Leases.

kwok (started without ``--node-lease-duration-seconds``, see README.md) renews no node
Lease and refreshes the nodes' conditions only every 5 minutes, so kube-controller-
manager's node lifecycle controller sees every simulated node go silent after its grace
period (about 55 s), marks it NotReady and every pod on it Ready=False. kwok's stages never
make a pod Ready again, so a DaemonSet or Deployment that has run for a minute reads as
unavailable for good. `k8s_harness.py up` therefore runs this renewer as one of its
components; it renews ``kube-node-lease/<node>`` for every simulated node, as a kubelet would.

Usage: python node_leases.py --kubeconfig PATH [--interval SECONDS]
It runs until SIGTERM. ``NodeLeases(api_client).renew()`` renews once (importable).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import signal
import sys
import threading

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

    def renew(self) -> int:
        """Renew every simulated node's Lease once; returns how many were renewed."""
        now = dt.datetime.now(dt.timezone.utc)
        names = self.simulated_nodes()
        for name in names:
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
        return len(names)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Renew the simulated nodes' Leases like kubelets do.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--interval", type=float, default=INTERVAL)
    args = parser.parse_args(argv)

    # An Event rather than sleep(): SIGTERM ends the wait at once, so `down` is quick.
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    leases = NodeLeases(config.new_client_from_config(config_file=args.kubeconfig))
    last_count = None
    while not stopping.is_set():
        try:
            count = leases.renew()
        except (ApiException, OSError) as error:
            print("node-leases: %s" % error, file=sys.stderr, flush=True)
        else:
            if count != last_count:  # log changes only, not every renewal
                print("node-leases: renewing %d node Leases every %gs" % (count, args.interval), flush=True)
                last_count = count
        stopping.wait(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())

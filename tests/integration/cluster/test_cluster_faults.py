"""Cluster roles when the API server goes away in the middle of a converge.

A control plane of its own (the harness on other ports, in a temporary directory) so that
stopping its kube-apiserver disturbs no other test. training_namespace is the multi-object
role: namespace, PVCs, ServiceAccount, Role and RoleBinding, PriorityClass, LimitRange and
ResourceQuota. The apiserver is stopped as soon as the first object exists; the run must
fail naming the unreachable server, and after the apiserver is back a second run must
converge to exactly what a run without the outage creates, with no duplicate or
half-applied object, and a third run must change nothing.

The role applies its nine objects in one module call, one right after the other, too fast
for the test to stop the apiserver between two of them; so the cut run reaches the server
through a relay that holds every request a while, as a slow link would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import socket
import threading
import time
import urllib.parse

import pytest
import yaml
from k8s_harness import Harness, HarnessConfig
from pytest_plugin import K8sCluster
from test_training_namespace import recap_changed, role_vars

pytestmark = pytest.mark.slow

# Well away from the shared harness's ports (tests/harness/k8s_harness.py DEFAULT_PORTS).
PORT_OFFSET = 1000
KINDS = "pvc,serviceaccount,role,rolebinding,limitrange,resourcequota"


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory):
    defaults = HarnessConfig.from_environment()
    config = dataclasses.replace(
        defaults,
        state_dir=tmp_path_factory.mktemp("fault-harness"),
        ports={name: port + PORT_OFFSET for name, port in defaults.ports.items()},
        nodes=defaults.nodes[:1],
    )
    harness = Harness(config)
    harness.up()
    try:
        yield K8sCluster(harness)
    finally:
        harness.down()


class SlowLink:
    """A TCP relay to the apiserver that holds every chunk the client sends for DELAY seconds
    (TLS passes through untouched). close() cuts it: open connections are dropped and new
    ones refused."""

    def __init__(self, host, port, delay):
        self.upstream, self.delay = (host, port), delay
        self.sockets = []
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _address = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client):
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        self.sockets += [client, upstream]
        threading.Thread(target=self._pump, args=(upstream, client, 0), daemon=True).start()
        self._pump(client, upstream, self.delay)

    @staticmethod
    def _pump(source, target, delay):
        try:
            while data := source.recv(65536):
                time.sleep(delay)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                end.close()

    def close(self):
        # shutdown() first: close() alone leaves the socket listening while accept() waits on it.
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for end in self.sockets:
            with contextlib.suppress(OSError):  # already closed by its pump
                end.shutdown(socket.SHUT_RDWR)


def slow_kubeconfig(cluster, path, delay):
    """A copy of the cluster's kubeconfig whose server is a SlowLink to it; returns both."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = urllib.parse.urlsplit(config["clusters"][0]["cluster"]["server"])
    link = SlowLink(server.hostname, server.port, delay)
    config["clusters"][0]["cluster"]["server"] = "https://%s:%d" % (server.hostname, link.port)
    path.write_text(yaml.safe_dump(config))
    return path, link


def stored_objects(cluster, namespace, priority_class):
    """What the server stores for one converge: kind/name -> the fields the role sets."""
    listing = json.loads(cluster.kubectl("get", KINDS, "-n", namespace, "-o", "json").stdout)["items"]
    objects = {}
    for item in listing:
        # The SCC's Role names the SCC, whose name carries the namespace's.
        item = json.loads(json.dumps(item).replace(namespace, "NS"))
        name = item["metadata"]["name"]
        if item["kind"] == "ServiceAccount" and name == "default":
            continue  # made by the controller manager, not the role
        key = "%s/%s" % (item["kind"], name)
        assert key not in objects, "duplicate %s" % key
        objects[key] = {
            "labels": dict(item["metadata"].get("labels") or {}),
            "spec": item.get("spec"),
            "rules": item.get("rules"),
            "roleRef": item.get("roleRef"),
        }
        for pvc_field in ("volumeName", "volumeMode"):  # assigned by the server, not asked for
            (objects[key]["spec"] or {}).pop(pvc_field, None)
    namespace_object = json.loads(cluster.kubectl("get", "namespace", namespace, "-o", "json").stdout)
    objects["Namespace"] = {"labels": namespace_object["metadata"]["labels"]}
    objects["Namespace"]["labels"].pop("kubernetes.io/metadata.name")
    priority = json.loads(cluster.kubectl("get", "priorityclass", priority_class, "-o", "json").stdout)
    objects["PriorityClass"] = {"value": priority["value"], "labels": priority["metadata"].get("labels")}
    return objects


def test_a_converge_cut_by_an_apiserver_outage_converges_on_the_next_run(private_cluster, run_role, tmp_path):
    cluster = private_cluster
    reference_ns, reference_pc = "fault-ref", "fault-ref-priority"
    reference = run_role("training_namespace", role_vars(cluster, reference_ns, reference_pc))
    assert reference.rc == 0, reference

    namespace, priority_class = "fault-cut", "fault-cut-priority"
    variables = role_vars(cluster, namespace, priority_class)
    # Each request held 0.2 s: an object (a read and an apply) takes about half a second.
    slow, link = slow_kubeconfig(cluster, tmp_path / "slow-kubeconfig", 0.2)
    cut_variables = dict(variables, training_namespace_kubeconfig=str(slow))
    outcome = {}
    first = threading.Thread(target=lambda: outcome.update(run=run_role("training_namespace", cut_variables)))
    first.start()
    for _poll in range(1200):  # a bounded wait for the first object, not a clock
        if not first.is_alive():
            break
        if cluster.kubectl("get", "namespace", namespace, check=False).returncode == 0:
            break
        time.sleep(0.1)
    created_before_the_outage = cluster.kubectl(
        "get", KINDS, "-n", namespace, "-o", "name", check=False
    ).stdout
    link.close()  # first: the apiserver takes a while to stop and still answers meanwhile
    cluster.harness.stop_apiserver()
    try:
        first.join(timeout=300)
    finally:
        cluster.harness.start_apiserver()
    cut = outcome["run"]
    assert cut.rc != 0, cut
    # The run ended on the outage, not after having applied everything.
    assert "failed=1" in cut.output, cut
    assert re.search(
        r"Connection refused|Max retries exceeded|Failed to establish a new connection", cut.output
    ), cut
    assert "ResourceQuota" not in created_before_the_outage

    again = run_role("training_namespace", variables)
    assert again.rc == 0, again
    assert recap_changed(again) > 0
    third = run_role("training_namespace", variables)
    assert third.rc == 0 and recap_changed(third) == 0, third

    expected = stored_objects(cluster, reference_ns, reference_pc)
    got = stored_objects(cluster, namespace, priority_class)
    for objects in (expected, got):
        objects["PriorityClass"]["labels"] = {
            k: v for k, v in (objects["PriorityClass"]["labels"] or {}).items() if "fault-" not in v
        }
    assert got == expected

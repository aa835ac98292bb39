"""The harness's real node: a kubelet and CRI-O that run pods for real beside kwok's nodes.

Pods here are real processes in runc containers on the node's bridge: their logs come through
kubelet, their names resolve through CoreDNS, and `down` leaves nothing behind.
"""

from __future__ import annotations

import json

import pytest
from crio_runtime import BUSYBOX_IMAGE, RUN_ROOT
from real_node import detect_quirks

pytestmark = [pytest.mark.slow, pytest.mark.real_node]


def busybox_pod(
    name: str, command: str, node: str, labels: dict | None = None, restart: str = "Never"
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            **node.placement,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                }
            ],
        },
    }


def apply_in(cluster, namespace: str, *documents: dict) -> None:
    for document in documents:
        document["metadata"]["namespace"] = namespace
    cluster.apply(*documents)


def wait_phase(cluster, namespace: str, pod: str, phase: str, timeout: int = 120) -> None:
    cluster.kubectl(
        "wait",
        f"--for=jsonpath={{.status.phase}}={phase}",
        f"--timeout={timeout}s",
        "-n",
        namespace,
        f"pod/{pod}",
        timeout=timeout + 10,
    )


def test_the_real_node_is_ready_beside_the_simulated_nodes(k8s_cluster, real_node):
    nodes = json.loads(k8s_cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    by_name = {node["metadata"]["name"]: node for node in nodes}
    node = by_name[real_node.name]
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"
    assert node["metadata"]["labels"][real_node.label[0]] == real_node.label[1]
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "cri-o://1.36.3"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert {"type": "InternalIP", "address": real_node.ip} in node["status"]["addresses"]
    assert {key: node["spec"]["taints"][0][key] for key in ("key", "value", "effect")} == real_node.taint
    # The simulated GPU nodes are still there, and only they are kwok's.
    simulated = [
        name
        for name, item in by_name.items()
        if "kwok.x-k8s.io/node" in item["metadata"].get("annotations", {})
    ]
    assert simulated and real_node.name not in simulated


def test_the_harness_switched_on_exactly_the_workarounds_this_host_needs(real_node):
    recorded = {quirk["name"] for quirk in real_node.node.state()["quirks"]}
    assert recorded == {quirk.name for quirk in detect_quirks()}


def test_a_pod_runs_in_a_real_container_and_its_log_comes_through_kubelet(
    k8s_cluster, k8s_namespace, real_node
):
    apply_in(
        k8s_cluster,
        k8s_namespace,
        busybox_pod(
            "hello",
            "echo hello from $(hostname); id -u; cat /proc/self/limits | grep 'locked memory'",
            real_node,
        ),
    )
    wait_phase(k8s_cluster, k8s_namespace, "hello", "Succeeded")
    log = k8s_cluster.kubectl("logs", "-n", k8s_namespace, "hello").stdout
    assert log.splitlines()[0] == "hello from hello"
    assert log.splitlines()[1] == "0"
    assert log.splitlines()[2].startswith("Max locked memory")


def test_pods_find_each_other_through_cluster_dns_on_the_pod_network(k8s_cluster, k8s_namespace, real_node):
    server = busybox_pod("server", "echo pong | nc -l -p 8080", real_node, labels={"app": "pong"})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "pong"},
        "spec": {"clusterIP": "None", "selector": {"app": "pong"}, "ports": [{"port": 8080}]},
    }
    apply_in(k8s_cluster, k8s_namespace, server, service)
    wait_phase(k8s_cluster, k8s_namespace, "server", "Running")
    client = busybox_pod(
        "client",
        f"until nslookup pong.{k8s_namespace}.svc.cluster.local; do sleep 1; done; nc pong 8080 </dev/null",
        real_node,
    )
    apply_in(k8s_cluster, k8s_namespace, client)
    wait_phase(k8s_cluster, k8s_namespace, "client", "Succeeded")
    assert k8s_cluster.kubectl("logs", "-n", k8s_namespace, "client").stdout.splitlines()[-1] == "pong"


def test_a_crio_restart_keeps_running_containers_running(k8s_cluster, k8s_namespace, real_node):
    apply_in(k8s_cluster, k8s_namespace, busybox_pod("sleeper", "sleep 3600", real_node))
    wait_phase(k8s_cluster, k8s_namespace, "sleeper", "Running")
    before = json.loads(
        real_node.crictl(
            "ps", "--name", "main", "--label", f"io.kubernetes.pod.namespace={k8s_namespace}", "-o", "json"
        ).stdout
    )
    real_node.restart_crio()
    after = json.loads(
        real_node.crictl(
            "ps", "--name", "main", "--label", f"io.kubernetes.pod.namespace={k8s_namespace}", "-o", "json"
        ).stdout
    )
    assert [c["id"] for c in after["containers"]] == [c["id"] for c in before["containers"]]
    assert after["containers"][0]["state"] == "CONTAINER_RUNNING"
    exec_output = k8s_cluster.kubectl(
        "exec", "-n", k8s_namespace, "sleeper", "--", "echo", "still here"
    ).stdout
    assert exec_output.strip() == "still here"


def test_down_leaves_no_process_mount_bridge_or_cgroup_behind(k8s_cluster, real_node, tmp_path):
    real_node.node.down()
    try:
        assert real_node.node.leftovers() == []
        assert real_node.name not in k8s_cluster.kubectl("get", "nodes", "-o", "name").stdout
        # A claim left behind by a harness whose node died with its machine (its state file and
        # pid files still there) does not block the next node.
        stale = tmp_path / "stale-harness"
        (stale / "real-node").mkdir(parents=True)
        (stale / "real-node" / "state.json").write_text('{"ready": true}')
        (stale / "pids").mkdir()
        for name in real_node.node.COMPONENTS:
            (stale / "pids" / f"{name}.pid").write_text("999999 12345\n")
        owner_file = RUN_ROOT / "real-node.owner"
        owner_file.write_text(f"{stale}\n")
    finally:
        # The session's other real-node tests may run after this one.
        real_node.node.up()
    assert owner_file.read_text().strip() == str(real_node.node.harness.state_dir)

"""node_rollout's drain around a node's change, on the harness's real API server: the node is
cordoned and its pods evicted before the change, uncordoned after a change that passed, and
left cordoned, named in the roll's report, after one that failed.

The roll itself (batches, stopping, the report) runs on four podman nodes in the Molecule
scenario rolling_nodes; here the "change" of each node is a task that passes or fails, so that
what the API server holds can be read between the steps.
"""

from __future__ import annotations

import json
import secrets

import pytest
from k8s_harness import gpu_node
from playbook_runner import DEV_COLLECTIONS, ansible_playbook


def node_object(cluster, name):
    return json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)


@pytest.fixture
def nodes(k8s_cluster, k8s_namespace):
    """Two kwok nodes, each running a pod of a Deployment pinned to it."""
    suffix = secrets.token_hex(3)
    names = ["roll-a-%s" % suffix, "roll-b-%s" % suffix]
    k8s_cluster.harness.create_nodes([gpu_node(name) for name in names])
    for name in names:
        k8s_cluster.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": k8s_namespace},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "nodeSelector": {"kubernetes.io/hostname": name},
                            "containers": [{"name": "c", "image": "registry.example/idle:1"}],
                        },
                    },
                },
            }
        )
    for name in names:
        k8s_cluster.kubectl(
            "wait", "--for=jsonpath={.status.phase}=Running", "--timeout=60s", "-n", k8s_namespace,
            "pod", "-l", "app=%s" % name,
        )  # fmt: skip
    yield names, {name: pod_names(k8s_cluster, k8s_namespace, name) for name in names}
    k8s_cluster.kubectl("delete", "node", *names, "--wait=false", check=False)


def pods(cluster, namespace, app):
    listing = cluster.kubectl("get", "pods", "-n", namespace, "-l", "app=%s" % app, "-o", "json")
    return json.loads(listing.stdout)["items"]


def pod_names(cluster, namespace, app):
    return {pod["metadata"]["name"] for pod in pods(cluster, namespace, app)}


def roll(cluster, tmp_path, hosts, failing):
    """The provision_nodes.yml flow around a stand-in change: begin, change, finish; rescue."""
    inventory = {
        "fleet": {
            "hosts": {
                host: {"ansible_connection": "local", "node_rollout_k8s_node_name": node}
                for host, node in hosts.items()
            }
        }
    }
    play = [
        {
            "name": "Check",
            "hosts": "localhost",
            "gather_facts": False,
            "roles": ["gpuops.training.node_rollout"],
        },
        {
            "name": "Roll",
            "hosts": "fleet",
            "gather_facts": False,
            "serial": 1,
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": "gpuops.training.node_rollout",
                        "tasks_from": "begin",
                    }
                },
                {
                    "block": [
                        {
                            "name": "Change the node",
                            "ansible.builtin.fail": {"msg": "the runtime did not restart"},
                            "when": "inventory_hostname in failing",
                        },  # fmt: skip
                        {
                            "ansible.builtin.include_role": {
                                "name": "gpuops.training.node_rollout",
                                "tasks_from": "finish",
                            }
                        },
                    ],
                    "rescue": [
                        {
                            "ansible.builtin.include_role": {
                                "name": "gpuops.training.node_rollout",
                                "tasks_from": "failed",
                            }
                        }
                    ],
                },
            ],
        },
        {
            "name": "Report",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": "gpuops.training.node_rollout",
                        "tasks_from": "report",
                    },
                    "vars": {"node_rollout_nodes": "{{ groups['fleet'] }}"},
                }
            ],
        },
    ]
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(json.dumps(play))
    variables = {
        "node_rollout_drain": True,
        "node_rollout_kubeconfig": str(cluster.kubeconfig),
        "node_rollout_drain_timeout_s": 60,
        "node_rollout_max_fail_percentage": 0,
        "failing": failing,
        "ansible_python_interpreter": str(DEV_COLLECTIONS.parents[1] / ".venv" / "bin" / "python"),
    }
    return ansible_playbook(
        "-i", str(tmp_path / "inventory.json"), "-e", json.dumps(variables), str(tmp_path / "play.yml"),
        collections_path=DEV_COLLECTIONS, timeout=300,
    )  # fmt: skip


def test_a_node_is_drained_for_its_change_and_uncordoned_after_it(
    k8s_cluster, k8s_namespace, nodes, tmp_path
):
    (first, second), before = nodes
    run = roll(k8s_cluster, tmp_path, {"host-a": first, "host-b": second}, failing=[])
    assert run.rc == 0, run
    assert "2 of 2 nodes changed and passed preflight" in run.output
    for name in (first, second):
        assert not node_object(k8s_cluster, name)["spec"].get("unschedulable"), name
        # The drain evicted the node's pod: the Deployment's pod there is a new one.
        assert not before[name] & pod_names(k8s_cluster, k8s_namespace, name), name


def test_a_node_whose_change_failed_stays_cordoned_and_the_roll_stops_before_the_next(
    k8s_cluster, k8s_namespace, nodes, tmp_path
):
    (first, second), before = nodes
    run = roll(k8s_cluster, tmp_path, {"host-a": first, "host-b": second}, failing=["host-a"])
    assert run.rc != 0, run
    output = " ".join(run.output.split())
    assert "The roll failed on 1 node(s) and stopped, 1 node(s) untouched: host-b" in output, run
    assert "host-a: Change the node: the runtime did not restart" in output, run
    assert "Those nodes stay cordoned until they are fixed and rolled again" in output, run
    assert node_object(k8s_cluster, first)["spec"].get("unschedulable") is True
    assert not node_object(k8s_cluster, second)["spec"].get("unschedulable")
    # The failed node's pod was evicted and its replacement cannot be scheduled back there;
    # the untouched node kept its pod.
    assert not before[first] & pod_names(k8s_cluster, k8s_namespace, first)
    assert all(pod["status"]["phase"] == "Pending" for pod in pods(k8s_cluster, k8s_namespace, first))
    assert pod_names(k8s_cluster, k8s_namespace, second) == before[second]

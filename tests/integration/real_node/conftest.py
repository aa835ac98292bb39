"""Fixtures for the tests that run pods on the harness's real node (kubelet + CRI-O).

`real_node` (tests/harness/pytest_plugin.py) starts the node beside the simulated ones, once
per session. The training fixtures are the steps of `make cluster-demo`
(tests/harness/cluster_demo.py): the trainer image built from training/Containerfile into the
node's image store, the inventory's environment, a checkpoint volume per namespace. The tests
here never skip: a machine that cannot run the node fails them.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

import cluster_demo  # noqa: E402
from pytest_plugin import k8s_cluster, k8s_namespace, real_node  # noqa: E402

__all__ = [
    "k8s_cluster",
    "k8s_namespace",
    "real_node",
    "node_inventory_env",
    "provisioned_node",
    "training_namespace",
]


@pytest.fixture(scope="session")
def node_inventory_env(k8s_cluster, real_node):
    """The environment inventories/harness-real-node reads, with the trainer image built."""
    image = cluster_demo.build_trainer_image(k8s_cluster.harness)
    return cluster_demo.inventory_environment(k8s_cluster.harness, image)


@pytest.fixture(scope="session")
def node_provisioning(real_node, run_playbook, node_inventory_env):
    """Runs provision_nodes.yml once, and again whenever the node's CRI-O configuration lost
    the drop-in (a test that brings the node down and up starts it from a fresh one)."""
    dropin = Path(node_inventory_env["GPUOPS_REAL_NODE_CRIO_CONFIG_DIR"]) / "99-ulimits.conf"
    runs = []

    def provision():
        if not runs or not dropin.exists():
            run = run_playbook(
                "playbooks/provision_nodes.yml",
                cluster_demo.INVENTORY,
                timeout=900,
                extra_env=node_inventory_env,
            )
            assert run.rc == 0, run
            runs.append(run)
        return runs[-1]

    return provision


@pytest.fixture
def provisioned_node(node_provisioning):
    """The node as provision_nodes.yml leaves it: CRI-O's limits drop-in (at this host's hard
    limits), proved on fresh containers, and preflight passed. Returns that run."""
    return node_provisioning()


@pytest.fixture
def training_namespace(k8s_cluster, real_node, run_playbook, node_inventory_env):
    """A namespace made by provision_cluster.yml (training_namespace: quota, LimitRange, the
    checkpoint PVC bound to a hostPath volume, the trainer ServiceAccount)."""
    namespace = "rn-%s" % secrets.token_hex(3)
    cluster_demo.checkpoint_volume(k8s_cluster.harness, namespace)
    run = run_playbook(
        "playbooks/provision_cluster.yml",
        cluster_demo.INVENTORY,
        {"training_namespace_name": namespace},
        extra_env=node_inventory_env,
    )
    assert run.rc == 0, run
    yield namespace
    k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    cluster_demo.release_volumes(k8s_cluster.harness, namespace)

"""pytest fixtures for the real Kubernetes test harness (k8s_harness.py).

Use from a conftest.py (importing the fixtures works wherever the conftest
sits, unlike `pytest_plugins`, which pytest accepts only in top-level
conftests)::

    sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
    from pytest_plugin import k8s_cluster, k8s_namespace  # noqa: F401

`k8s_cluster` (session) brings the harness up, or reuses one that is already
running, and stops it afterwards only if it started it. A harness that cannot
start makes the tests fail, never skip. Set GPUOPS_HARNESS_KEEP=1 to leave a
cluster this session started running for inspection.

`real_node` (session) adds the real kubelet + CRI-O node (real_node.py) to that
cluster, the same way: started if needed, stopped afterwards only if started here.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from k8s_harness import Harness, HarnessError  # noqa: E402
from real_node import REAL_NODE_LABEL, REAL_NODE_TAINT  # noqa: E402


class K8sCluster:
    """What tests get from the `k8s_cluster` fixture."""

    def __init__(self, harness: Harness):
        self.harness = harness
        self.kubeconfig: Path = harness.kubeconfig
        self.server_url: str = harness.server_url

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the harness's kubectl against this cluster; raises on failure if check."""
        return self.harness.kubectl(*args, input=input, check=check, timeout=timeout)

    def apply(self, *documents: dict) -> None:
        """Server-side apply of manifests given as dicts."""
        self.harness.apply(documents)

    def serve_pod_log(
        self,
        namespace: str,
        pod_name: str,
        text_or_path: str | os.PathLike,
        container: str | None = None,
    ) -> Path:
        """Serve this log for the pod: a str is the log text, a Path a file to read.

        Plain text is converted to the CRI log format kwok requires. Works
        before or after the pod exists.
        """
        return self.harness.serve_pod_log(namespace, pod_name, text_or_path, container)

    def api_client(self):
        """A `kubernetes` Python client ApiClient configured for this cluster."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[K8sCluster]:
    harness = Harness()
    try:
        started_here = harness.up()
    except HarnessError as exc:
        pytest.fail(f"the Kubernetes test harness did not start: {exc}", pytrace=False)
    yield K8sCluster(harness)
    if started_here and not os.environ.get("GPUOPS_HARNESS_KEEP"):
        harness.down()


class RealNodeHandle:
    """What tests get from the `real_node` fixture."""

    def __init__(self, cluster: K8sCluster):
        self.cluster = cluster
        self.node = cluster.harness.real_node
        self.name: str = self.node.config.name
        self.ip: str = self.node.config.node_ip
        self.label: tuple[str, str] = REAL_NODE_LABEL
        self.taint: dict[str, str] = REAL_NODE_TAINT

    @property
    def placement(self) -> dict:
        """Pod spec fields that put a pod on the real node (and only there)."""
        return {
            "nodeSelector": {self.label[0]: self.label[1]},
            "tolerations": [
                {
                    "key": self.taint["key"],
                    "operator": "Equal",
                    "value": self.taint["value"],
                    "effect": self.taint["effect"],
                }
            ],
        }

    @property
    def environment(self) -> dict[str, str]:
        """Paths of the node: CRI-O's config and drop-in directory, socket, crictl, storage."""
        return self.node.environment()

    def crictl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.node.runtime.crictl(*args, check=check, timeout=timeout)

    def podman(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """podman on the image store CRI-O reads: what it builds, the node can run."""
        return self.node.runtime.podman(*args)

    def restart_crio(self, memlock: str | None = None) -> None:
        self.node.restart_crio(memlock)

    def restart_command(self) -> list[str]:
        """argv that restarts this node's CRI-O (its service control, for crio_limits)."""
        return [
            sys.executable,
            str(Path(__file__).resolve().parent / "k8s_harness.py"),
            "real-node",
            "restart-crio",
        ]


@pytest.fixture(scope="session")
def real_node(k8s_cluster: K8sCluster) -> Iterator[RealNodeHandle]:
    node = k8s_cluster.harness.real_node
    try:
        started_here = node.up()
    except HarnessError as exc:
        pytest.fail(f"the harness's real node did not start: {exc}", pytrace=False)
    yield RealNodeHandle(k8s_cluster)
    if started_here and not os.environ.get("GPUOPS_HARNESS_KEEP"):
        node.down()


@pytest.fixture
def k8s_namespace(k8s_cluster: K8sCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{base}-{secrets.token_hex(3)}"
    k8s_cluster.kubectl("create", "namespace", name)
    # Pods are rejected until the namespace's `default` ServiceAccount exists.
    k8s_cluster.kubectl("wait", "--for=create", "--timeout=30s", "-n", name, "serviceaccount/default")
    yield name
    # Do not wait: kwok deletes the pods, the namespace controller the rest.
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)

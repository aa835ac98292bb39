"""Fixtures for the Kubernetes and Run:ai launcher tests.

The harness fixtures come from tests/harness/pytest_plugin.py (imported, as in
tests/integration/cluster/conftest.py). The playbooks run with the installed collection
(`run_playbook` from tests/integration/conftest.py: `make collection` first).

The pods the launchers create run on kwok's simulated GPU nodes, so nothing runs in them:
their logs are served by the harness. Each pod's log is composed of real output - one rank
of a real two-rank gloo torchrun run of the trainer, made once per session here, and the
NCCL lines of one host of a real NCCL log from tests/unit/fixtures/nccl/published.
"""

from __future__ import annotations

import pathlib
import resource
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from cluster_helpers import create_checkpoint_pvc, create_launch_namespace, delete_launch_namespace  # noqa: E402
from fleet import run_trainer_ranks  # noqa: E402
from pytest_plugin import k8s_cluster, k8s_namespace  # noqa: E402

__all__ = ["k8s_cluster", "k8s_namespace", "launch_namespace", "trainer_rank_logs", "checkpoint_pvc"]

# The ranks' soft locked-memory limit in that run, lowered from whatever this machine gives
# (any process may lower its own), so the verdicts on it do not depend on the machine.
TRAINER_MEMLOCK_BYTES = 1 << 20


def lower_memlock():
    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (TRAINER_MEMLOCK_BYTES, hard))


@pytest.fixture(scope="session")
def trainer_rank_logs(tmp_path_factory):
    """Each rank's stdout and stderr of a real two-rank gloo torchrun run of the trainer."""
    return run_trainer_ranks(tmp_path_factory.mktemp("trainer-run"), preexec_fn=lower_memlock)


@pytest.fixture
def launch_namespace(k8s_cluster):
    """A fresh namespace with a short name: an Indexed Job's host FQDN must fit 64 characters."""
    name = create_launch_namespace(k8s_cluster)
    yield name
    delete_launch_namespace(k8s_cluster, name)


@pytest.fixture
def checkpoint_pvc(k8s_cluster, launch_namespace, tmp_path):
    """A bound PVC named "checkpoints" in the namespace (a hostPath PV the claim is bound to)."""
    return create_checkpoint_pvc(k8s_cluster, launch_namespace, tmp_path / "checkpoints")

"""Fixtures for the cluster roles' tests against the real test control plane.

The harness fixtures come from tests/harness/pytest_plugin.py (imported, not listed in
`pytest_plugins`, which pytest refuses below the top-level conftest). Playbooks run with
this working tree's roles and plugins: .build/dev-collections (made by tests/conftest.py)
links ansible_collections/gpuops/training to the repository.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

from playbook_runner import run_role_locally  # noqa: E402
from pytest_plugin import k8s_cluster, k8s_namespace  # noqa: E402

__all__ = ["k8s_cluster", "k8s_namespace", "run_role"]


@pytest.fixture(scope="session")
def run_role():
    """Run one role of this working tree on localhost with variables; returns a PlaybookRun."""
    return run_role_locally

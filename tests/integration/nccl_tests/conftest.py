"""The Kubernetes harness fixtures for the mpijob launcher's tests (tests/harness/pytest_plugin.py),
and the launch tests' helpers (tests/integration/launch/cluster_helpers.py: serving pod logs)."""

from __future__ import annotations

import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "launch"))

from pytest_plugin import k8s_cluster  # noqa: E402

__all__ = ["k8s_cluster"]

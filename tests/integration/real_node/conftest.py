"""Fixtures for the tests that run pods on the harness's real node (kubelet + CRI-O).

`real_node` (tests/harness/pytest_plugin.py) starts the node beside the simulated ones, once
per session. The tests here never skip: a machine that cannot run the node fails them.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

from pytest_plugin import k8s_cluster, k8s_namespace, real_node  # noqa: E402

__all__ = ["k8s_cluster", "k8s_namespace", "real_node"]

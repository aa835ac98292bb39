"""Load the Kubernetes test harness fixtures (tests/harness/pytest_plugin.py).

The fixtures are imported rather than listed in `pytest_plugins`: pytest
rejects `pytest_plugins` in a conftest below the top level, which this one is
whenever the run starts at tests/ or tests/integration/.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))

from pytest_plugin import k8s_cluster, k8s_namespace  # noqa: E402

__all__ = ["k8s_cluster", "k8s_namespace"]

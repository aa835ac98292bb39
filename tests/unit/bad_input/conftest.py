"""The bad-input suite runs modules with the helper the module tests use (run_module)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from bad_input_values import TALLY  # noqa: E402

_MODULES_CONFTEST = pathlib.Path(__file__).resolve().parents[1] / "plugins" / "modules" / "conftest.py"
_spec = importlib.util.spec_from_file_location("gpuops_module_tests_conftest", _MODULES_CONFTEST)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)

# The same fixture as tests/unit/plugins/modules/conftest.py, not a copy of it.
run_module = _helpers.run_module


def pytest_terminal_summary(terminalreporter):
    """The figures: bad inputs tried, and how each call ended."""
    if TALLY:
        terminalreporter.write_sep("-", "bad-input figures")
        for key in ("module calls", "filter calls"):
            total = TALLY[key]
            if not total:
                continue
            terminalreporter.write_line(
                "%s: %d tried, %d failed with a clean message naming the argument, %d accepted as valid, "
                "%d stopped while waiting, %d raised (each fails its test)"
                % (
                    key,
                    total,
                    TALLY[key + " with a clean error"],
                    TALLY[key + " accepted"],
                    TALLY[key + " stopped while waiting"],
                    total
                    - TALLY[key + " with a clean error"]
                    - TALLY[key + " accepted"]
                    - TALLY[key + " stopped while waiting"],
                )
            )

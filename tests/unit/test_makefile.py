"""make help lists every target the Makefile declares, so that none is found only by reading it."""

from __future__ import annotations

import pathlib
import re
import subprocess

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def declared_targets():
    text = (REPO_ROOT / "Makefile").read_text().replace("\\\n", " ")
    return {name for line in re.findall(r"^\.PHONY:(.*)$", text, re.MULTILINE) for name in line.split()}


def test_make_help_lists_every_declared_target():
    help_text = subprocess.run(
        ["make", "--no-print-directory", "-s", "-C", str(REPO_ROOT), "help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = set(re.findall(r"^make (\S+) +- ", help_text, re.MULTILINE))
    assert "check" in listed
    assert listed == declared_targets() - {"help"}


# The fixtures that bring the control plane up (an attribute such as Harness().real_node is not one).
HARNESS_FIXTURES = re.compile(r"(?<![.\w])(k8s_cluster|k8s_namespace|real_node)\b")


def test_integration_tests_that_use_the_harness_run_in_its_stream():
    """make integration runs the harness's tests and the host's side by side: a test file that
    asks for the control plane must be in INTEGRATION_ON_HARNESS, or two sessions would share
    (and one would bring down) one harness."""
    text = (REPO_ROOT / "Makefile").read_text().replace("\\\n", " ")
    (listed,) = re.findall(r"^INTEGRATION_ON_HARNESS :=(.*)$", text, re.MULTILINE)
    on_harness = [REPO_ROOT / path for path in listed.split()]
    assert all(path.exists() for path in on_harness), listed
    integration = REPO_ROOT / "tests" / "integration"
    users = {
        path
        for path in integration.rglob("*.py")
        if path.name.startswith(("test_", "conftest")) and HARNESS_FIXTURES.search(path.read_text())
    }
    outside = sorted(
        str(path.relative_to(REPO_ROOT))
        for path in users
        if path != integration / "conftest.py" and not any(path.is_relative_to(root) for root in on_harness)
    )
    assert users and outside == []


def test_molecule_runs_harness_smoke_first_then_node_scenarios_then_those_on_the_shared_harness():
    import importlib.util

    script = REPO_ROOT / "tests" / "tools" / "run_molecule.py"
    spec = importlib.util.spec_from_file_location("run_molecule", script)
    run_molecule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_molecule)
    scenarios = run_molecule.ordered(run_molecule.all_scenarios())
    assert scenarios[0] == "harness_smoke"
    on_harness = [name for name in scenarios if run_molecule.uses_harness(name)]
    node_only = [name for name in scenarios if not run_molecule.uses_harness(name)]
    assert {"crio_limits", "containerd_limits"} <= set(node_only) and "training_operator" in on_harness
    # Once the shared harness is up, no node scenario waits behind it.
    shared = [name for name in on_harness if name != "harness_smoke"]
    assert scenarios == ["harness_smoke", *node_only, *shared]
    assert run_molecule.main(["no_such_scenario"]) == 2

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
    listed = " ".join(
        make_list(name) for name in ("INTEGRATION_ON_REAL_NODE_HARNESS", "INTEGRATION_ON_SIMULATED_HARNESS")
    )
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


def make_list(name):
    text = (REPO_ROOT / "Makefile").read_text().replace("\\\n", " ")
    (listed,) = re.findall(r"^%s :=(.*)$" % name, text, re.MULTILINE)
    return listed


def test_the_harness_lanes_cover_every_harness_test_once_and_only_one_may_start_the_real_node():
    """The harness's tests run in two lanes on two harnesses: a file in both would run twice, and
    the real node (one a machine) may only be started by the lane whose harness holds it."""
    real_node_lane = [REPO_ROOT / path for path in make_list("INTEGRATION_ON_REAL_NODE_HARNESS").split()]
    simulated_lane = [REPO_ROOT / path for path in make_list("INTEGRATION_ON_SIMULATED_HARNESS").split()]
    assert "$(INTEGRATION_ON_REAL_NODE_HARNESS) $(INTEGRATION_ON_SIMULATED_HARNESS)" in make_list(
        "INTEGRATION_ON_HARNESS"
    )
    assert not any(
        a == b or a.is_relative_to(b) or b.is_relative_to(a) for a in real_node_lane for b in simulated_lane
    )
    uses_real_node = re.compile(r"(?<![.\w])real_node\b(?!\.)")
    starters = [
        path
        for root in simulated_lane
        for path in ([root] if root.is_file() else root.rglob("*.py"))
        if uses_real_node.search(re.sub(r'"""[\s\S]*?"""', "", path.read_text()))
    ]
    assert starters == []


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

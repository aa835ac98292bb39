"""benchmarks/faults/converge.py runs against the harness and reports what it promises."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "faults" / "converge.py"


def test_the_converge_benchmark_reports_both_runs_and_their_ratio(k8s_cluster, tmp_path):
    out = tmp_path / "converge.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--roles", "training_namespace", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads(out.read_text())
    result = summary["roles"]["training_namespace"]
    assert result["first_changed"] >= 1
    assert result["second_changed"] == 0  # the second run is a real no-op
    ratio = result["second_run_s"] / result["first_converge_s"]
    assert result["second_to_first"] == pytest.approx(ratio, abs=0.01)
    assert summary["roles_meeting_aim"] in ([], ["training_namespace"])
    # The same objects through kubectl apply --server-side, a no-op too, measured beside it;
    # the role still changes nothing afterwards.
    assert result["objects"] >= 5 and result["kubectl_apply_s"] > 0
    kubectl_ratio = result["second_run_s"] / result["kubectl_apply_s"]
    assert result["second_to_kubectl"] == pytest.approx(kubectl_ratio, rel=0.01)
    assert result["changed_after_kubectl"] == 0
    # ansible-playbook's own start, timed beside them, taken off the role's run.
    assert 0 < result["playbook_startup_s"] < result["second_run_s"]
    less_startup = (result["second_run_s"] - result["playbook_startup_s"]) / result["kubectl_apply_s"]
    assert result["second_less_startup_to_kubectl"] == pytest.approx(less_startup, rel=0.01)


def test_an_unknown_role_is_refused_naming_the_choices():
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--roles", "training_namespace,nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert (
        "--roles: unknown nope; choose from training_namespace, secondary_networks, training_operator"
        in run.stderr
    )

"""training_log_info as Ansible runs it: arguments in, JSON out."""

from __future__ import annotations

import json

from ansible_collections.gpuops.training.plugins.modules import training_log_info


def metrics(rank, event, **fields):
    return json.dumps(
        {"schema": "gpuops.metrics/v1", "event": event, "rank": rank, "world_size": 2, "host": "h", **fields}
    )


def healthy_log(rank):
    return "\n".join(
        [
            metrics(rank, "run_start", backend="gloo", model="retinanet_resnet18_fpn"),
            metrics(rank, "epoch", epoch=0, loss=2.0, images_per_s=3.0),
            metrics(rank, "epoch", epoch=1, loss=1.0, images_per_s=3.0),
            metrics(rank, "checkpoint", epoch=1, step=8, path="/ck/1.pt"),
            metrics(rank, "run_end", status="ok"),
        ]
    )


def test_a_healthy_run_passes_with_expectations(run_module, tmp_path):
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.log").write_text(healthy_log(rank))
    run = run_module(
        training_log_info.main,
        {
            "paths": ["*.log"],
            "base_dir": str(tmp_path),
            "expect": {"world_size": 2, "loss_decreases": True, "checkpoint": True},
        },
    )
    assert run.exit_code == 0
    assert run.result["ok"] is True
    assert run.result["changed"] is False
    assert run.result["ranks_reporting"] == [0, 1]
    assert run.result["loss"]["fell"] is True


def test_unmet_expectations_fail_with_every_reason(run_module):
    run = run_module(
        training_log_info.main,
        {"pod_logs": [{"name": "master-0", "log": healthy_log(0)}], "expect": {"world_size": 2}},
    )
    assert run.failed
    assert (
        run.result["msg"] == "training run check failed:\n- ranks 1 never reported metrics (expected 2 ranks)"
    )
    assert run.result["ranks_reporting"] == [0]


def test_a_missing_path_is_named(run_module, tmp_path):
    run = run_module(training_log_info.main, {"paths": [str(tmp_path / "nope.log")]})
    assert run.failed
    assert run.result["msg"] == f"paths: {tmp_path / 'nope.log'} does not exist"


def test_no_source_at_all_is_a_clear_error(run_module):
    run = run_module(training_log_info.main, {})
    assert run.failed
    assert run.result["msg"] == "one of paths, content or pod_logs is required"


def test_a_wrong_expectation_type_is_rejected_by_the_argument_spec(run_module):
    run = run_module(training_log_info.main, {"content": "x", "expect": {"world_size": "two"}})
    assert run.failed
    assert "world_size" in run.result["msg"]


def test_check_mode_reads_the_same(run_module):
    run = run_module(training_log_info.main, {"content": healthy_log(0)}, check_mode=True)
    assert run.exit_code == 0
    assert run.result["ranks_reporting"] == [0]
    assert run.result["changed"] is False

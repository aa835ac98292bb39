"""training_log_info as Ansible runs it: arguments in, JSON out."""

from __future__ import annotations

import json

import pytest

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


MiB = 1 << 20


def memory_log(rank, leak_mib):
    """A 5-epoch run whose step samples keep LEAK_MIB more resident memory each epoch."""
    lines = [metrics(rank, "run_start", backend="gloo")]
    step = 0
    for epoch in range(5):
        for jitter in (0, 3, -2):
            step += 1
            rss = (1000 + leak_mib * epoch + jitter) * MiB
            lines.append(
                metrics(
                    rank, "step", epoch=epoch, step=step, memory={"rss_bytes": rss, "rss_peak_bytes": rss}
                )
            )
        lines.append(metrics(rank, "epoch", epoch=epoch, loss=1.0))
        spike = (1300 + leak_mib * epoch) * MiB
        lines.append(
            metrics(rank, "memory", phase="eval_after", epoch=epoch, step=step, memory={"rss_bytes": spike})
        )
    lines.append(metrics(rank, "run_end", status="ok"))
    return "\n".join(lines)


def test_memory_per_rank_and_a_leak_are_reported(run_module, tmp_path):
    (tmp_path / "rank0.log").write_text(memory_log(0, 0))
    (tmp_path / "rank1.log").write_text(memory_log(1, 40))
    run = run_module(training_log_info.main, {"paths": ["*.log"], "base_dir": str(tmp_path)})
    assert run.exit_code == 0 and run.result["changed"] is False
    rss0 = run.result["ranks"][0]["memory"]["quantities"]["host_rss"]
    # 15 step samples at 998, 1000 and 1003 MiB and 5 evaluations at 1300: the middle two of 20.
    assert rss0["median_bytes"] == int(1001.5 * MiB)
    assert (rss0["peak_bytes"], rss0["peak_phase"], rss0["peak_epoch"]) == (1300 * MiB, "eval_after", 0)
    assert run.result["memory_leak_tolerance_mib"] == 16
    assert [(leak["rank"], leak["kind"]) for leak in run.result["memory_leaks"]] == [(1, "host")]
    assert run.result["memory_leaks"][0]["rate_mib_per_epoch"] == 40.0


def test_expect_no_memory_leak_fails_naming_the_rank_and_rate(run_module):
    run = run_module(
        training_log_info.main,
        {"content": memory_log(1, 40), "expect": {"no_memory_leak": True}},
    )
    assert run.failed
    assert run.result["msg"].startswith(
        "training run check failed:\n- suspected host memory leak on rank 1: its per-epoch minimum "
        "resident set (RSS) grew by 40.0 MiB per epoch (epochs 1 to 4"
    )


def test_a_larger_tolerance_lets_the_same_growth_pass(run_module):
    run = run_module(
        training_log_info.main,
        {"content": memory_log(1, 40), "memory_leak_tolerance_mib": 64, "expect": {"no_memory_leak": True}},
    )
    assert run.exit_code == 0
    assert run.result["memory_leaks"] == []
    assert run.result["memory_leak_tolerance_mib"] == 64


def test_a_negative_tolerance_is_named(run_module):
    run = run_module(training_log_info.main, {"content": memory_log(0, 0), "memory_leak_tolerance_mib": -1})
    assert run.failed
    assert (
        run.result["msg"]
        == "memory_leak_tolerance_mib must be a number of MiB per epoch of at least 0, got -1.0"
    )


def test_a_killed_pods_rank_is_named_with_its_last_memory_sample(run_module, tmp_path):
    sample = {"rss_bytes": 1 << 30, "cgroup_working_set_bytes": 3 << 30, "cgroup_limit_bytes": 4 << 30}
    (tmp_path / "rn-0-abc.log").write_text(healthy_log(0))
    (tmp_path / "rn-1-xyz.log").write_text(
        "\n".join(
            [
                metrics(1, "run_start", backend="gloo"),
                metrics(1, "memory", phase="checkpoint_write_before", epoch=0, step=4, memory=sample),
            ]
        )
    )
    kill = {
        "pod": "rn-1-xyz",
        "container": "trainer",
        "exit_code": 137,
        "reason": "OOMKilled",
        "oom_killed": True,
    }
    run = run_module(
        training_log_info.main,
        {
            "paths": ["*.log"],
            "base_dir": str(tmp_path),
            "expect": {"world_size": 2},
            "container_kills": [kill],
        },
    )
    assert run.failed
    assert run.result["msg"] == (
        "training run check failed:\n- pod rn-1-xyz: container trainer exited with code 137 (OOMKilled: the "
        "kernel's OOM killer stopped it at its memory limit); rank 1 stopped; last memory sample (rank 1): "
        "RSS 1Gi, cgroup working set 3Gi of its 4Gi limit, in phase checkpoint_write_before (epoch 0, step 4)"
    )
    assert run.result["ranks"][1]["last_memory"]["phase"] == "checkpoint_write_before"


def test_a_kill_without_a_pod_is_refused_naming_the_option(run_module, tmp_path):
    (tmp_path / "rank0.log").write_text(healthy_log(0))
    run = run_module(
        training_log_info.main,
        {"paths": ["*.log"], "base_dir": str(tmp_path), "container_kills": [{"container": "trainer"}]},
    )
    assert run.failed
    assert run.result["msg"].startswith("container_kills[0] must name its pod")


def timed_log(rank, compute_s):
    """Two step records whose timing says the rank computes COMPUTE_S seconds a step of 4 images."""
    timing = {"step_s": 2.0, "data_s": 0.0, "compute_s": compute_s, "collective_s": 2.0 - compute_s}
    return "\n".join(
        [metrics(rank, "run_start", backend="gloo", batch_size=4, grad_accum_steps=1)]
        + [metrics(rank, "step", step=step, images_per_s=2.0, timing=timing) for step in (1, 2)]
    )


def test_a_straggler_is_named_with_the_pod_log_its_records_came_from(run_module, tmp_path):
    for rank, compute_s in enumerate([1.0, 1.0, 1.9]):
        (tmp_path / f"job-worker-{rank}.log").write_text(timed_log(rank, compute_s))
    run = run_module(training_log_info.main, {"paths": ["*.log"], "base_dir": str(tmp_path)})
    assert run.exit_code == 0
    assert run.result["straggler_percent"] == 20
    assert run.result["ranks"][2]["timing"]["compute_s"] == 1.9
    assert run.result["stragglers"] == [
        {
            "rank": 2,
            "compute_images_per_s": round(4 / 1.9, 6),
            "peer_median": 4.0,
            "percent_below": 47.4,
            "source": str(tmp_path / "job-worker-2.log"),
        }
    ]
    # 0 turns the check off.
    run = run_module(
        training_log_info.main, {"paths": ["*.log"], "base_dir": str(tmp_path), "straggler_percent": 0}
    )
    assert run.exit_code == 0 and run.result["stragglers"] == []


@pytest.mark.parametrize("percent", [-1, 100, 150, "nan", "inf"])
def test_a_straggler_percent_outside_0_to_100_is_named_with_what_is_expected(run_module, percent):
    run = run_module(training_log_info.main, {"content": timed_log(0, 1.0), "straggler_percent": percent})
    assert run.failed
    assert run.result["msg"] == (
        "straggler_percent must be a number of percent above 0 and below 100, or 0 to turn the check off, "
        "got %s" % float(percent)
    )
    assert "ranks" not in run.result  # refused before any log was read

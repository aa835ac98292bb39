"""Tests of the trainer-metrics parser on logs shaped like real torchrun runs."""

from __future__ import annotations

import itertools
import json

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource, collect_sources
from ansible_collections.gpuops.training.plugins.module_utils.training_log import (
    SCHEMA,
    check_expectations,
    parse_training_logs,
)

# torchrun's report when a worker exits non-zero (torch 2.x, copied from a real run here).
TORCHRUN_FAILURE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
gpuops_trainer.train FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_04:46:35
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 10306)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def record(event, rank, world_size=2, **fields):
    base = {
        "schema": SCHEMA,
        "event": event,
        "time": 1_700_000_000.0,
        "rank": rank,
        "local_rank": rank,
        "world_size": world_size,
        "host": "node-a",
        "attempt": 0,
    }
    base.update(fields)
    return json.dumps(base)


def rank_lines(rank, losses, world_size=2, finish=True, error=None):
    lines = [
        record("run_start", rank, world_size, model="retinanet_resnet18_fpn", backend="gloo", device="cpu")
    ]
    step = 0
    for epoch, loss in enumerate(losses):
        step += 4
        lines.append(
            record("step", rank, world_size, epoch=epoch, iter=3, step=step, loss=loss + 0.1, lr=0.01)
        )
        lines.append(record("epoch", rank, world_size, epoch=epoch, step=step, loss=loss, images_per_s=4.0))
        if rank == 0:
            lines.append(record("checkpoint", 0, world_size, epoch=epoch, step=step, path=f"/ck/e{epoch}.pt"))
    if finish:
        lines.append(
            record("run_end", rank, world_size, status="ok", epochs_completed=len(losses), step=step)
        )
    if error:
        lines.append(record("run_end", rank, world_size, status="error", error=error))
    return lines


def write_torchrun_logs(tmp_path, per_rank):
    """Lay files out the way torchrun --log-dir --redirects 3 does."""
    for rank, (stdout, stderr) in per_rank.items():
        directory = tmp_path / "logs" / "run_abc" / "attempt_0" / str(rank)
        directory.mkdir(parents=True)
        (directory / "stdout.log").write_text("\n".join(stdout) + "\n")
        (directory / "stderr.log").write_text("\n".join(stderr) + "\n")
    return [str(tmp_path / "logs" / "**" / "*.log")]


def test_a_healthy_two_rank_run_meets_every_expectation(tmp_path):
    paths = write_torchrun_logs(
        tmp_path,
        {0: (rank_lines(0, [2.0, 1.5, 1.1]), ["warming up"]), 1: (rank_lines(1, [2.2, 1.7, 1.3]), [])},
    )
    result = parse_training_logs(collect_sources(paths=paths))
    assert result["world_size"] == 2
    assert result["ranks_reporting"] == [0, 1]
    assert [row["loss"] for row in result["epochs"]] == [2.1, 1.6, 1.2]
    assert result["loss"]["fell"] is True
    assert result["throughput"] == {"images_per_s": 8.0, "ranks_counted": 2}
    assert len(result["checkpoints"]) == 3
    assert result["backend"] == "gloo"
    assert all(rank["status"] == "ok" for rank in result["ranks"])
    expect = {"world_size": 2, "loss_decreases": True, "checkpoint": True, "min_epochs": 3}
    assert check_expectations(result, expect) == []


def test_a_crashed_rank_is_named_with_its_exit_code_and_last_lines(tmp_path):
    traceback = ["Traceback (most recent call last):", '  File "train.py", line 9', "RuntimeError: boom"]
    paths = write_torchrun_logs(
        tmp_path,
        {
            0: (rank_lines(0, [2.0], finish=False), []),
            1: (rank_lines(1, [2.1], finish=False, error="RuntimeError: boom"), traceback),
        },
    )
    (tmp_path / "launcher.log").write_text(TORCHRUN_FAILURE)
    paths.append(str(tmp_path / "launcher.log"))
    result = parse_training_logs(collect_sources(paths=paths))
    assert result["launcher_failures"] == [
        {
            "root_cause": True,
            "time": "2026-11-22_04:46:35",
            "host": "node-a",
            "rank": 1,
            "local_rank": 1,
            "exitcode": 3,
            "error_file": "<N/A>",
            "traceback": "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        }
    ]
    failures = check_expectations(result, {"world_size": 2})
    assert failures[0].startswith(
        "rank 1 failed on host node-a with exit code 3 (first failure): RuntimeError: boom"
    )
    assert "RuntimeError: boom" in failures[0].splitlines()[-1]
    assert "last lines of rank 1" in failures[0]
    assert failures[1] == (
        "rank 0 stopped before finishing (terminated by the launcher after the failure above) on node node-a"
    )


def test_a_rank_that_never_reported_is_missing():
    content = "\n".join(rank_lines(0, [2.0, 1.0], world_size=2))
    result = parse_training_logs([LogSource("content", text=content)])
    assert check_expectations(result, {"world_size": 2}) == [
        "ranks 1 never reported metrics (expected 2 ranks)"
    ]


def test_a_loss_that_did_not_fall_fails_the_expectation():
    content = "\n".join(rank_lines(0, [1.0, 1.2], world_size=1))
    result = parse_training_logs([LogSource("content", text=content)])
    assert check_expectations(result, {"loss_decreases": True}) == [
        "loss did not fall: first epoch 1.0000, last epoch 1.2000"
    ]


def test_a_single_epoch_cannot_show_a_trend():
    result = parse_training_logs([LogSource("content", text="\n".join(rank_lines(0, [1.0], world_size=1)))])
    assert check_expectations(result, {"loss_decreases": True}) == [
        "loss trend unknown: fewer than two epochs with a loss were reported"
    ]


def test_non_finite_loss_is_reported():
    lines = rank_lines(0, [1.0, 0.5], world_size=1)
    lines = [line.replace('"loss": 0.5', '"loss": NaN') for line in lines]
    result = parse_training_logs([LogSource("content", text="\n".join(lines))])
    assert check_expectations(result, {"loss_decreases": True}) == [
        "loss is not finite (NaN or inf) in the epoch records"
    ]


def test_no_checkpoint_is_reported_when_one_is_required():
    lines = [line for line in rank_lines(0, [1.0, 0.5], world_size=1) if '"checkpoint"' not in line]
    result = parse_training_logs([LogSource("content", text="\n".join(lines))])
    assert check_expectations(result, {"checkpoint": True}) == [
        "no checkpoint was written (no 'checkpoint' record in the metrics)"
    ]


def test_prefixed_and_interleaved_streams_are_attributed_to_their_ranks():
    rank0 = [f"[default0]:{line}" for line in rank_lines(0, [2.0, 1.0])]
    rank1 = [
        f"[pod/job-worker-0/pytorch] 2026-11-22T04:00:00.000000000Z {line}"
        for line in rank_lines(1, [2.0, 1.0])
    ]
    interleaved = [line for pair in itertools.zip_longest(rank0, rank1) for line in pair if line]
    interleaved.append("[default1]:Traceback (most recent call last):")
    result = parse_training_logs([LogSource("console", text="\n".join(interleaved))])
    assert result["ranks_reporting"] == [0, 1]
    assert result["ranks"][1]["last_lines"] == ["Traceback (most recent call last):"]
    assert check_expectations(result, {"world_size": 2, "loss_decreases": True}) == []


def two_node_pod_logs(traceback_first=False):
    """Two pods of two workers each (torchrun --tee tags [default0]/[default1]): ranks 2 and 3
    run in worker-1 as its local ranks 0 and 1."""
    logs = {}
    for node in (0, 1):
        lines = []
        for local in (0, 1):
            rank = node * 2 + local
            lines += [
                f"[default{local}]:" + line.replace('"local_rank": %d' % rank, '"local_rank": %d' % local)
                for line in rank_lines(rank, [2.0, 1.0], world_size=4)
            ]
        traceback = "[default1]:RuntimeError: boom on node %d" % node
        lines = [traceback, *lines] if traceback_first else [*lines, traceback]
        logs[f"job-worker-{node}"] = "\n".join(lines)
    return [LogSource(name, text=text) for name, text in logs.items()]


@pytest.mark.parametrize("traceback_first", [False, True], ids=["after-records", "before-records"])
def test_torchrun_local_rank_tags_go_to_the_global_rank_of_their_node(traceback_first):
    result = parse_training_logs(two_node_pod_logs(traceback_first))
    assert result["ranks_reporting"] == [0, 1, 2, 3]
    # worker-1's [default1] is rank 3, not rank 1.
    last_lines = result["ranks"][3]["last_lines"]
    assert last_lines[0 if traceback_first else -1] == "RuntimeError: boom on node 1"
    assert "RuntimeError: boom on node 1" not in result["ranks"][1]["last_lines"]
    assert "RuntimeError: boom on node 0" in result["ranks"][1]["last_lines"]
    assert result["unattributed_tail"] == {}


def test_local_rank_lines_of_a_pod_without_records_are_not_given_to_another_nodes_rank():
    lost_pod = LogSource("job-worker-1", text="[default1]:RuntimeError: CUDA error")
    sources = [*two_node_pod_logs()[:1], lost_pod]
    # Another pod's records show a second node (its local rank 0 is rank 2), and worker-1 has
    # no record to tell its offset: its line stays unattributed, named by its local rank.
    multi = [
        LogSource("job-worker-9", text=record("run_start", 2, 4, local_rank=0)),
        *sources,
    ]
    result = parse_training_logs(multi)
    assert result["unattributed_tail"] == {"job-worker-1 [local rank 1]": ["RuntimeError: CUDA error"]}
    assert "RuntimeError: CUDA error" not in result["ranks"][1]["last_lines"]


def test_on_one_node_local_rank_lines_without_records_are_that_rank():
    lines = [f"[default0]:{line}" for line in rank_lines(0, [2.0, 1.0])] + [
        "[default1]:Traceback (most recent call last):"
    ]
    result = parse_training_logs([LogSource("console", text="\n".join(lines))])
    assert result["ranks"][1]["last_lines"] == ["Traceback (most recent call last):"]


def test_a_restarted_run_counts_restarts_and_resumes_and_keeps_the_latest_epochs():
    first = rank_lines(0, [2.0, 1.5], world_size=1, finish=False)
    second = [
        record("run_start", 0, 1, attempt=1, backend="gloo"),
        record("resume", 0, 1, attempt=1, path="/ck/e1.pt", epoch=2, step=8),
        record("epoch", 0, 1, attempt=1, epoch=2, step=12, loss=1.0, images_per_s=4.0),
        record("run_end", 0, 1, attempt=1, status="ok"),
    ]
    result = parse_training_logs([LogSource("content", text="\n".join(first + second))])
    assert result["restarts"] == 1
    assert result["resumes"] == [{"rank": 0, "epoch": 2, "step": 8, "path": "/ck/e1.pt", "attempt": 1}]
    assert [row["epoch"] for row in result["epochs"]] == [0, 1, 2]
    assert result["ranks"][0]["status"] == "ok"


@pytest.mark.parametrize(
    "garbage",
    [
        '{"schema": "gpuops.metrics/v1", "event": "step", "rank": 0, "loss": 1.2',  # cut short
        '{"schema": "gpuops.metrics/v1", "event": "step"}',  # no rank
        "\xff\xfe binary \x00 noise",
        "{not json at all gpuops.metrics/v1",
    ],
)
def test_broken_metrics_lines_become_parse_warnings_not_errors(garbage):
    result = parse_training_logs([LogSource("content", text=garbage)])
    assert result["records"] == 0
    if garbage.startswith('{"schema"'):
        assert result["parse_warnings"]


def test_the_trend_compares_epoch_medians_when_the_trainer_records_them():
    # One spiking step lifts the last epoch's mean above the first; its median still fell.
    lines = [
        record("epoch", 0, 1, epoch=0, loss=1.8, loss_median=1.75),
        record("epoch", 0, 1, epoch=1, loss=2.4, loss_median=1.5),
    ]
    result = parse_training_logs([LogSource("content", text="\n".join(lines))])
    assert result["loss"]["measure"] == "median step loss per epoch"
    assert (result["loss"]["first"], result["loss"]["last"], result["loss"]["fell"]) == (1.75, 1.5, True)
    assert [row["loss"] for row in result["epochs"]] == [1.8, 2.4]


def test_the_first_failure_is_blamed_not_the_ranks_whose_collectives_broke_after_it():
    # Rank 1 fails first; rank 0 then reports gloo's broken-connection error. Without
    # torchrun's report, the earliest error decides.
    rank0 = rank_lines(0, [2.0], finish=False)
    rank0.append(
        record("run_end", 0, 2, status="error", error="RuntimeError: gloo connection closed", time=20.0)
    )
    rank1 = rank_lines(1, [2.1], finish=False)
    rank1.append(record("run_end", 1, 2, status="error", error="InjectedFault: rank 1 at step 3", time=10.0))
    result = parse_training_logs(
        [LogSource("r0", text="\n".join(rank0)), LogSource("r1", text="\n".join(rank1))]
    )
    failures = check_expectations(result, {"world_size": 2})
    assert failures[0].startswith("rank 1 failed on host node-a: InjectedFault: rank 1 at step 3")
    assert failures[1].startswith("rank 0 stopped before finishing")


def test_torchrun_root_cause_wins_over_error_times():
    rank0 = rank_lines(0, [2.0], finish=False)
    rank0.append(record("run_end", 0, 2, status="error", error="gloo connection closed", time=1.0))
    rank1 = rank_lines(1, [2.1], finish=False)
    launcher = TORCHRUN_FAILURE
    result = parse_training_logs(
        [
            LogSource(n, text=t)
            for n, t in (("r0", "\n".join(rank0)), ("r1", "\n".join(rank1)), ("l", launcher))
        ]
    )
    failures = check_expectations(result, {"world_size": 2})
    assert failures[0].startswith("rank 1 exited on host node-a with exit code 3 (first failure)")


def test_the_step_curve_averages_the_ranks_at_each_recorded_step():
    lines = rank_lines(0, [2.0, 1.5, 1.1]) + rank_lines(1, [2.2, 1.7, 1.3])
    result = parse_training_logs([LogSource("inline", text="\n".join(lines))])
    assert result["steps"] == [
        {"step": 4, "ranks": 2, "loss": 2.2, "images_per_s_per_rank": None},
        {"step": 8, "ranks": 2, "loss": 1.7, "images_per_s_per_rank": None},
        {"step": 12, "ranks": 2, "loss": 1.3, "images_per_s_per_rank": None},
    ]


def test_a_long_run_is_thinned_to_a_bounded_curve_that_still_spans_the_run():
    steps = 10_000
    lines = (
        record("step", 0, 1, epoch=0, iter=step, step=step, loss=10.0 / step, images_per_s=5.0)
        for step in range(1, steps + 1)
    )
    result = parse_training_logs([LogSource("inline", text="\n".join(lines))])
    curve = result["steps"]
    assert 1024 <= len(curve) <= 2048
    strides = {b["step"] - a["step"] for a, b in itertools.pairwise(curve)}
    assert len(strides) == 1  # evenly spaced
    assert curve[-1]["step"] > steps - 2 * strides.pop()
    assert all(point["images_per_s_per_rank"] == 5.0 for point in curve)
    assert curve[0]["loss"] > curve[-1]["loss"]


def memlock_run(limits):
    """Two ranks whose run_start reports ``limits[rank]`` (left out when None)."""
    lines = []
    for rank, limit in enumerate(limits):
        fields = {} if limit is None else {"memlock_bytes": limit, "memlock_max_bytes": limit, "uid": 1000}
        lines.append(record("run_start", rank, **fields))
        lines.append(record("run_end", rank, status="ok", epochs_completed=0, step=0))
    return parse_training_logs([LogSource("pod.log", text="\n".join(lines))])


def test_ranks_that_run_with_unlimited_locked_memory_meet_the_rdma_expectation():
    result = memlock_run([-1, -1])
    assert result["memlock"] == {
        "ranks_reporting": [0, 1],
        "limited_ranks": [],
        "min_bytes": None,
        "unlimited": True,
    }
    assert [rank["memlock_bytes"] for rank in result["ranks"]] == [-1, -1]
    assert [rank["uid"] for rank in result["ranks"]] == [1000, 1000]
    assert check_expectations(result, {"memlock_unlimited": True}) == []


def test_a_locked_memory_limit_is_named_per_rank_with_the_remedy():
    result = memlock_run([-1, 8 << 20])
    assert result["memlock"]["limited_ranks"] == [1] and result["memlock"]["min_bytes"] == 8 << 20
    assert result["memlock"]["unlimited"] is False
    # Not asked for: nothing fails.
    assert check_expectations(result, {}) == []
    (message,) = check_expectations(result, {"memlock_unlimited": True})
    assert message.startswith(
        "ranks 1 (8Mi) run with a locked-memory limit (RLIMIT_MEMLOCK), expected unlimited: "
    )
    for remedy in ("ibv_reg_mr", "gpuops.training.crio_limits", "containerd_limits", "machineconfig_limits"):
        assert remedy in message


def test_a_minimum_in_bytes_passes_ranks_at_or_above_it_and_names_the_others():
    result = memlock_run([8 << 20, 65536, -1])
    (message,) = check_expectations(result, {"memlock_min_bytes": 8 << 20})
    assert message.startswith(
        "ranks 1 (64Ki) run with a locked-memory limit (RLIMIT_MEMLOCK), expected at least 8Mi: RDMA"
    )
    assert check_expectations(memlock_run([8 << 20, -1]), {"memlock_min_bytes": 8 << 20}) == []
    # unlimited, when asked for, wins over the minimum.
    assert (
        len(check_expectations(memlock_run([8 << 20]), {"memlock_unlimited": True, "memlock_min_bytes": 1}))
        == 1
    )


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ([-1, None], "ranks 1 did not report their locked-memory limit"),
        ([], "ranks (none reported) did not report their locked-memory limit"),
        ([65536, True], "ranks 0 (64Ki) run with a locked-memory limit"),
    ],
)
def test_a_limit_that_cannot_be_verified_is_a_failure_when_asked_for(limits, message):
    result = memlock_run(limits)
    assert any(message in failure for failure in check_expectations(result, {"memlock_unlimited": True}))


def test_orjson_and_json_read_every_line_alike(monkeypatch):
    """orjson refuses NaN, Infinity and integers past 64 bits, which json (and the trainer) write:
    those lines are read by json, and the result is the same with or without orjson."""
    import orjson  # noqa: F401 - a requirement of the collection's controller (meta/ee-requirements.txt)

    from ansible_collections.gpuops.training.plugins.module_utils import training_log

    lines = rank_lines(0, [1.0, 0.5, 0.25], world_size=1)
    lines = [
        line.replace('"loss": 0.5', '"loss": NaN').replace('"loss": 0.25', '"loss": Infinity')
        for line in lines
    ]
    lines.append(record("memory", 0, world_size=1, phase="epoch_end", memory={"rss_bytes": 2**70}))
    text = "\n".join(lines)
    fast = parse_training_logs([LogSource("content", text=text)])
    assert training_log._fast_loads is not None
    monkeypatch.setattr(training_log, "_fast_loads", None)
    plain = parse_training_logs([LogSource("content", text=text)])
    assert repr(fast) == repr(plain)  # repr: NaN != NaN
    assert fast["records"] == len(lines)
    assert fast["parse_warnings"] == []

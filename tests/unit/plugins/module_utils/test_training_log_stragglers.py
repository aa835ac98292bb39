"""Step timing in the trainer's metrics: each rank's time split and the stragglers named from it.

The logs are generated the way the trainer writes them (training/README.md, Step timing): a
``timing`` object in every ``step`` record with the mean seconds per optimizer step of the
record's window, beside ``images_per_s``. In synchronous DDP every rank's ``step_s`` is the
same; a straggler has the longest ``compute_s`` and the shortest ``collective_s``.
"""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.training_log import (
    SCHEMA,
    describe_straggler,
    find_stragglers,
    parse_training_logs,
)

BATCH, ACCUM = 4, 2  # 8 images per optimizer step
# A healthy rank's compute seconds per step, record by record: a few percent of noise.
NOISE = [0.0, 0.03, -0.02, 0.05, 0.01, -0.04, 0.02, 0.06, -0.03, 0.0]


def record(event, rank, **fields):
    base = {"schema": SCHEMA, "event": event, "time": 1.0, "rank": rank, "local_rank": 0, "world_size": 4,
            "host": "trainer-worker-%d" % rank, "node": "gpu-node-%d" % rank, "attempt": 0}  # fmt: skip
    base.update(fields)
    return json.dumps(base)


def rank_log(rank, compute_s=1.0, step_s=1.5, records=10, timing=True, images_per_s=True):
    """A rank's metrics: run_start, RECORDS step records, run_end. Its compute takes
    COMPUTE_S seconds a step (with noise), the rest of STEP_S it waits in the collectives."""
    lines = [record("run_start", rank, batch_size=BATCH, grad_accum_steps=ACCUM, backend="nccl")]
    for index in range(records):
        compute = compute_s * (1 + NOISE[index % len(NOISE)])
        fields = {"epoch": 0, "step": 20 * (index + 1), "loss": 1.0}
        if images_per_s:
            fields["images_per_s"] = BATCH * ACCUM / step_s
        if timing:
            fields["timing"] = {"step_s": step_s, "data_s": 0.01, "compute_s": compute,
                                "collective_s": step_s - 0.01 - compute}  # fmt: skip
        lines.append(record("step", rank, **fields))
    lines.append(record("run_end", rank, status="ok"))
    return "\n".join(lines)


def pod_logs(*logs):
    """Each rank's log as the training_job role keeps a pod's: logs/<pod>.log."""
    return [
        LogSource("/runs/r1/logs/trainer-worker-%d.log" % rank, text=text) for rank, text in enumerate(logs)
    ]


def test_each_rank_gets_the_median_of_its_timing_and_its_compute_throughput():
    result = parse_training_logs(pod_logs(rank_log(0, compute_s=1.0), rank_log(1, compute_s=0.5)))
    rank0, rank1 = result["ranks"]
    assert rank0["timing"] == {
        "step_s": 1.5,
        "data_s": 0.01,
        "compute_s": pytest.approx(1.005),  # the median of the noisy records: 1 + (0 + 0.01) / 2
        "collective_s": pytest.approx(1.5 - 0.01 - 1.005),
        "records": 10,
    }
    # images/s times step time: 8 images per optimizer step.
    assert rank0["images_per_step"] == 8
    assert rank0["compute_images_per_s"] == pytest.approx(8 / 1.005, rel=1e-5)
    assert rank1["compute_images_per_s"] == pytest.approx(8 / 0.5025, rel=1e-5)
    assert rank0["timing_source"] == "/runs/r1/logs/trainer-worker-0.log"


def test_without_images_per_s_the_images_per_step_come_from_batch_size_and_accumulation():
    result = parse_training_logs(pod_logs(rank_log(0, images_per_s=False), rank_log(1, images_per_s=False)))
    assert result["ranks"][0]["images_per_step"] == BATCH * ACCUM
    assert result["ranks"][0]["compute_images_per_s"] == pytest.approx(8 / 1.005, rel=1e-5)


def test_a_rank_30_percent_slower_in_compute_is_named_with_its_log():
    logs = [rank_log(0), rank_log(1), rank_log(2, compute_s=1.3), rank_log(3)]
    result = parse_training_logs(pod_logs(*logs))
    (straggler,) = result["stragglers"]
    assert straggler["rank"] == 2
    assert straggler["source"] == "/runs/r1/logs/trainer-worker-2.log"  # names the pod
    rates = [summary["compute_images_per_s"] for summary in result["ranks"]]
    assert straggler["compute_images_per_s"] == rates[2]
    assert straggler["peer_median"] == pytest.approx(rates[0])  # the median of all four
    # 1/1.3 of its peers' throughput: 23 % below.
    assert straggler["percent_below"] == pytest.approx(23.1, abs=0.1)
    assert result["straggler_percent"] == 20
    assert describe_straggler(straggler, 20, "pod trainer-worker-2, node gpu-node-2").startswith(
        "straggler: rank 2 (pod trainer-worker-2, node gpu-node-2) computes 6.12 images/s, 23.1 % below "
        "the median of all ranks (7.96 images/s; threshold 20 %)"
    )


def test_a_healthy_spread_is_not_a_straggler():
    # 15 % between the fastest and the slowest rank, as ranks of one job do vary.
    logs = [rank_log(0, compute_s=1.0), rank_log(1, compute_s=1.15), rank_log(2, compute_s=0.95), rank_log(3)]
    result = parse_training_logs(pod_logs(*logs))
    assert result["stragglers"] == []
    assert all(summary["compute_images_per_s"] > 0 for summary in result["ranks"])


def test_a_lower_threshold_names_what_the_default_lets_pass_and_0_turns_it_off():
    logs = [rank_log(0), rank_log(1, compute_s=1.15), rank_log(2), rank_log(3)]
    stragglers = parse_training_logs(pod_logs(*logs), straggler_percent=10)["stragglers"]
    assert [straggler["rank"] for straggler in stragglers] == [1]
    slow = [rank_log(0), rank_log(1, compute_s=3.0), rank_log(2), rank_log(3)]
    assert parse_training_logs(pod_logs(*slow), straggler_percent=0)["stragglers"] == []


def test_ranks_without_timing_are_left_out_never_flagged():
    # An older trainer's rank: no timing, so nothing to judge it on, however slow its steps.
    logs = [rank_log(0), rank_log(1), rank_log(2, compute_s=3.0, step_s=4.0, timing=False)]
    result = parse_training_logs(pod_logs(*logs))
    assert result["ranks"][2]["timing"] is None and result["ranks"][2]["compute_images_per_s"] is None
    assert result["stragglers"] == []
    # Nor do fewer than two ranks with timing make a median to compare with.
    single = parse_training_logs(pod_logs(rank_log(0, compute_s=5.0), rank_log(1, timing=False)))
    assert single["stragglers"] == []


def test_a_timing_that_is_not_four_numbers_is_a_parse_warning_not_a_figure():
    bad = record("step", 0, step=1, images_per_s=4.0, timing={"step_s": 1.0, "compute_s": "fast"})
    result = parse_training_logs([LogSource("/runs/r1/logs/p.log", text=bad)])
    assert result["ranks"][0]["timing"] is None
    assert result["parse_warnings"] == [
        "/runs/r1/logs/p.log: rank 0: a step record's timing is not four numbers of seconds"
    ]


def test_find_stragglers_orders_the_slowest_first():
    ranks = [{"rank": r, "compute_images_per_s": rate, "timing_source": "r%d" % r}
             for r, rate in enumerate([10.0, 4.0, 10.0, 10.0, 6.0])]  # fmt: skip
    assert [(s["rank"], s["percent_below"]) for s in find_stragglers(ranks, 20)] == [(1, 60.0), (4, 40.0)]

"""The memory section of a run's summary and report: each rank's memory, the sizing of the next
run, and the warnings (a peak near the cgroup's limit, a suspected leak).

The training results come from the real parser on trainer-shaped metrics lines.
"""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.run_summary import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.report_document import (
    render_html,
    render_markdown,
)
from ansible_collections.gpuops.training.plugins.module_utils.training_log import SCHEMA, parse_training_logs

run_summary = FilterModule().filters()["run_summary"]

MiB = 1 << 20
GiB = 1 << 30
LOCAL_RUN = {"run_id": "r1", "launcher": "local", "world_size": 2, "rc": 0, "log_paths": []}
POD_RUN = dict(LOCAL_RUN, launcher="pytorchjob")
NO_NCCL = {"failures": [], "nccl_used": False}


def rank_lines(rank, host="node-a", epochs=5, rss_mib=1000, leak_mib=0, cgroup_mib=None, limit_mib=None):
    """Steps at RSS_MIB (+ LEAK_MIB an epoch), a loader start 100 MiB up, and on rank 0 a
    checkpoint write 500 MiB up in epoch 2; the cgroup (when given) 2 GiB over the RSS."""

    def record(event, **fields):
        return json.dumps(
            {"schema": SCHEMA, "event": event, "rank": rank, "world_size": 2, "host": host, **fields}
        )

    def sample(mib):
        cgroup = (cgroup_mib + mib - rss_mib) * MiB if cgroup_mib is not None else None
        return {
            "rss_bytes": mib * MiB,
            "rss_peak_bytes": mib * MiB,
            "cgroup_usage_bytes": cgroup,
            "cgroup_working_set_bytes": cgroup,
            "cgroup_limit_bytes": limit_mib * MiB if limit_mib else None,
        }

    lines = [record("run_start", backend="gloo")]
    step = 0
    for epoch in range(epochs):
        base = rss_mib + leak_mib * epoch
        lines.append(
            record("memory", phase="loader_start", epoch=epoch, step=step, memory=sample(base + 100))
        )
        for jitter in (0, 2, -1, 1):
            step += 1
            lines.append(record("step", epoch=epoch, step=step, loss=1.0, memory=sample(base + jitter)))
        lines.append(record("epoch", epoch=epoch, step=step, loss=1.0))
        if rank == 0 and epoch == 2:
            lines.append(
                record(
                    "memory",
                    phase="checkpoint_write_after",
                    epoch=epoch,
                    step=step,
                    memory=sample(base + 500),
                )
            )
    lines.append(record("run_end", status="ok"))
    return lines


def training(*ranks, tolerance=16):
    sources = [LogSource("rank%d.log" % index, text="\n".join(lines)) for index, lines in enumerate(ranks)]
    result = parse_training_logs(sources, leak_tolerance_mib=tolerance)
    result["failures"] = []
    return result


def test_each_rank_shows_its_median_peak_and_the_phase_of_the_peak():
    summary = run_summary(LOCAL_RUN, training(rank_lines(0), rank_lines(1)), NO_NCCL)
    rank0, rank1 = summary["memory"]["ranks"]
    assert (rank0["rss_median_bytes"], rank0["rss_peak_bytes"]) == (1001 * MiB, 1500 * MiB)
    assert (rank0["rss_peak_phase"], rank0["rss_peak_epoch"], rank0["rss_peak_step"]) == (
        "checkpoint_write_after",
        2,
        12,
    )
    assert rank1["rss_peak_phase"] == "loader_start" and rank1["rss_peak_bytes"] == 1100 * MiB
    # Its own resident set asks for: request the median, limit the peak + 10 %, whole MiB up.
    assert (rank0["request"], rank0["limit"]) == ("1001Mi", "1650Mi")
    assert rank0["statement"] == (
        "rank 0: RSS median 1001Mi, peak 1500Mi in checkpoint_write_after (epoch 2, step 12)"
    )
    assert summary["verdict"] == "passed" and summary["warnings"] == []


def test_a_local_run_is_sized_from_the_ranks_resident_sets_summed_per_host():
    summary = run_summary(
        LOCAL_RUN, training(rank_lines(0), rank_lines(1)), NO_NCCL, memory={"buffer_percent": 20}
    )
    recommendation = summary["memory"]["recommendation"]
    assert recommendation["basis"] == "host_rss"
    assert recommendation["ranks"] == [0, 1]
    # Medians 1001 + 1001 MiB, peaks 1500 + 1100 MiB; the limit 2600 MiB x 1.2.
    assert (recommendation["request"], recommendation["limit"]) == ("2002Mi", "3120Mi")
    assert recommendation["resources"] == {"requests": {"memory": "2002Mi"}, "limits": {"memory": "3120Mi"}}
    assert recommendation["statement"] == (
        "Memory per container (node-a, 2 ranks): request 2002Mi (the median), limit 3120Mi "
        "(peak 2600Mi + 20 %), from the resident sets of its 2 ranks summed."
    )


def test_the_loader_workers_shared_memory_is_added_to_a_resident_set_sizing():
    loader = {"workers": 4, "batch_size": 2, "sample_bytes": 16 * MiB}
    summary = run_summary(
        LOCAL_RUN,
        training(rank_lines(0), rank_lines(1)),
        NO_NCCL,
        memory={"loader": loader, "buffer_percent": 0},
    )
    recommendation = summary["memory"]["recommendation"]
    # 2 ranks x 4 workers x 2 batches prefetched x 2 samples x 16 MiB = 512 MiB (no NCCL on gloo).
    assert recommendation["shm_bytes"] == 512 * MiB
    assert recommendation["limit"] == "3112Mi"  # 2600 + 512 MiB
    assert "plus /dev/shm (512Mi for 4 loader workers a rank, batches of 2)" in recommendation["statement"]
    none = run_summary(
        LOCAL_RUN,
        training(rank_lines(0), rank_lines(1)),
        NO_NCCL,
        memory={"loader": dict(loader, workers=0)},
    )["memory"]["recommendation"]
    assert none["shm_bytes"] is None
    assert "plus /dev/shm (none: 0 loader workers, no NCCL)" in none["statement"]


def test_a_bad_loader_setting_is_named_in_the_recommendation_instead_of_failing():
    summary = run_summary(
        LOCAL_RUN,
        training(rank_lines(0)),
        NO_NCCL,
        memory={"loader": {"workers": 2, "batch_size": 0, "sample_bytes": 1}},
    )
    assert (
        "not sized: batch_size must be at least 1, got 0" in summary["memory"]["recommendation"]["statement"]
    )


def test_pods_are_sized_from_their_cgroup_working_set():
    summary = run_summary(
        POD_RUN,
        training(rank_lines(0, host="pod-0", cgroup_mib=3000), rank_lines(1, host="pod-1", cgroup_mib=3000)),
        NO_NCCL,
    )
    recommendation = summary["memory"]["recommendation"]
    assert recommendation["basis"] == "cgroup_working_set"
    assert recommendation["host"] == "pod-0" and recommendation["ranks"] == [0]  # the busier pod
    assert (recommendation["request"], recommendation["limit"]) == ("3001Mi", "3850Mi")  # 3500 MiB + 10 %


def test_a_peak_within_the_margin_of_the_limit_is_a_warning_naming_the_phase():
    summary = run_summary(
        POD_RUN,
        training(
            rank_lines(0, cgroup_mib=3000, limit_mib=3800), rank_lines(1, cgroup_mib=3000, limit_mib=3800)
        ),
        NO_NCCL,
    )
    assert summary["verdict"] == "passed"
    # Rank 0's checkpoint write reached 3500 of 3800 MiB (92.1 %); rank 1 peaked at 3100 (81.6 %).
    assert summary["warnings"] == [
        "rank 0: memory peaked at 3500Mi (the memory cgroup's working set) in phase checkpoint_write_after "
        "(epoch 2, step 12), 92.1 % of its memory limit 3800Mi, within the 10 % margin"
    ]
    wider = run_summary(
        POD_RUN,
        training(
            rank_lines(0, cgroup_mib=3000, limit_mib=3800), rank_lines(1, cgroup_mib=3000, limit_mib=3800)
        ),
        NO_NCCL,
        memory={"limit_margin_percent": 20},
    )
    assert [warning.split(":")[0] for warning in wider["warnings"]] == ["rank 0", "rank 1"]
    assert "in phase loader_start" in wider["warnings"][1]


def test_a_leak_is_a_warning_and_the_run_still_passes_unless_leaks_fail():
    result = training(rank_lines(0), rank_lines(1, leak_mib=64))
    summary = run_summary(LOCAL_RUN, result, NO_NCCL)
    assert summary["verdict"] == "passed"
    assert len(summary["warnings"]) == 1
    assert summary["warnings"][0].startswith(
        "suspected host memory leak on rank 1: its per-epoch minimum resident set (RSS) grew by "
        "64.0 MiB per epoch"
    )
    assert [leak["rank"] for leak in summary["memory"]["leaks"]] == [1]
    strict = run_summary(LOCAL_RUN, result, NO_NCCL, memory={"leak_fails": True})
    assert strict["verdict"] == "failed"
    assert strict["failures"] == summary["warnings"]
    assert strict["warnings"] == []


def test_a_healthy_run_has_no_warning():
    summary = run_summary(LOCAL_RUN, training(rank_lines(0), rank_lines(1, leak_mib=3)), NO_NCCL)
    assert summary["memory"]["leaks"] == [] and summary["warnings"] == []


def test_figures_of_zero_give_no_recommendation_rather_than_an_error():
    result = training(rank_lines(0, host="pod-0", cgroup_mib=3000))
    for quantity in result["ranks"][0]["memory"]["quantities"].values():
        quantity.update(median_bytes=0, peak_bytes=0)  # a cgroup and a /proc that read 0
    memory = run_summary(POD_RUN, result, NO_NCCL)["memory"]
    assert memory["recommendation"] is None
    assert (memory["ranks"][0]["request"], memory["ranks"][0]["limit"]) == (None, None)


def test_a_run_without_memory_records_has_no_rows_and_no_recommendation():
    result = training([json.dumps({"schema": SCHEMA, "event": "run_start", "rank": 0, "world_size": 1})])
    memory = run_summary(LOCAL_RUN, result, NO_NCCL)["memory"]
    assert memory["ranks"] == [] and memory["recommendation"] is None
    assert run_summary(LOCAL_RUN, {"failures": []}, NO_NCCL)["memory"]["recommendation"] is None


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        (
            {"buffer": 10},
            "run_summary: memory takes buffer_percent, limit_margin_percent, leak_fails, loader, "
            "node_allocatable, gpu_resource, gpu_margin_percent, gpu_margin_fails, got buffer",
        ),
        (
            {"buffer_percent": -5},
            "run_summary: memory.buffer_percent must be a number of percent of at least 0, got -5",
        ),
        (
            {"buffer_percent": "ten"},
            "memory.buffer_percent must be a number of percent of at least 0, got 'ten'",
        ),
        (
            {"limit_margin_percent": 100},
            "memory.limit_margin_percent must be a number of percent from 0 to below 100",
        ),
        ({"leak_fails": "maybe"}, "run_summary: memory.leak_fails must be true or false, got 'maybe'"),
        (
            {"loader": 4},
            "run_summary: memory.loader must be a dict with workers, batch_size and sample_bytes, got 4",
        ),
        ("loads", "run_summary: memory must be a dict, got str"),
    ],
)
def test_bad_memory_options_are_named(memory, message):
    with pytest.raises(AnsibleFilterError) as error:
        run_summary(LOCAL_RUN, training(rank_lines(0)), NO_NCCL, memory=memory)
    assert message in str(error.value)


def test_the_report_shows_each_ranks_memory_the_recommendation_and_the_warnings():
    summary = run_summary(
        POD_RUN,
        training(rank_lines(0, cgroup_mib=3000, limit_mib=3800), rank_lines(1, cgroup_mib=3000, leak_mib=64)),
        NO_NCCL,
    )
    markdown = render_markdown(summary)
    assert "## Memory" in markdown
    assert (
        "| 0 | node-a | 1001Mi | 1500Mi | checkpoint_write_after (epoch 2, step 12) | 3500Mi | 3800Mi | - "
        "| 1001Mi | 1650Mi |" in markdown
    )
    assert "| 1 | node-a |" in markdown
    assert summary["memory"]["recommendation"]["statement"] in markdown
    assert "| Memory, next run | Memory per container (node-a, 2 ranks): request" in markdown
    assert "## Warnings and remedies" in markdown
    assert "rank 0: memory peaked at 3500Mi" in markdown
    assert "suspected host memory leak on rank 1" in markdown
    page = render_html(summary)
    assert "<h2>Memory</h2>" in page
    assert '<td class="num">1500Mi</td><td>checkpoint_write_after (epoch 2, step 12)</td>' in page
    assert "suspected host memory leak on rank 1" in page

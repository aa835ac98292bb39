"""The GPU device in a run's summary and report: each rank's device peak against the device's
total (headroom), and the warning (or failure) for a rank whose peak came within the margin.

The training results come from the real parser on the pod logs of tests/unit/fixtures/gpu-memory
(a 4-rank CUDA run whose rank 3 peaked at 77.5 of its GPU's 80 GiB) and on generated CPU and
fleet logs.
"""

from __future__ import annotations

import csv
import io
import json
import pathlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.run_summary import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.report_document import (
    render_html,
    render_markdown,
)
from ansible_collections.gpuops.training.plugins.module_utils.run_fleet import ranks_csv
from ansible_collections.gpuops.training.plugins.module_utils.training_log import SCHEMA, parse_training_logs

run_summary = FilterModule().filters()["run_summary"]

MiB = 1 << 20
GiB = 1 << 30
LOGS = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "gpu-memory" / "logs"
PODS = {"gm-7c2e-worker-0": "gpu-a", "gm-7c2e-worker-1": "gpu-b"}
POD_RUN = {"run_id": "gm-7c2e", "launcher": "pytorchjob", "world_size": 4, "rc": 0, "pod_nodes": PODS,
           "log_paths": [str(LOGS / "*.log")]}  # fmt: skip
NO_NCCL = {"failures": [], "nccl_used": False}
RANK3 = (
    "rank 3 (pod gm-7c2e-worker-1, node gpu-b): GPU memory peaked at 79360Mi of the device's 80Gi "
    "(96.9 %) in phase train (epoch 1, step 5): headroom 2560Mi (3.1 %), within the 5 % margin; "
    "PyTorch's allocator reserved at most 57856Mi of it (the rest: the CUDA context, NCCL's buffers, "
    "other processes on the GPU)"
)


def gpu_training():
    result = parse_training_logs(
        [LogSource(str(path), path=str(path)) for path in sorted(LOGS.glob("*.log"))]
    )
    result["failures"] = []
    return result


def test_a_rank_near_its_gpus_capacity_is_a_warning_naming_its_pod_and_node_and_the_others_are_not():
    summary = run_summary(POD_RUN, gpu_training(), NO_NCCL)
    assert summary["verdict"] == "passed"
    assert summary["warnings"] == [RANK3]
    memory = summary["memory"]
    assert memory["gpu_within_margin"] == [3]
    assert (memory["gpu_margin_percent"], memory["gpu_margin_fails"]) == (5, False)
    (warning,) = memory["warnings"]
    assert warning["what"] == RANK3 and "CUDA out of memory" in warning["remedy"]
    rows = {row["rank"]: row for row in memory["ranks"]}
    assert {rank: (row["pod"], row["node"]) for rank, row in rows.items()} == {
        0: ("gm-7c2e-worker-0", "gpu-a"), 1: ("gm-7c2e-worker-0", "gpu-a"),
        2: ("gm-7c2e-worker-1", "gpu-b"), 3: ("gm-7c2e-worker-1", "gpu-b"),
    }  # fmt: skip
    # Per rank: the device's peak, its total and the headroom between them.
    assert {rank: (row["device_peak_bytes"], row["device_total_bytes"], row["device_headroom_bytes"],
                   row["device_headroom_percent"]) for rank, row in rows.items()} == {
        0: (59 * GiB + 512 * MiB, 80 * GiB, 20 * GiB + 512 * MiB, 25.6),
        1: (59 * GiB + 512 * MiB, 80 * GiB, 20 * GiB + 512 * MiB, 25.6),
        2: (59 * GiB + 768 * MiB, 80 * GiB, 20 * GiB + 256 * MiB, 25.3),
        3: (77 * GiB + 512 * MiB, 80 * GiB, 2 * GiB + 512 * MiB, 3.1),
    }  # fmt: skip
    assert (rows[3]["device_peak_phase"], rows[3]["device_peak_epoch"], rows[3]["device_peak_step"]) == (
        "train",
        1,
        5,
    )
    assert rows[3]["device_used_median_bytes"] == 73 * GiB
    # The allocator's figures stay: the same on every rank, which alone would not show rank 3.
    assert {row["gpu_reserved_peak_bytes"] for row in rows.values()} == {56 * GiB + 512 * MiB}
    # The verdict's memory line of each rank says its headroom.
    assert (
        "Memory rank 3: RSS median 3Gi, peak 3272Mi in start (epoch 0, step 0); cgroup working set "
        "median 10Gi, peak 10Gi in start (limit 32Gi); GPU reserved peak 57856Mi in train; GPU device "
        "peak 79360Mi of 80Gi in train (headroom 2560Mi, 3.1 %)" in summary["verdict_lines"]
    )


def test_the_margin_decides_and_with_gpu_margin_fails_the_rank_fails_the_run():
    wide = run_summary(POD_RUN, gpu_training(), NO_NCCL, memory={"gpu_margin_percent": 30})
    assert wide["memory"]["gpu_within_margin"] == [0, 1, 2, 3]
    assert [warning.split(":")[0] for warning in wide["warnings"]] == [
        "rank 0 (pod gm-7c2e-worker-0, node gpu-a)", "rank 1 (pod gm-7c2e-worker-0, node gpu-a)",
        "rank 2 (pod gm-7c2e-worker-1, node gpu-b)", "rank 3 (pod gm-7c2e-worker-1, node gpu-b)",
    ]  # fmt: skip
    narrow = run_summary(POD_RUN, gpu_training(), NO_NCCL, memory={"gpu_margin_percent": 3})
    assert narrow["memory"]["gpu_within_margin"] == [] and narrow["warnings"] == []
    strict = run_summary(POD_RUN, gpu_training(), NO_NCCL, memory={"gpu_margin_fails": True})
    assert strict["verdict"] == "failed"
    assert strict["failures"] == [RANK3] and strict["warnings"] == []
    assert strict["memory"]["gpu_margin_fails"] is True


def test_the_report_shows_each_ranks_gpu_headroom_and_the_warning():
    summary = run_summary(POD_RUN, gpu_training(), NO_NCCL)
    markdown = render_markdown(summary, plots=())
    assert "## GPU memory" in markdown
    assert (
        "| rank | host | node | device peak | peak phase | device total | headroom | headroom % | "
        "allocator reserved peak |" in markdown
    )
    assert (
        "| 3 | gm-7c2e-worker-1 | gpu-b | 79360Mi | train (epoch 1, step 5) | 80Gi | 2560Mi "
        "| 3.1 % (within the margin) | 57856Mi |" in markdown
    )
    assert (
        "| 0 | gm-7c2e-worker-0 | gpu-a | 60928Mi | train (epoch 1, step 5) | 80Gi | 20992Mi | 25.6 % |"
        in markdown
    )
    assert "A peak within 5 % of the device's total is a warning." in markdown
    assert "## Warnings and remedies" in markdown and RANK3 in markdown
    page = render_html(summary, plots=())
    assert "<h2>GPU memory</h2>" in page
    assert '<td class="num">2560Mi</td><td class="num">3.1 % (within the margin)</td>' in page
    assert "rank 3 (pod gm-7c2e-worker-1, node gpu-b): GPU memory peaked at 79360Mi" in page
    table = {row["rank"]: row for row in csv.DictReader(io.StringIO(ranks_csv(summary)))}
    assert (table["3"]["device_peak_bytes"], table["3"]["device_headroom_percent"]) == (
        str(77 * GiB + 512 * MiB),
        "3.1",
    )


def cpu_lines(rank):
    def record(event, **fields):
        return json.dumps({"schema": SCHEMA, "event": event, "rank": rank, "world_size": 2, "host": "node-a",
                           **fields})  # fmt: skip

    cpu = {"rss_bytes": 1000 * MiB, "rss_peak_bytes": 1000 * MiB, "cuda_allocated_bytes": None,
           "device_used_bytes": None, "device_used_peak_bytes": None, "device_total_bytes": None}  # fmt: skip
    return [record("run_start", backend="gloo", device="cpu"),
            record("step", epoch=0, step=1, loss=1.0, memory=cpu),
            record("epoch", epoch=0, step=1, loss=1.0), record("run_end", status="ok")]  # fmt: skip


def test_a_cpu_run_has_no_gpu_figures_no_gpu_warning_and_no_gpu_section():
    sources = [LogSource("rank%d.log" % rank, text="\n".join(cpu_lines(rank))) for rank in (0, 1)]
    training = parse_training_logs(sources)
    training["failures"] = []
    summary = run_summary({"run_id": "r1", "launcher": "local", "world_size": 2, "rc": 0}, training, NO_NCCL,
                          memory={"gpu_margin_percent": 99})  # fmt: skip
    assert summary["verdict"] == "passed" and summary["warnings"] == []
    assert summary["memory"]["gpu_within_margin"] == []
    for row in summary["memory"]["ranks"]:
        assert row["device_total_bytes"] is row["device_peak_bytes"] is row["device_headroom_bytes"] is None
        assert "GPU device" not in row["statement"]
        assert row["node"] == "node-a"  # a local launch: the rank's host
    assert "GPU memory" not in render_markdown(summary, plots=())
    assert "GPU memory" not in render_html(summary, plots=())


def fleet_lines(rank):
    """A rank of a 16-rank CUDA run, 8 a node, every GPU's peak at 78 of 80 GiB but rank 13's at 79."""
    pod = "fl-worker-%d" % (rank // 8)

    def record(event, **fields):
        return json.dumps({"schema": SCHEMA, "event": event, "rank": rank, "local_rank": rank % 8,
                           "world_size": 16, "host": pod, "node": "gpu-%03d" % (rank // 8),
                           **fields})  # fmt: skip

    peak = (79 if rank == 13 else 78) * GiB
    sample = {"rss_bytes": 2 * GiB, "rss_peak_bytes": 2 * GiB, "cuda_reserved_bytes": 60 * GiB,
              "cuda_max_reserved_bytes": 60 * GiB, "device_used_bytes": 70 * GiB,
              "device_used_peak_bytes": peak, "device_total_bytes": 80 * GiB}  # fmt: skip
    return [record("run_start", backend="nccl", device="cuda:%d" % (rank % 8)),
            record("step", epoch=0, step=1, loss=1.0, memory=sample),
            record("epoch", epoch=0, step=1, loss=1.0), record("run_end", status="ok")]  # fmt: skip


def test_past_eight_ranks_one_warning_names_them_by_node_and_the_rank_with_the_least_headroom():
    text = "\n".join(line for rank in range(16) for line in fleet_lines(rank))
    training = parse_training_logs([LogSource("all.log", text=text)])
    training["failures"] = []
    summary = run_summary({"run_id": "fl", "world_size": 16, "rc": 0}, training, NO_NCCL)
    assert summary["memory"]["gpu_within_margin"] == list(range(16))
    assert summary["warnings"] == [
        "the GPU memory of 16 ranks peaked within the 5 % margin of their device's total: "
        "node gpu-000: ranks 0-7; node gpu-001: ranks 8-15; the least headroom: rank 13 (node gpu-001): "
        "GPU memory peaked at 79Gi of the device's 80Gi (98.8 %) in phase train (epoch 0, step 1): "
        "headroom 1Gi (1.2 %), within the 5 % margin; PyTorch's allocator reserved at most 60Gi of it "
        "(the rest: the CUDA context, NCCL's buffers, other processes on the GPU)"
    ]
    (line,) = summary["verdict_lines"]
    assert line.endswith(
        "; GPU device least headroom 1Gi (1.2 %) of 80Gi on rank 13 (node gpu-001), peak 79Gi in train"
    )


PERCENT = "memory.gpu_margin_percent must be a number of percent from 0 to below 100"


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        ({"gpu_margin_percent": 100}, "run_summary: " + PERCENT + ", got 100"),
        ({"gpu_margin_percent": -1}, PERCENT + ", got -1"),
        ({"gpu_margin_percent": "lots"}, PERCENT + ", got 'lots'"),
        ({"gpu_margin_percent": True}, PERCENT + ", got True"),
        ({"gpu_margin_fails": "maybe"}, "memory.gpu_margin_fails must be true or false, got 'maybe'"),
    ],
)  # fmt: skip
def test_bad_gpu_margin_options_are_named(memory, message):
    with pytest.raises(AnsibleFilterError) as error:
        run_summary(POD_RUN, gpu_training(), NO_NCCL, memory=memory)
    assert message in str(error.value)


def test_a_peak_past_the_smallest_device_total_shows_a_negative_headroom():
    # A restart on a smaller GPU: the peak of the first attempt (41 GiB) is past the 40 GiB the
    # second one reported, the smallest total kept.
    def record(event, attempt, total, used, **fields):
        sample = {"rss_bytes": GiB, "rss_peak_bytes": GiB, "device_used_bytes": used,
                  "device_used_peak_bytes": used, "device_total_bytes": total}  # fmt: skip
        return json.dumps({"schema": SCHEMA, "event": event, "rank": 0, "world_size": 1, "host": "gpu-a",
                           "attempt": attempt, "memory": sample, **fields})  # fmt: skip

    lines = [record("step", 0, 80 * GiB, 41 * GiB, epoch=0, step=1),
             record("step", 1, 40 * GiB, 30 * GiB, epoch=0, step=1)]  # fmt: skip
    training = parse_training_logs([LogSource("rank0.log", text="\n".join(lines))])
    training["failures"] = []
    summary = run_summary({"run_id": "r", "launcher": "ssh", "world_size": 1, "rc": 0}, training, NO_NCCL)
    (row,) = summary["memory"]["ranks"]
    assert (row["device_headroom_bytes"], row["device_headroom_percent"]) == (-GiB, -2.5)
    assert summary["warnings"][0].startswith(
        "rank 0 (node gpu-a): GPU memory peaked at 41Gi of the device's 40Gi (102.5 %) in phase train "
        "(epoch 0, step 1): headroom -1Gi (-2.5 %)"
    )
    markdown = render_markdown(summary, plots=())
    assert (
        "| 0 | gpu-a | gpu-a | 41Gi | train (epoch 0, step 1) | 40Gi | -1Gi | -2.5 % (within the margin) |"
        in markdown
    )

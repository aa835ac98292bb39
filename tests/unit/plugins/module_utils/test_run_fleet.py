"""A verdict that reads well at 1024 ranks: what differs leads, by node; the rest by node; every
rank in ranks.csv; the HTML stays small."""

from __future__ import annotations

import csv
import io
import json

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.report_document import (
    render_html,
    render_markdown,
)
from ansible_collections.gpuops.training.plugins.module_utils.run_fleet import differs, node_rows, ranks_csv
from ansible_collections.gpuops.training.plugins.module_utils.run_report import build_run_summary
from ansible_collections.gpuops.training.plugins.module_utils.training_log import parse_training_logs

SCHEMA = "gpuops.metrics/v1"
PODS, WORLD = 128, 1024


def rank_log(rank, finished=True, steps=3):
    pod = rank // 8
    where = {"rank": rank, "local_rank": rank % 8, "world_size": WORLD, "host": "fl-worker-%d" % pod}
    where["node"] = "gpu-%03d" % pod
    lines = [dict(where, event="run_start", backend="nccl", memlock_bytes=-1)]
    for step in range(1, steps + 1):
        memory = {"rss_bytes": (1200 + rank % 7) << 20, "cgroup_working_set_bytes": 9 << 30}
        lines.append(dict(where, event="step", epoch=0, step=step, loss=2.0 - step / 10, images_per_s=50.0,
                          memory=memory, time=1000.0 + step))  # fmt: skip
    lines.append(dict(where, event="epoch", epoch=0, step=steps, loss=1.8, images_per_s=50.0))
    if finished:
        lines.append(dict(where, event="run_end", status="ok", epochs_completed=1, step=steps))
    return "\n".join(json.dumps(dict(line, schema=SCHEMA, time=line.get("time", 1000.0))) for line in lines)


def fleet_summary(unfinished=(), missing=(), nccl_incomplete=(), nccl_missing=()):
    text = "\n".join(rank_log(rank, rank not in unfinished) for rank in range(WORLD) if rank not in missing)
    training = parse_training_logs([LogSource("all.log", text=text)])
    nccl = {
        "nccl_used": True,
        "nranks": WORLD,
        "transport": "IB",
        "init_complete_ranks": [rank for rank in range(WORLD) if rank not in nccl_incomplete],
        "communicators": [
            {"rank": rank, "nranks": WORLD, "host": "fl-worker-%d" % (rank // 8),
             "init_complete": rank not in nccl_incomplete}
            for rank in range(WORLD)
            if rank not in nccl_missing
        ],
    }  # fmt: skip
    run = {
        "run_id": "fleet",
        "launcher": "pytorchjob",
        "world_size": WORLD,
        "rc": 0,
        "started": 0,
        "ended": 60,
    }
    return build_run_summary(run, training, nccl)


def test_what_differs_is_grouped_by_node_and_cause_and_the_rest_is_silent():
    summary = fleet_summary(unfinished=range(40, 48), missing=[300], nccl_incomplete=[21])
    groups = {(group["node"], group["what"]): group["ranks"] for group in summary["differs"]}
    assert groups == {
        ("gpu-005", "did not finish"): "40-47",
        ("gpu-002", "NCCL init incomplete"): "21",
        # NCCL saw rank 300 on its host; the trainer's records of it are missing.
        ("(node unknown)", "no training records"): "300",
    }
    (missing,) = [group for group in summary["differs"] if group["ranks"] == "300"]
    assert missing["hosts"] == ["fl-worker-37"]
    assert summary["verdict_lines"][0] == "What differs, by node:"
    assert "gpu-005 (fl-worker-5): ranks 40-47: did not finish" in summary["verdict_lines"]


def test_a_rank_neither_the_trainer_nor_nccl_speaks_for_never_reported():
    summary = fleet_summary(missing=[300, 301], nccl_missing=[300, 301])
    assert summary["differs"] == [
        {
            "node": "(node unknown)",
            "hosts": [],
            "ranks": "300, 301",
            "rank_count": 2,
            "what": "never reported",
        }
    ]


def test_a_healthy_fleet_has_nothing_that_differs_and_one_memory_line():
    summary = fleet_summary()
    assert summary["differs"] == []
    (memory,) = summary["verdict_lines"]
    assert memory.startswith(
        "Memory across 1024 ranks: RSS median 1200Mi to 1206Mi, highest peak 1206Mi on rank 6 "
    )
    assert "(node gpu-000) in train" in memory


def test_the_report_shows_a_row_per_node_and_ranks_csv_every_rank():
    summary = fleet_summary(unfinished=range(40, 48))
    rows = node_rows(summary, summary["memory"]["ranks"])
    assert len(rows) == PODS
    assert rows[5] == {
        "node": "gpu-005", "hosts": "fl-worker-5", "ranks": "40-47", "rank_count": 8, "finished": 0,
        "init_complete": 8, "images_per_s": 400.0, "rss_peak_bytes": 1206 << 20,
    }  # fmt: skip
    table = list(csv.DictReader(io.StringIO(ranks_csv(summary))))
    assert len(table) == WORLD
    assert table[41]["status"] == "incomplete" and table[41]["node"] == "gpu-005"
    assert table[0]["rss_peak_bytes"] == str(1200 << 20)
    page = render_html(summary, plots=())
    markdown = render_markdown(summary, plots=())
    for text in (page, markdown):
        assert "What differs" in text and "Nodes" in text and "ranks.csv" in text
        # Differences first, then the nodes.
        assert text.index("What differs") < text.index("1024 ranks on 128 nodes")
    # One row per node, none per rank: the page of a 1024-rank run opens at once.
    assert page.count("<tr>") < 2 * PODS
    assert len(page.encode()) < 100_000


def test_up_to_64_ranks_the_report_keeps_its_table_per_rank():
    text = "\n".join(rank_log(rank) for rank in range(16)).replace('"world_size": 1024', '"world_size": 16')
    training = parse_training_logs([LogSource("all.log", text=text)])
    run = {"run_id": "small", "world_size": 16, "rc": 0, "started": 0, "ended": 60}
    summary = build_run_summary(run, training, {"nccl_used": False})
    assert "## Ranks" in render_markdown(summary, plots=()) and "## Nodes" not in render_markdown(
        summary, plots=()
    )
    assert len([line for line in summary["verdict_lines"] if line.startswith("Memory rank")]) == 0
    assert differs(summary) == []

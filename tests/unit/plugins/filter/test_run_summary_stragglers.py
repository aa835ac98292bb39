"""Stragglers in the verdict: summary.json places each one on its pod and node, warns with the
remedy (or fails, when asked), and the report lists them near the top.

The training results come from the real parser on generated pod logs (logs/<pod>.log, as the
training_job role keeps them), as training_verify builds the summary.
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
from ansible_collections.gpuops.training.plugins.module_utils.run_report import STRAGGLER_REMEDY
from ansible_collections.gpuops.training.plugins.module_utils.training_log import SCHEMA, parse_training_logs

run_summary = FilterModule().filters()["run_summary"]
NO_NCCL = {"failures": [], "nccl_used": False}
PODS = ("rn-worker-0", "rn-worker-1", "rn-worker-2")
POD_NODES = {"rn-worker-0": "gpu-a", "rn-worker-1": "gpu-b", "rn-worker-2": "gpu-c"}


def rank_log(rank, compute_s, host, node):
    def record(event, **fields):
        return json.dumps({"schema": SCHEMA, "event": event, "rank": rank, "world_size": 3, "host": host,
                           "node": node, "attempt": 0, **fields})  # fmt: skip

    timing = {"step_s": 2.0, "data_s": 0.0, "compute_s": compute_s, "collective_s": 2.0 - compute_s}
    lines = [record("run_start", backend="nccl", batch_size=4, grad_accum_steps=1)]
    lines += [record("step", step=step, images_per_s=2.0, loss=1.0, timing=timing) for step in (1, 2, 3)]
    lines.append(record("run_end", status="ok"))
    return "\n".join(lines)


def training(compute=(1.0, 1.0, 1.6), hosts=PODS, nodes=("gpu-a", "gpu-b", "gpu-c"), names=PODS):
    sources = [
        LogSource("/runs/rn/logs/%s.log" % name, text=rank_log(rank, compute[rank], hosts[rank], nodes[rank]))
        for rank, name in enumerate(names)
    ]
    result = parse_training_logs(sources)
    result["failures"] = []
    return result


def cluster_run(**extra):
    return dict({"run_id": "rn", "launcher": "pytorchjob", "world_size": 3, "rc": 0}, **extra)


def test_a_straggler_is_placed_on_its_pod_and_the_node_the_launcher_names():
    # The node names the trainer recorded are stale here: the launcher's pod_nodes win.
    summary = run_summary(cluster_run(pod_nodes=POD_NODES), training(nodes=("x", "y", "z")), NO_NCCL)
    (straggler,) = summary["stragglers"]
    assert (straggler["rank"], straggler["pod"], straggler["node"]) == (2, "rn-worker-2", "gpu-c")
    assert straggler["source"] == "/runs/rn/logs/rn-worker-2.log"
    assert straggler["percent_below"] == 37.5  # 2.5 images/s against the median 4
    assert summary["verdict"] == "passed"  # a warning by default
    assert summary["warnings"] == [straggler["statement"]]
    assert straggler["statement"] == (
        "straggler: rank 2 (pod rn-worker-2, node gpu-c) computes 2.50 images/s, 37.5 % below the median "
        "of all ranks (4.00 images/s; threshold 20 %): its peers wait for it in every collective, so the "
        "whole job runs at its pace"
    )
    assert summary["straggler_remedy"] == STRAGGLER_REMEDY
    assert "thermal or power throttling" in STRAGGLER_REMEDY and "PCIe link" in STRAGGLER_REMEDY
    rows = {row["rank"]: row for row in summary["ranks"]}
    assert rows[2]["compute_images_per_s"] == 2.5 and rows[2]["timing"]["compute_s"] == 1.6


def test_without_pod_nodes_a_cluster_straggler_takes_the_node_its_rank_recorded():
    summary = run_summary(cluster_run(), training(), NO_NCCL)
    (straggler,) = summary["stragglers"]
    assert (straggler["pod"], straggler["node"]) == ("rn-worker-2", "gpu-c")


def test_a_local_runs_straggler_is_on_its_host_and_has_no_pod():
    hosts = ("vm", "vm", "vm2")
    names = ["attempt_0/%d/stdout" % rank for rank in range(3)]
    result = training(hosts=hosts, nodes=hosts, names=names)
    summary = run_summary({"run_id": "rl", "launcher": "local", "world_size": 3, "rc": 0}, result, NO_NCCL)
    (straggler,) = summary["stragglers"]
    assert (straggler["pod"], straggler["node"], straggler["host"]) == (None, "vm2", "vm2")
    assert straggler["statement"].startswith("straggler: rank 2 (node vm2) computes")


def test_stragglers_fail_the_verdict_when_asked():
    summary = run_summary(cluster_run(pod_nodes=POD_NODES), training(), NO_NCCL, stragglers_fail=True)
    assert summary["verdict"] == "failed"
    assert summary["failures"] == [summary["stragglers"][0]["statement"]]
    assert summary["warnings"] == [] and summary["stragglers_fail"] is True


def test_a_healthy_run_has_no_straggler_and_no_warning():
    summary = run_summary(cluster_run(pod_nodes=POD_NODES), training(compute=(1.0, 1.1, 0.95)), NO_NCCL)
    assert summary["stragglers"] == [] and summary["warnings"] == []
    assert summary["straggler_percent"] == 20


@pytest.mark.parametrize("value", ["maybe", 2, [True]])
def test_stragglers_fail_must_be_a_boolean(value):
    with pytest.raises(AnsibleFilterError, match=r"run_summary: stragglers_fail must be true or false, got "):
        run_summary(cluster_run(), training(), NO_NCCL, stragglers_fail=value)


def test_the_report_lists_stragglers_near_the_top_with_pod_and_node():
    summary = run_summary(cluster_run(pod_nodes=POD_NODES), training(), NO_NCCL)
    markdown = render_markdown(summary)
    overview = "| Stragglers | rank 2 (pod rn-worker-2, node gpu-c), 37.5 % below the median |"
    assert overview in markdown
    section = markdown.index("## Stragglers")
    assert section < markdown.index("## Ranks")
    assert (
        "| 2 | rn-worker-2 | gpu-c | 2.50 | 4.00 | 37.5 % | /runs/rn/logs/rn-worker-2.log |"
        in markdown[section:]
    )
    assert "A warning: the run can still pass. Remedy: check that node: thermal" in markdown
    page = render_html(summary)
    assert page.index("<h2>Stragglers</h2>") < page.index("<h2>Ranks</h2>")
    assert "<td>rn-worker-2</td><td>gpu-c</td>" in page
    # Each rank's compute throughput and collective wait are in the rank table.
    assert "compute images/s" in markdown and "collective s" in markdown


def test_the_overview_says_why_no_straggler_was_named():
    healthy = run_summary(cluster_run(), training(compute=(1.0, 1.0, 1.0)), NO_NCCL)
    assert "| Stragglers | none: every rank's compute throughput is within 20 % of the median |" in (
        render_markdown(healthy)
    )
    untimed = run_summary(cluster_run(), {"failures": [], "ranks": [{"rank": 0}], "stragglers": []}, NO_NCCL)
    assert "| Stragglers | not measured (fewer than 2 ranks recorded step timing) |" in render_markdown(
        untimed
    )

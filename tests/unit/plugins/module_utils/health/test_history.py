"""health.history: each node's own record, and a figure judged against the node's recent median."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health import history

KEY = "all_reduce_perf 1 node x 8 GPUs, 8 B-8 GiB"


def busbw(node, value, at, key=KEY, device=""):
    return {
        "node": node,
        "source": "nccl_tests",
        "metric": "busbw_gbps",
        "key": key,
        "device": device,
        "value": value,
        "time": at,
        "run_id": "nccl-%d" % at,
    }


def keep(tmp_path, records):
    return history.run(str(tmp_path), records, now=records[-1]["time"] if records else None)


# Single-node all_reduce bus bandwidth of 8 H100 SXM over NVLink, as nccl-tests reports it
# (about 480 GB/s): a steady node, then one drifting down while still above a 400 GB/s floor.
STEADY = [482.1, 479.8, 481.5, 480.2, 478.9, 481.0]


def test_a_figure_far_below_the_nodes_own_median_is_flagged_although_above_the_floor(tmp_path):
    for at, value in enumerate(STEADY, start=1):
        assert keep(tmp_path, [busbw("gpu-07", value, at)])["flagged"] == []
    outcome = keep(tmp_path, [busbw("gpu-07", 402.5, 10)])
    (flagged,) = outcome["flagged"]
    assert flagged["median"] == pytest.approx(480.6)
    assert flagged["samples"] == 6
    assert flagged["below_median_percent"] == pytest.approx(16.3, abs=0.1)
    assert (flagged["class"], flagged["check"]) == ("monitor", "history")
    assert flagged["reason"] == (
        "gpu-07: bus bandwidth 402 GB/s (%s) is 16.3 %% below this node's median of 481 GB/s over its"
        " last 6 results (more than 15 %%)" % KEY
    )
    assert "nccl_tests_mode=isolate" in flagged["remedy"]
    # Kept too: the node's file now holds all seven, oldest first.
    stored = history.read_node(str(tmp_path), "gpu-07")
    assert [record["value"] for record in stored] == [*STEADY, 402.5]
    assert all(record["schema"] == "gpuops.node-history/v1" for record in stored)


def test_a_small_dip_or_a_node_without_enough_history_is_not_flagged(tmp_path):
    for at, value in enumerate(STEADY[:2], start=1):
        keep(tmp_path, [busbw("gpu-01", value, at)])
    # Two earlier figures: not judged yet, whatever the value.
    (early,) = keep(tmp_path, [busbw("gpu-01", 100.0, 3)])["judged"]
    assert (early["samples"], early["median"], early["flagged"]) == (2, None, False)
    keep(tmp_path, [busbw("gpu-01", 481.0, 4)])
    (dip,) = keep(tmp_path, [busbw("gpu-01", 430.0, 5)])["judged"]
    # The median of the earlier four (482.1, 479.8, 100, 481) is 480.4: 10.5 % below, not 15.
    assert dip["median"] == pytest.approx(480.4, abs=0.05)
    assert dip["below_median_percent"] == pytest.approx(10.5, abs=0.1)
    assert dip["flagged"] is False


def test_only_figures_of_the_same_kind_device_and_node_are_compared(tmp_path):
    records = []
    for at, value in enumerate(STEADY, start=1):
        records += [
            busbw("gpu-02", value, at),
            busbw("gpu-03", value / 2, at),  # a slower node: its own median
            busbw("gpu-02", value / 4, at, key="all_reduce_perf 2 nodes x 8 GPUs"),
        ]
    history.append(str(tmp_path), [history.normalise(record) for record in records])
    outcome = history.run(
        str(tmp_path),
        [busbw("gpu-03", 236.0, 20), busbw("gpu-02", 119.0, 20, key="all_reduce_perf 2 nodes x 8 GPUs")],
        now=20,
    )
    assert [verdict["flagged"] for verdict in outcome["judged"]] == [False, False]
    assert outcome["judged"][0]["median"] == pytest.approx(240.3)
    # A GPU's throughput is compared with the same GPU's.
    gpus = [
        {"node": "gpu-02", "source": "training", "metric": "images_per_s", "key": "retinanet", "device": d,
         "value": v, "time": t}
        for t in range(1, 5) for d, v in (("gpu0", 100.0), ("gpu1", 60.0))
    ]  # fmt: skip
    history.append(str(tmp_path), [history.normalise(record) for record in gpus])
    judged = history.run(
        str(tmp_path),
        [dict(gpus[0], value=62.0, time=9), dict(gpus[1], value=62.0, time=9)],
        now=9,
    )["judged"]
    assert [(verdict["device"], verdict["flagged"]) for verdict in judged] == [
        ("gpu0", True),
        ("gpu1", False),
    ]
    assert judged[0]["reason"].startswith("gpu-02 gpu0: throughput 62 images/s (retinanet) is 38 % below")


def test_the_median_is_over_the_newest_window_only(tmp_path):
    old = [busbw("gpu-04", 480.0, at) for at in range(1, 11)]
    recent = [busbw("gpu-04", 300.0, at) for at in range(11, 14)]
    history.append(str(tmp_path), [history.normalise(record) for record in old + recent])
    (verdict,) = history.run(str(tmp_path), [busbw("gpu-04", 290.0, 20)], window=3, min_samples=3, now=20)[
        "judged"
    ]
    assert (verdict["median"], verdict["samples"], verdict["flagged"]) == (300.0, 3, False)


def test_a_health_pass_is_kept_without_a_judgement_and_check_mode_keeps_nothing(tmp_path):
    health = {
        "node": "gpu-05",
        "source": "node_health",
        "metric": "health_pass",
        "value": None,
        "details": {"verdict": "isolate", "classes": {"isolate": 1}},
        "run_id": "health-1",
    }
    dry = history.run(str(tmp_path), [health], check_mode=True)
    assert dry == {"judged": [], "flagged": [], "appended": 0, "files": []}
    assert not (tmp_path / "gpu-05.jsonl").exists()
    kept = history.run(str(tmp_path), [health])
    assert kept["appended"] == 1 and kept["files"] == [str(tmp_path / "gpu-05.jsonl")]
    (stored,) = history.read_node(str(tmp_path), "gpu-05")
    assert stored["details"] == {"verdict": "isolate", "classes": {"isolate": 1}}


def test_a_file_keeps_the_newest_records_and_skips_a_line_cut_short(tmp_path):
    history.run(str(tmp_path), [busbw("gpu-06", 480.0 + at, at) for at in range(1, 31)], keep=25, now=31)
    path = tmp_path / "gpu-06.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 25 and json.loads(lines[0])["value"] == 486.0
    with path.open("a") as handle:
        handle.write('{"schema": "gpuops.node-history/v1", "node": "gpu-06", "val')
    assert len(history.read_node(str(tmp_path), "gpu-06")) == 25
    # A node name that is not a file name is made one; the record keeps the name.
    history.run(str(tmp_path), [busbw("rack 3/gpu-06", 480.0, 1)], now=1)
    assert history.read_node(str(tmp_path), "rack 3/gpu-06")[0]["node"] == "rack 3/gpu-06"
    assert (tmp_path / "rack_3_gpu-06.jsonl").exists()


@pytest.mark.parametrize(
    ("settings", "records", "message"),
    [
        ({"drop_percent": 0}, [], "drop_percent must be a percentage above 0 and below 100, got 0"),
        ({"drop_percent": 100.0}, [], "drop_percent must be a percentage above 0 and below 100, got 100.0"),
        ({"window": 0}, [], "window must be an integer of at least 1, got 0"),
        ({"window": 3, "min_samples": 5}, [], "min_samples (5) cannot be more than window (3)"),
        ({"keep": 2}, [], "keep (2) cannot be less than window (10)"),
        ({}, [{"node": "gpu-1", "source": "dcgm", "metric": "x"}], "records[1].source must be one of"),
        ({}, [{"source": "training", "metric": "x"}], "records[1].node must name the node, got None"),
        ({}, [busbw("gpu-1", "fast", 1)], "records[1].value must be a finite number or null, got 'fast'"),
        ({}, [busbw("gpu-1", float("nan"), 1)], "records[1].value must be a finite number or null, got nan"),
    ],
)
def test_bad_input_is_refused_naming_the_field_before_anything_is_kept(tmp_path, settings, records, message):
    with pytest.raises(history.HistoryError, match="^" + re.escape(message)):
        history.run(str(tmp_path), [busbw("gpu-0", 480.0, 1), *records] if records else [], **settings)
    assert list(tmp_path.iterdir()) == []


def test_an_isolate_run_adds_each_nodes_single_and_pair_figures_and_no_halves():
    summary = {
        "tests": [
            {"id": "r1-a", "round": 1, "nodes": ["gpu-01"], "busbw": 481.2, "slow": False},
            {"id": "r1-b", "round": 1, "nodes": ["gpu-02"], "busbw": None, "slow": False},  # no result
            {"id": "r2-ab", "round": 2, "nodes": ["gpu-01", "gpu-02"], "busbw": 188.4, "slow": True},
            {"id": "r3-half", "round": 3, "nodes": ["gpu-01", "gpu-02", "gpu-03", "gpu-04"], "busbw": 180.0},
        ]
    }
    records = history.isolate_records(summary, "all_reduce", "nccl-7", 8)
    assert [(r["node"], r["key"], r["value"]) for r in records] == [
        ("gpu-01", "all_reduce alone x 8 GPUs", 481.2),
        ("gpu-01", "all_reduce with gpu-02", 188.4),
        ("gpu-02", "all_reduce with gpu-01", 188.4),
    ]
    assert records[1]["details"] == {"test": "r2-ab", "slow": True}
    assert all(r["source"] == "nccl_tests" and r["metric"] == "busbw_gbps" for r in records)
    assert all(r["run_id"] == "nccl-7" for r in records)
    with pytest.raises(
        history.HistoryError, match=r"^tests\[0\] must be a mapping with the names of its nodes"
    ):
        history.isolate_records({"tests": [{"nodes": "gpu-01"}]}, "all_reduce")


def metrics_of(*ranks, run_start=None):
    """What training_log_info reads in logs whose ranks are ``(rank, local_rank, node, compute_s,
    status)``: each trains 4 images a step."""
    from ansible_collections.gpuops.training.plugins.module_utils import training_log

    parser = training_log.TrainingLogParser()
    start = run_start if run_start is not None else {
        "model": "retinanet_resnet50_fpn", "batch_size": 2, "grad_accum_steps": 2, "min_size": 800,
        "max_size": 1333, "amp": "bfloat16", "device": "cuda:3",
    }  # fmt: skip
    for rank, local_rank, node, compute_s, status in ranks:
        where = {"schema": training_log.SCHEMA, "rank": rank, "local_rank": local_rank, "node": node}
        where["host"] = "pod-%d" % rank
        timing = {"step_s": 1.0, "data_s": 0.0, "compute_s": compute_s, "collective_s": 1.0 - compute_s}
        lines = [dict(where, event="run_start", **start)]
        lines += [dict(where, event="step", step=1, images_per_s=4.0, timing=timing)]
        lines += [dict(where, event="run_end", status=status)]
        for line in lines:
            parser.feed("rank%d" % rank, json.dumps(line))
    return parser.result()


def test_a_training_run_adds_each_gpus_compute_throughput_keyed_by_its_workload():
    metrics = metrics_of(
        (0, 0, "node-a", 0.5, "ok"), (1, 1, "node-a", 0.8, "ok"), (2, 0, "node-b", 0.5, "error")
    )
    assert metrics["workload"] == "retinanet_resnet50_fpn, 2 images x 2, 800-1333 px, amp bfloat16, cuda"
    records = history.training_records(metrics, "run-1")
    # Rank 2 ended in an error: its figure says nothing about its GPU.
    assert [(r["node"], r["device"], r["value"]) for r in records] == [
        ("node-a", "GPU 0", 8.0),
        ("node-a", "GPU 1", 5.0),
    ]
    assert {(r["source"], r["metric"], r["key"], r["run_id"]) for r in records} == {
        ("training", "images_per_s", metrics["workload"], "run-1")
    }
    assert records[1]["details"] == {"rank": 1, "host": "pod-1"}
    # The records are what node_history keeps.
    assert [history.normalise(record)["device"] for record in records] == ["GPU 0", "GPU 1"]


def test_a_run_whose_workload_or_gpus_are_unknown_adds_nothing():
    no_start = metrics_of((0, 0, "node-a", 0.5, "ok"), run_start={})
    assert no_start["workload"] is None and history.training_records(no_start) == []
    metrics = metrics_of((0, 0, "node-a", 0.5, "ok"))
    metrics["ranks"][0]["local_rank"] = None  # a trainer that does not record it
    assert history.training_records(metrics) == []
    with pytest.raises(history.HistoryError, match="training_log_info's result, with its ranks"):
        history.training_records({"msg": "no logs"})


def test_a_run_verified_again_is_kept_once_and_not_judged_against_itself(tmp_path):
    base = {"source": "training", "metric": "images_per_s", "key": "w", "device": "GPU 0"}
    for index, value in enumerate((10.0, 10.0, 10.0)):
        earlier = dict(base, node="n", value=value, run_id="old-%d" % index)
        history.run(str(tmp_path), [earlier], now=100.0 + index)
    first = history.run(str(tmp_path), [dict(base, node="n", value=8.0, run_id="r")], now=200.0)
    assert first["appended"] == 1 and first["flagged"][0]["median"] == 10.0
    again = history.run(str(tmp_path), [dict(base, node="n", value=8.0, run_id="r")], now=300.0)
    # Judged against the same three earlier runs, not against its own first verdict; kept once.
    assert again["appended"] == 0 and again["files"] == [] and again["judged"][0]["samples"] == 3
    kept = [entry["run_id"] for entry in history.read_node(str(tmp_path), "n")]
    assert kept == ["old-0", "old-1", "old-2", "r"]


def test_a_health_pass_keeps_each_nodes_verdict_and_findings_without_a_figure(tmp_path):
    from ansible_collections.gpuops.training.plugins.filter.history_health_records import (
        history_health_records,
    )

    finding = {
        "device": "GPU 0",
        "check": "xid",
        "class": "isolate",
        "reason": "Xid 79",
        "remedy": "drain it",
    }
    nodes = [
        {"node": "gpu-bad", "result": {"verdict": "isolate", "findings": [finding], "not_run": []}},
        {
            "node": "gpu-ok",
            "result": {"verdict": "healthy", "findings": [], "not_run": [{"check": "infiniband"}]},
        },
        {"node": "gpu-gone", "error": "the host was unreachable"},
    ]
    records = history_health_records(nodes, run_id="h1", checks=["nvidia_smi", "kernel_log"])
    by_node = {record["node"]: record for record in records}
    assert {record["key"] for record in records} == {"kernel_log, nvidia_smi"}
    assert all(record["value"] is None and record["source"] == "node_health" for record in records)
    assert by_node["gpu-bad"]["details"]["findings"] == [
        {"device": "GPU 0", "check": "xid", "class": "isolate", "reason": "Xid 79"}
    ]
    assert by_node["gpu-ok"]["details"]["not_run"] == ["infiniband"]
    assert by_node["gpu-ok"]["details"]["complete"] is False
    assert (by_node["gpu-gone"]["details"]["verdict"], by_node["gpu-gone"]["details"]["error"]) == (
        "unchecked",
        "the host was unreachable",
    )
    result = history.run(str(tmp_path), records, now=10.0)
    # Kept, not judged: a pass has no figure.
    assert result["appended"] == 3 and result["judged"] == []
    assert history.read_node(str(tmp_path), "gpu-bad")[0]["details"]["verdict"] == "isolate"


def test_a_measure_run_of_one_node_or_a_pair_adds_what_an_isolate_run_would():
    summary = {"collectives": [
        {"collective": "all_reduce", "ok": True, "peak_busbw_gbyte_s": 420.5},
        {"collective": "all_gather", "ok": False, "peak_busbw_gbyte_s": 10.0},  # a failed test says nothing
    ]}  # fmt: skip
    (alone,) = history.measure_records(summary, ["gpu-a"], "m1", 8)
    assert (alone["node"], alone["key"], alone["value"], alone["run_id"]) == (
        "gpu-a",
        "all_reduce alone x 8 GPUs",
        420.5,
        "m1",
    )
    pair = history.measure_records(summary, ["gpu-b", "gpu-a"], "m2", 8)
    assert [(record["node"], record["key"]) for record in pair] == [
        ("gpu-a", "all_reduce with gpu-b"),
        ("gpu-b", "all_reduce with gpu-a"),
    ]
    # Three nodes' figure belongs to the three of them.
    assert history.measure_records(summary, ["a", "b", "c"]) == []
    with pytest.raises(history.HistoryError, match="nodes must be the names of the run's nodes"):
        history.measure_records(summary, "gpu-a")

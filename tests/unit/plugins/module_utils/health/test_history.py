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

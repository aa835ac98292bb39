"""node_history as Ansible runs it: judged, kept, nothing in check mode, bad input named."""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils.health import history
from ansible_collections.gpuops.training.plugins.modules import node_history

STEADY = [482.1, 479.8, 481.5, 480.2, 478.9, 481.0]


def busbw(node, value, at):
    return {
        "node": node,
        "source": "nccl_tests",
        "metric": "busbw_gbps",
        "key": "all_reduce_perf 1 node x 8 GPUs",
        "value": value,
        "time": at,
    }


def test_the_module_judges_keeps_and_reports_changed_truthfully(run_module, tmp_path):
    records = [dict(busbw("gpu-08", value, at)) for at, value in enumerate(STEADY, start=1)]
    first = run_module(node_history.main, {"dir": str(tmp_path), "records": records})
    assert first.result["changed"] is True and first.result["appended"] == 6
    low = [busbw("gpu-08", 380.0, 100)]
    dry = run_module(node_history.main, {"dir": str(tmp_path), "records": low}, check_mode=True)
    assert dry.result["changed"] is False and len(dry.result["flagged"]) == 1
    assert len(history.read_node(str(tmp_path), "gpu-08")) == 6
    judged_only = run_module(node_history.main, {"dir": str(tmp_path), "records": low, "record": False})
    assert judged_only.result["changed"] is False
    bad = run_module(node_history.main, {"dir": str(tmp_path), "records": low, "drop_percent": 150})
    assert bad.failed and bad.result["msg"] == (
        "node_history: drop_percent must be a percentage above 0 and below 100, got 150.0"
    )

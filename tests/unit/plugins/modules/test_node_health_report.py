"""node_health_report as Ansible runs it: the files of a pass from node_health_info's real results on
the published fixtures, written only when they change, nothing in check mode, bad input refused
naming the argument."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health.node import judge_saved
from ansible_collections.gpuops.training.plugins.modules import node_health_report

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "health"


@pytest.fixture(scope="module")
def nodes():
    bad = judge_saved(
        [
            str(FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml"),
            str(FIXTURES / "journal-xid79-fallen-off-bus.log"),
        ],
        ["nvidia_smi", "kernel_log"],
    )
    healthy = judge_saved([str(FIXTURES / "nvidia-smi-tesla-p100-r510.xml")], ["nvidia_smi"])
    return [
        {"node": "gpu-02.example.com", "result": dict(healthy, changed=False, failed=False)},
        {"node": "gpu-01.example.com", "result": dict(bad, changed=False, failed=False)},
        {
            "node": "gpu-03.example.com",
            "result": {"unreachable": True, "msg": "Failed to connect to the host via ssh"},
        },
    ]


def test_the_files_of_a_pass_are_written_once(run_module, nodes, tmp_path):
    args = {"run_id": "health-1", "platform": "ssh", "dest": str(tmp_path / "health-1"), "nodes": nodes}
    run = run_module(node_health_report.main, args)
    assert run.exit_code == 0 and run.result["changed"] is True
    dest = tmp_path / "health-1"
    assert sorted(path.relative_to(dest).as_posix() for path in dest.rglob("*") if path.is_file()) == [
        "nodes/gpu-01.example.com.json",
        "nodes/gpu-02.example.com.json",
        "report.md",
        "summary.json",
        "unhealthy-hosts.txt",
    ]
    assert run.result["verdict"] == "failed"
    assert run.result["needs_action"] == ["gpu-01.example.com", "gpu-03.example.com"]
    assert run.result["lines"][2] == (
        "gpu-03.example.com: UNCHECKED - the host was unreachable: Failed to connect to the host via ssh"
    )
    assert (dest / "unhealthy-hosts.txt").read_text() == "gpu-01.example.com\n"
    summary = json.loads((dest / "summary.json").read_text())
    assert summary["platform"] == "ssh" and summary["quarantine"] == {"enabled": False}
    assert summary["nodes"][0]["details"] == "nodes/gpu-01.example.com.json"
    again = run_module(node_health_report.main, args)
    assert again.result["changed"] is False and again.result["changed_files"] == []


def test_check_mode_writes_nothing(run_module, nodes, tmp_path):
    args = {"run_id": "health-2", "platform": "ssh", "dest": str(tmp_path / "health-2"), "nodes": nodes}
    run = run_module(node_health_report.main, args, check_mode=True)
    assert run.result["changed"] is True and len(run.result["changed_files"]) == 5
    assert not (tmp_path / "health-2").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"quarantine": {"nodes": "all"}}, "^quarantine: expected node_health_quarantine's result"),
        (
            {"quarantine": {"nodes": [], "max_percent": "ten", "allowed": 1}},
            "^quarantine: max_percent must be a number",
        ),
        ({"run_id": " "}, "^run_id must name the health pass"),
        ({"nodes": [{"node": "a"}, {"node": "a"}]}, "^nodes: each node once, got a more than once"),
        ({"nodes": [{"result": {}}]}, "^nodes: each entry needs node"),
        ({"fail_classes": ["fatal"]}, "fail_classes"),
    ],
)
def test_bad_input_fails_naming_the_argument_and_writes_nothing(run_module, nodes, tmp_path, extra, message):
    args = dict(
        {"run_id": "health-3", "platform": "ssh", "dest": str(tmp_path / "out"), "nodes": nodes}, **extra
    )
    run = run_module(node_health_report.main, args)
    assert run.failed
    assert re.search(message, run.result["msg"]), run.result["msg"]
    assert not (tmp_path / "out").exists()

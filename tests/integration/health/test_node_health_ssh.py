"""playbooks/node_health.yml over SSH, on this machine: four inventory hosts, each judged by
node_health_info from the published outputs in tests/unit/fixtures/health (node_health_paths per
host) - ECC errors and Xid 79, a healthy P100 - one host that cannot be reached and one whose
Python is missing. The report is the controller's, and unhealthy-hosts.txt works with
``--limit @file``. Bad settings fail before any host is touched, naming the variable.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from playbook_runner import DEV_COLLECTIONS, ansible_playbook  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "unit" / "fixtures" / "health"
PLAYBOOK = "playbooks/node_health.yml"


def local(**host_vars):
    return dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **host_vars)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("health-ssh")
    clean = tmp_path / "kernel-no-xid.log"
    iso = (FIXTURES / "dmesg-iso-xid13-xid43-oom.log").read_text().splitlines(True)
    clean.write_text("".join(line for line in iso if "NVRM: Xid" not in line))
    hosts = {
        "gpu-bad": local(
            node_health_paths=[
                str(FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml"),
                str(FIXTURES / "journal-xid79-fallen-off-bus.log"),
            ]
        ),
        "gpu-ok": local(node_health_paths=[str(FIXTURES / "nvidia-smi-tesla-p100-r510.xml"), str(clean)]),
        # Nothing listens on port 1: ssh is refused at once.
        "gpu-gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1},
        "gpu-broken": local(ansible_python_interpreter="/nonexistent/python3"),
    }
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"gpu_nodes": {"hosts": hosts}}))
    return {"inventory": inventory, "runs": tmp_path / "runs"}


def play(fleet, *options, **variables):
    settings = dict(
        node_health_run_id="health-ssh",
        node_health_runs_dir=str(fleet["runs"]),
        node_health_become=False,
        node_health_checks=["nvidia_smi", "kernel_log"],
        **variables,
    )
    return ansible_playbook(
        "-i", str(fleet["inventory"]), "-e", json.dumps(settings), *options, PLAYBOOK,
        collections_path=DEV_COLLECTIONS, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def health_pass(fleet):
    run = play(fleet)
    return run, fleet["runs"] / "health-ssh"


def test_every_host_is_judged_and_the_report_is_the_controllers(health_pass):
    run, run_dir = health_pass
    assert run.rc == 2, run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["platform"] == "ssh" and summary["quarantine"] == {"enabled": False}
    assert [(node["node"], node["verdict"]) for node in summary["nodes"]] == [
        ("gpu-bad", "isolate"),
        ("gpu-broken", "unchecked"),
        ("gpu-gone", "unchecked"),
        ("gpu-ok", "healthy"),
    ]
    broken, gone = summary["nodes"][1:3]
    assert broken["error"].startswith("node_health_info failed: ")
    assert gone["error"].startswith("the host was unreachable: ")
    assert "Connection refused" in gone["error"]
    output = " ".join(run.output.split())
    assert "Node health health-ssh: FAILED (3 of 4 nodes need action)" in output
    assert "gpu-bad: ISOLATE - ecc_uncorrectable_volatile on GPU 0 (0000:01:00.0)" in output
    report = (run_dir / "report.md").read_text()
    assert report.index("### gpu-bad: ISOLATE") < report.index("### gpu-broken: UNCHECKED")
    assert report.index("### gpu-broken: UNCHECKED") < report.index("### gpu-gone: UNCHECKED")
    assert "| gpu-ok | healthy | 0 | - | - | [nodes/gpu-ok.json](nodes/gpu-ok.json) |" in report


def test_each_nodes_pass_is_kept_in_its_own_history(fleet, health_pass):
    history = fleet["runs"] / "history"
    kept = {}
    for path in sorted(history.iterdir()):
        (record,) = [json.loads(line) for line in path.read_text().splitlines()]
        kept[path.stem] = record
    assert sorted(kept) == ["gpu-bad", "gpu-broken", "gpu-gone", "gpu-ok"]
    assert {(r["source"], r["metric"], r["key"], r["run_id"], r["value"]) for r in kept.values()} == {
        ("node_health", "health_pass", "kernel_log, nvidia_smi", "health-ssh", None)
    }
    assert {node: record["details"]["verdict"] for node, record in kept.items()} == {
        "gpu-bad": "isolate", "gpu-broken": "unchecked", "gpu-gone": "unchecked", "gpu-ok": "healthy",
    }  # fmt: skip
    bad = kept["gpu-bad"]["details"]
    assert bad["needs_action"] is True and bad["findings_total"] == len(bad["findings"]) > 0
    assert {"check": "ecc_uncorrectable_volatile", "class": "isolate"}.items() <= bad["findings"][0].items()
    assert kept["gpu-gone"]["details"]["error"].startswith("the host was unreachable: ")


def test_the_unhealthy_hosts_file_limits_a_play_to_them(fleet, health_pass):
    _run, run_dir = health_pass
    hosts_file = run_dir / "unhealthy-hosts.txt"
    assert hosts_file.read_text() == "gpu-bad\n"
    listed = ansible_playbook(
        "-i", str(fleet["inventory"]), "--limit", "@%s" % hosts_file, "--list-hosts", PLAYBOOK,
        collections_path=DEV_COLLECTIONS, timeout=120,
    )  # fmt: skip
    assert listed.rc == 0, listed
    assert [line.strip() for line in listed.output.split("hosts (1):")[1].strip().splitlines()] == ["gpu-bad"]


@pytest.mark.parametrize(
    ("variables", "messages"),
    [
        (
            {"node_health_quarantine_classes": ["isolate", "fatal"]},
            ["node_health_quarantine_classes must be one or more of: isolate, reboot, monitor", "fatal"],
        ),
        (
            {
                "node_health_platform": "kubernetes",
                "node_health_max_quarantine": 150,
                "node_health_hosts": "gpu-bad",
            },
            [
                "node_health_max_quarantine must be a percentage from 0 to 100, got 150",
                "node_health_image must name an image",
            ],
        ),
    ],
)
def test_bad_settings_fail_before_any_host_is_checked_naming_the_variable(
    tmp_path, fleet, variables, messages
):
    runs = tmp_path / "runs"
    run = play(dict(fleet, runs=runs), **variables)
    assert run.rc != 0, run
    output = " ".join(run.output.split())
    for message in messages:
        assert message in output, run
    assert "Judge this host" not in output and "Run node_health_info on every node" not in output
    assert not runs.exists()

"""node_health_info as Ansible runs it: saved outputs judged off the node, and a live node
made of a fake nvidia-smi and journalctl on PATH and node_exporter's sysfs fixture. The
fixtures' .about files name their sources and the facts asserted here."""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health import node
from ansible_collections.gpuops.training.plugins.modules import node_health_info

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "health"
SYSFS = FIXTURES / "sysfs-infiniband" / "sys"
A100 = FIXTURES / "nvidia-smi-a100-sxm4-r535.xml"
A100_FAULT = FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml"
P100 = FIXTURES / "nvidia-smi-tesla-p100-r510.xml"
XID79 = FIXTURES / "journal-xid79-fallen-off-bus.log"


def checks_of(result, klass=None):
    return [(f["check"], f["class"]) for f in result["findings"] if klass is None or f["class"] == klass]


def test_a_derived_ecc_fault_isolates(run_module):
    run = run_module(node_health_info.main, {"paths": [str(A100_FAULT)]})
    assert run.exit_code == 0 and not run.failed
    result = run.result
    assert result["changed"] is False
    assert result["verdict"] == "isolate"
    assert checks_of(result) == [
        ("report_coverage", "monitor"),
        ("ecc_uncorrectable_volatile", "isolate"),
        ("pcie_link_width", "monitor"),
        ("clock_hardware_slowdown", "monitor"),
    ]
    assert result["gpus"][0]["ecc"]["volatile"]["uncorrectable"] == 2
    assert result["gpus"][0]["source"] == str(A100_FAULT)
    assert result["sources"] == [{"path": str(A100_FAULT), "kind": "nvidia_smi_xml"}]
    assert result["summary"].startswith(
        "isolate: 1 isolate, 3 monitor; checked nvidia_smi; not run: kernel_log"
    )


def test_a_real_healthy_report_gives_only_the_coverage_finding(run_module):
    # The A100 report holds 1 of the 4 attached GPUs: watched, nothing about the GPU itself.
    run = run_module(
        node_health_info.main, {"paths": [str(A100)], "expected_gpus": 4, "checks": ["nvidia_smi"]}
    )
    result = run.result
    assert result["verdict"] == "monitor"
    assert checks_of(result) == [("report_coverage", "monitor")]
    assert result["gpus"][0]["product_name"] == "NVIDIA A100-SXM4-80GB"
    assert result["not_run"] == [] and result["complete"] is True


def test_a_real_p100_report_is_healthy_and_a_missing_gpu_isolates(run_module):
    run = run_module(node_health_info.main, {"paths": [str(P100)], "checks": ["nvidia_smi"]})
    assert run.result["verdict"] == "healthy"
    assert run.result["findings"] == []
    assert run.result["summary"] == "healthy: no findings; checked nvidia_smi"
    run = run_module(
        node_health_info.main, {"paths": [str(P100)], "checks": ["nvidia_smi"], "expected_gpus": 2}
    )
    assert run.result["verdict"] == "isolate"
    assert checks_of(run.result) == [("gpu_count", "isolate")]


def test_a_kernel_log_with_xid_79_needs_a_reboot(run_module):
    run = run_module(node_health_info.main, {"paths": [str(XID79)], "checks": ["kernel_log"]})
    result = run.result
    assert result["verdict"] == "reboot"
    assert checks_of(result) == [("xid_79", "reboot")]
    assert result["findings"][0]["device"] == "GPU 0000:2b:00.0"
    assert [(e["line"], e["code"], e["source"]) for e in result["xid_events"]] == [(2, 79, str(XID79))]


def test_a_directory_of_saved_outputs_is_read_by_kind_whatever_the_names(run_module, tmp_path):
    shutil.copy(P100, tmp_path / "gpu0.txt")
    shutil.copy(XID79, tmp_path / "bug-report-part.log")
    (tmp_path / "notes.md").write_text("# what we saw\nthe job hung at step 1200\n")
    (tmp_path / "subdir").mkdir()
    shutil.copy(A100_FAULT, tmp_path / "subdir" / "not-read.xml")
    run = run_module(node_health_info.main, {"paths": [str(tmp_path)]})
    result = run.result
    assert [(pathlib.Path(s["path"]).name, s["kind"]) for s in result["sources"]] == [
        ("bug-report-part.log", "kernel_log"),
        ("gpu0.txt", "nvidia_smi_xml"),
        ("notes.md", "unknown"),
    ]
    assert result["verdict"] == "reboot"
    assert checks_of(result) == [("xid_79", "reboot")]
    assert len(result["gpus"]) == 1
    # The ports are read live only.
    assert [entry["check"] for entry in result["not_run"]] == ["infiniband"]
    assert result["complete"] is False


def test_a_cut_off_report_is_not_run_not_a_pass(run_module, tmp_path):
    cut = tmp_path / "cut.xml"
    cut.write_text(P100.read_text()[:2000])
    run = run_module(node_health_info.main, {"paths": [str(cut)], "checks": ["nvidia_smi"]})
    assert run.result["verdict"] == "healthy"
    assert run.result["complete"] is False
    assert run.result["not_run"][0]["check"] == "nvidia_smi"
    assert "not well-formed XML" in run.result["not_run"][0]["reason"]


def fake_tool(directory, name, stdout_file=None, rc=0, stderr=""):
    script = directory / name
    lines = ["import sys"]
    if stdout_file is not None:
        lines.append("sys.stdout.write(open(%r).read())" % str(stdout_file))
    if stderr:
        lines.append("sys.stderr.write(%r)" % stderr)
    lines.append("sys.exit(%d)" % rc)
    body = "\n".join(lines) + "\n"
    (directory / (name + ".py")).write_text(body)
    script.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, directory / (name + ".py")))
    script.chmod(0o755)


@pytest.fixture
def node_bin(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    return directory


def test_live_mode_runs_the_tools_on_path_and_reads_sysfs(run_module, node_bin):
    fake_tool(node_bin, "nvidia-smi", A100_FAULT)
    fake_tool(node_bin, "journalctl", XID79)
    run = run_module(
        node_health_info.main,
        {"sysfs_root": str(SYSFS), "expected_gpus": 4, "expected_ib_rate_gbps": 40},
    )
    result = run.result
    assert result["changed"] is False
    assert result["not_run"] == [] and result["complete"] is True
    assert result["verdict"] == "isolate"
    assert checks_of(result, "isolate") == [
        ("ecc_uncorrectable_volatile", "isolate"),
        ("ib_port_rate", "isolate"),
    ]
    assert checks_of(result, "reboot") == [("xid_79", "reboot")]
    assert [port["name"] for port in result["ib_ports"]] == ["i40iw0/1", "mlx4_0/1", "mlx4_0/2"]
    assert result["ib_ports"][1]["counters"]["port_xmit_discards"] == 5
    assert [source["kind"] for source in result["sources"]] == ["nvidia_smi_xml", "kernel_log", "sysfs"]
    assert result["sources"][1]["path"].endswith("journalctl -k -b --no-pager -o short-iso")
    assert (
        result["summary"]
        == "isolate: 2 isolate, 1 reboot, 3 monitor; checked nvidia_smi, kernel_log, infiniband"
    )


def test_a_missing_nvidia_smi_is_not_run_never_a_pass(run_module, node_bin):
    fake_tool(node_bin, "journalctl", P100)  # a journal without an Xid line
    run = run_module(node_health_info.main, {"sysfs_root": str(SYSFS)}, check_mode=True)
    result = run.result
    assert result["not_run"] == [
        {"check": "nvidia_smi", "reason": "nvidia-smi is not on PATH; the GPUs were not checked"}
    ]
    assert result["verdict"] == "healthy" and result["complete"] is False
    assert result["gpus"] == []
    assert "not run: nvidia_smi (nvidia-smi is not on PATH" in result["summary"]


def test_a_failing_nvidia_smi_isolates_and_a_failing_journal_falls_back_to_dmesg(
    run_module, node_bin, tmp_path
):
    fake_tool(
        node_bin,
        "nvidia-smi",
        rc=9,
        stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    )
    fake_tool(node_bin, "journalctl", rc=1, stderr="No journal files were found.\n")
    fake_tool(node_bin, "dmesg", XID79)
    run = run_module(
        node_health_info.main, {"sysfs_root": str(tmp_path), "checks": ["nvidia_smi", "kernel_log"]}
    )
    result = run.result
    assert checks_of(result) == [("nvidia_smi_failed", "isolate"), ("xid_79", "reboot")]
    assert "exited with 9: NVIDIA-SMI has failed" in result["findings"][0]["reason"]
    assert result["sources"][-1]["kind"] == "kernel_log"
    assert result["not_run"] == []


def test_a_journal_without_entries_is_no_kernel_log_and_falls_back_to_dmesg(run_module, node_bin, tmp_path):
    # What systemd 252's journalctl prints in a container without the host's journal: exit 0.
    fake_tool(node_bin, "journalctl", tmp_path / "no-entries", stderr="No journal files were found.\n")
    (tmp_path / "no-entries").write_text("-- No entries --\n")
    fake_tool(node_bin, "dmesg", XID79)
    run = run_module(node_health_info.main, {"checks": ["kernel_log"], "sysfs_root": str(tmp_path)})
    assert checks_of(run.result) == [("xid_79", "reboot")]
    assert run.result["sources"][-1]["path"].endswith("dmesg")
    # Neither prints a line of the log: the check did not run, it did not pass.
    (tmp_path / "empty").write_text("")
    fake_tool(node_bin, "dmesg", tmp_path / "empty")
    run = run_module(node_health_info.main, {"checks": ["kernel_log"], "sysfs_root": str(tmp_path)})
    assert run.result["findings"] == [] and run.result["complete"] is False
    assert run.result["not_run"] == [
        {
            "check": "kernel_log",
            "reason": "journalctl -k -b found no entries (No journal files were found.); "
            "dmesg printed nothing",
        }
    ]


def test_an_unreadable_kernel_log_is_not_run(run_module, node_bin, tmp_path):
    fake_tool(node_bin, "dmesg", rc=1, stderr="dmesg: read kernel buffer failed: Operation not permitted\n")
    run = run_module(
        node_health_info.main, {"checks": ["kernel_log", "infiniband"], "sysfs_root": str(tmp_path)}
    )
    reason = run.result["not_run"][0]["reason"]
    assert run.result["not_run"][0]["check"] == "kernel_log"
    assert "journalctl is not on PATH" in reason
    assert "dmesg exited with 1: dmesg: read kernel buffer failed" in reason
    # A tree without infiniband has no ports: nothing to judge without an expected rate.
    assert run.result["ib_ports"] == [] and run.result["findings"] == []


def test_no_port_with_an_expected_rate_isolates(run_module, node_bin, tmp_path):
    run = run_module(
        node_health_info.main,
        {"checks": ["infiniband"], "sysfs_root": str(tmp_path), "expected_ib_rate_gbps": 400},
    )
    assert checks_of(run.result) == [("ib_ports_missing", "isolate")]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"expected_gpus": -1}, "expected_gpus: a GPU count is 0 or more, got -1"),
        ({"expected_ib_rate_gbps": 0}, "expected_ib_rate_gbps: a rate in Gb/s is above 0"),
        ({"expected_ib_rate_gbps": "nan"}, "expected_ib_rate_gbps: a rate in Gb/s is above 0"),
        ({"checks": []}, "checks: name at least one of nvidia_smi, kernel_log, infiniband"),
        ({"checks": ["gpu"]}, "value of checks must be one or more of: nvidia_smi, kernel_log, infiniband"),
        ({"paths": ["/no/such/file"]}, "paths: '/no/such/file' does not exist"),
        ({"sysfs_root": "/no/such/sys"}, "sysfs_root: '/no/such/sys' is not a directory"),
    ],
)
def test_bad_input_fails_naming_the_option(run_module, node_bin, args, message):
    run = run_module(node_health_info.main, args)
    assert run.failed
    assert message in run.result["msg"]
    assert "Traceback" not in run.result["msg"]


def test_an_unreadable_saved_file_fails_naming_paths(run_module):
    # A file whose read fails for any user, root included: /proc/self/mem at offset 0 (EIO).
    run = run_module(node_health_info.main, {"paths": ["/proc/self/mem"]})
    assert run.failed and run.result["msg"].startswith("paths: cannot read"), run.result


def test_a_hanging_nvidia_smi_is_stopped_and_reported(run_module, node_bin, monkeypatch, tmp_path):
    timeout = shutil.which("timeout", path="/usr/bin:/bin")
    assert timeout, "coreutils' timeout(1) is part of every supported system"
    os.symlink(timeout, node_bin / "timeout")
    (node_bin / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 30\n")
    (node_bin / "nvidia-smi").chmod(0o755)
    (node_bin / "sleep").symlink_to(shutil.which("sleep", path="/usr/bin:/bin"))
    monkeypatch.setattr(node, "NVIDIA_SMI_TIMEOUT_S", 1)
    run = run_module(node_health_info.main, {"checks": ["nvidia_smi"], "sysfs_root": str(tmp_path)})
    assert checks_of(run.result) == [("nvidia_smi_hung", "reboot")]
    assert run.result["findings"][0]["reason"] == "nvidia-smi -q -x did not answer within 1 s"

"""node_preflight_info as Ansible runs it: arguments in, JSON out, on fixture files."""

# ruff: noqa: E501 - the expected failure lines are compared whole, as users read them.

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.modules import node_preflight_info

LIMITS = """\
Limit                     Soft Limit           Hard Limit           Units
Max open files            1048576              1048576              files
Max locked memory         {memlock}            {memlock}            bytes
"""


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A fake /proc with crio running, one IB device with two ports, no nvidia-smi."""
    proc = tmp_path / "proc"
    for pid, comm, memlock in ((1, "systemd", "unlimited"), (812, "crio", "65536"), (900, "crio", "1")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        (proc / str(pid) / "limits").write_text(LIMITS.format(memlock=memlock))
    infiniband = tmp_path / "infiniband"
    for port, state in (("1", "4: ACTIVE"), ("2", "1: DOWN")):
        port_dir = infiniband / "mlx5_0" / "ports" / port
        port_dir.mkdir(parents=True)
        (port_dir / "state").write_text(state + "\n")
        (port_dir / "link_layer").write_text("InfiniBand\n")
        (port_dir / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (tmp_path / "nccl.conf").write_text("NCCL_IB_HCA=mlx5\n")
    monkeypatch.setattr(node_preflight_info, "PROC_ROOT", str(proc))
    monkeypatch.setattr(node_preflight_info, "INFINIBAND_ROOT", str(infiniband))
    monkeypatch.setattr(node_preflight_info, "NCCL_CONF", str(tmp_path / "nccl.conf"))
    monkeypatch.setattr(node_preflight_info, "NVIDIA_DRIVER_VERSION", str(tmp_path / "absent"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    return tmp_path


def test_a_report_without_thresholds_succeeds(run_module, node):
    run = run_module(node_preflight_info.main, {}, check_mode=True)
    assert run.exit_code == 0
    result = run.result
    assert result["changed"] is False
    assert result["ok"] is True
    assert result["checks"] == []
    # The lowest pid is the daemon.
    assert result["runtimes"]["crio"] == {
        "running": True,
        "pid": 812,
        "memlock_kib": {"soft": 64, "hard": 64},
    }
    assert result["runtimes"]["containerd"] == {"running": False}
    assert [(port["port"], port["state"], port["rate_gbps"]) for port in result["ib_ports"]] == [
        (1, "ACTIVE", 400.0),
        (2, "DOWN", 400.0),
    ]
    assert result["gpus"] == []
    assert result["gpu_query_error"] == "nvidia-smi not found"
    assert result["nccl_env"] == {"NCCL_DEBUG": "INFO"}
    assert result["nccl_conf"] == {"NCCL_IB_HCA": "mlx5"}
    assert result["login"] == {}
    assert result["shm"]["size_mib"] is None or result["shm"]["size_mib"] >= 0


def test_unmet_thresholds_fail_with_one_line_each(run_module, node):
    run = run_module(
        node_preflight_info.main,
        {"min_memlock_kib": "unlimited", "min_gpus": 1, "min_ib_ports_active": 2},
    )
    assert run.failed
    assert run.result["msg"].splitlines() == [
        "node preflight failed:",
        "memlock of crio is 64 KiB, need unlimited: apply gpuops.training.crio_limits (or machineconfig_limits on OpenShift)",
        "found 0 GPUs (nvidia-smi not found), need at least 1: install the NVIDIA driver (nvidia-smi must list the GPUs) "
        "or check the GPU operator's driver pods",
        "1 of 2 InfiniBand/RoCE ports are ACTIVE (mlx5_0/2 is DOWN), need 2: check the cables and the subnet manager "
        "(opensm) or the RoCE switch ports, and load the RDMA modules with gpuops.training.rdma_modules",
    ]
    assert len(run.result["failures"]) == 3


def test_report_only_mode_succeeds_with_the_failures(run_module, node):
    run = run_module(node_preflight_info.main, {"min_memlock_kib": "unlimited", "fail_on_unmet": False})
    assert run.exit_code == 0
    assert run.result["ok"] is False
    assert run.result["failures"][0].startswith("memlock of crio is 64 KiB")


def test_gpus_come_from_nvidia_smi(run_module, node):
    bin_dir = node / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho '0, NVIDIA A100-SXM4-80GB, GPU-aa, 81920, 535.104.05, 00000000:07:00.0'\n"
    )
    fake.chmod(0o755)
    run = run_module(node_preflight_info.main, {"min_gpus": 1})
    assert run.exit_code == 0, run.result
    assert run.result["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert run.result["gpus"][0]["memory_total_mib"] == 81920


def test_a_bad_memlock_threshold_is_refused(run_module, node):
    run = run_module(node_preflight_info.main, {"min_memlock_kib": "lots"})
    assert run.failed
    assert "min_memlock_kib" in run.result["msg"]

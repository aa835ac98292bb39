"""node_preflight_info as Ansible runs it: arguments in, JSON out, on fixture files."""

# ruff: noqa: E501 - the expected failure lines are compared whole, as users read them.

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.modules import node_preflight_info

REMEDY = "apply gpuops.training.crio_limits (or machineconfig_limits on OpenShift)"
RLIMIT_FAILURE = (
    "creating container: rpc error: code = Unknown desc = container create failed: "
    "error setting rlimit type 8: operation not permitted"
)


@pytest.fixture
def node(fake_crio, monkeypatch):
    """A fake /proc with CRI-O (pid 812, memlock 64 KiB soft, 8 MiB hard) listening on its
    socket, one IB device with two ports, crictl but no nvidia-smi."""
    tmp_path = fake_crio.root
    fake_crio.add_process(1, "systemd", "unlimited")
    fake_crio.add_process(900, "crio", "1")  # a child of the daemon, not the daemon
    fake_crio.containers_get("65536", "8388608")
    infiniband = tmp_path / "infiniband"
    for port, state in (("1", "4: ACTIVE"), ("2", "1: DOWN")):
        port_dir = infiniband / "mlx5_0" / "ports" / port
        port_dir.mkdir(parents=True)
        (port_dir / "state").write_text(state + "\n")
        (port_dir / "link_layer").write_text("InfiniBand\n")
        (port_dir / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (tmp_path / "nccl.conf").write_text("NCCL_IB_HCA=mlx5\n")
    monkeypatch.setattr(node_preflight_info, "PROC_ROOT", str(fake_crio.proc))
    monkeypatch.setattr(node_preflight_info, "INFINIBAND_ROOT", str(infiniband))
    monkeypatch.setattr(node_preflight_info, "NCCL_CONF", str(tmp_path / "nccl.conf"))
    monkeypatch.setattr(node_preflight_info, "NVIDIA_DRIVER_VERSION", str(tmp_path / "absent"))
    monkeypatch.setattr(node_preflight_info, "PROBE_TIMEOUT", 1)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    return fake_crio


def arguments(node, **extra):
    return {
        "crio_runtime_endpoint": node.endpoint,
        "crio_config_file": str(node.config_file),
        "crio_config_dir": str(node.config_dir),
        **extra,
    }


def test_a_report_without_thresholds_succeeds(run_module, node):
    run = run_module(node_preflight_info.main, arguments(node), check_mode=True)
    assert run.exit_code == 0
    result = run.result
    assert result["changed"] is False
    assert result["ok"] is True
    assert result["checks"] == []
    # The daemon is the process listening on CRI-O's socket; with no default_ulimits its
    # containers inherit its limits, as the fresh ones show.
    assert result["runtimes"]["crio"] == {
        "running": True,
        "pid": 812,
        "memlock_kib": {"soft": 64, "hard": 8192},
        "default_ulimits": [],
        "default_ulimits_source": "",
        "config_files": [str(node.config_file)],
        "container_memlock_kib": {"soft": 64, "hard": 8192},
        "judged_by": "the daemon's own, inherited: default_ulimits is empty",
        "containers": [
            {"uid": 0, "memlock_kib": {"soft": 64, "hard": 8192}},
            {"uid": 65534, "memlock_kib": {"soft": 64, "hard": 8192}},
        ],
        "probe_error": "",
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
        arguments(node, min_memlock_kib="unlimited", min_gpus=1, min_ib_ports_active=2),
    )
    assert run.failed
    assert run.result["msg"].splitlines() == [
        "node preflight failed:",
        "memlock of crio's containers is 64 KiB (the daemon's own, inherited: default_ulimits is empty), need unlimited: "
        + REMEDY,
        "memlock of a fresh crio container as uid 0 is 64 KiB, need unlimited: " + REMEDY,
        "memlock of a fresh crio container as uid 65534 is 64 KiB, need unlimited: " + REMEDY,
        "found 0 GPUs (nvidia-smi not found), need at least 1: install the NVIDIA driver (nvidia-smi must list the GPUs) "
        "or check the GPU operator's driver pods",
        "1 of 2 InfiniBand/RoCE ports are ACTIVE (mlx5_0/2 is DOWN), need 2: check the cables and the subnet manager "
        "(opensm) or the RoCE switch ports, and load the RDMA modules with gpuops.training.rdma_modules",
    ]
    assert len(run.result["failures"]) == 5


def test_crio_is_judged_by_its_default_ulimits_not_by_its_daemon(run_module, node):
    # The daemon stays at 64 KiB; the drop-in gives containers 8 MiB, and they get it.
    node.config_file.write_text(
        node.config_file.read_text() + '[crio.runtime]\ndefault_ulimits = ["memlock=65536:65536"]\n'
    )
    (node.config_dir / "99-ulimits.conf").write_text(
        '[crio.runtime]\ndefault_ulimits = ["nofile=1024:1024", "memlock=8388608:8388608"]\n'
    )
    (node.config_dir / "10-other.conf").write_text("[crio.runtime]\npids_limit = 4096\n")
    node.containers_get("8388608")
    run = run_module(node_preflight_info.main, arguments(node, min_memlock_kib="8192"))
    assert run.exit_code == 0, run.result["failures"]
    crio = run.result["runtimes"]["crio"]
    assert crio["memlock_kib"] == {"soft": 64, "hard": 8192}
    assert crio["container_memlock_kib"] == {"soft": 8192, "hard": 8192}
    assert crio["judged_by"] == "default_ulimits in %s" % (node.config_dir / "99-ulimits.conf")
    assert crio["config_files"] == [
        str(node.config_file),
        str(node.config_dir / "10-other.conf"),
        str(node.config_dir / "99-ulimits.conf"),
    ]
    assert [check["name"] for check in run.result["checks"]] == [
        "memlock_crio",
        "memlock_crio_container_uid_0",
        "memlock_crio_container_uid_65534",
    ]


def test_default_ulimits_without_memlock_leaves_the_daemons(run_module, node):
    (node.config_dir / "99-ulimits.conf").write_text(
        '[crio.runtime]\ndefault_ulimits = ["nofile=1024:1024"]\n'
    )
    run = run_module(node_preflight_info.main, arguments(node, min_memlock_kib="128", probe_uids=[]))
    assert run.failed
    assert run.result["failures"] == [
        "memlock of crio's containers is 64 KiB (the daemon's own, inherited: default_ulimits sets no memlock), "
        "need 128 KiB: " + REMEDY
    ]
    assert [call[0] for call in node.calls()] == ["version"]  # asked, but nothing probed


def test_a_drop_in_the_host_cannot_apply_fails_naming_the_limit_the_ceiling_and_the_reason(run_module, node):
    (node.config_dir / "99-ulimits.conf").write_text('[crio.runtime]\ndefault_ulimits = ["memlock=-1:-1"]\n')
    node.scenario(create_error=RLIMIT_FAILURE)
    run = run_module(node_preflight_info.main, arguments(node, min_memlock_kib="unlimited"))
    assert run.failed
    assert run.result["failures"] == [
        "a fresh crio container could not be probed, need memlock unlimited: CRI-O cannot start a container: "
        "memlock=-1:-1 cannot be applied: this host's hard memlock limit is 8388608 bytes, the CRI-O daemon's, "
        "and runc cannot raise a limit above it without CAP_SYS_RESOURCE, which the daemon lacks here; set "
        "memlock=8388608:8388608 or lower, or raise the hard limit CRI-O starts with (LimitMEMLOCK= in its "
        "systemd unit); CRI-O said: " + RLIMIT_FAILURE
    ]


def test_without_crictl_the_probe_check_fails_saying_so(run_module, node):
    (node.bin / "crictl").unlink()
    run = run_module(node_preflight_info.main, arguments(node, min_memlock_kib="64"))
    assert run.failed
    assert run.result["failures"] == [
        "a fresh crio container could not be probed, need memlock 64 KiB: crictl is not installed on this node, "
        "so no container could be probed (install cri-tools, or set probe_uids to [] to skip the probe)"
    ]


def test_the_crio_answering_at_the_endpoint_is_the_one_judged(run_module, node):
    node.add_process(500, "crio", "unlimited")  # another CRI-O on the machine, on another socket
    run = run_module(node_preflight_info.main, arguments(node, probe_uids=[]))
    assert run.result["runtimes"]["crio"]["pid"] == 812
    # Without the socket, the lowest pid named crio is taken.
    run = run_module(
        node_preflight_info.main, arguments(node, probe_uids=[], crio_runtime_endpoint="unix:///absent.sock")
    )
    assert run.result["runtimes"]["crio"]["pid"] == 500


def test_containerd_is_judged_by_its_daemon(run_module, node):
    node.add_process(950, "containerd", "65536")
    run = run_module(
        node_preflight_info.main, arguments(node, runtimes=["containerd"], min_memlock_kib="unlimited")
    )
    assert run.result["failures"] == [
        "memlock of containerd is 64 KiB, need unlimited: apply gpuops.training.containerd_limits"
    ]


def test_report_only_mode_succeeds_with_the_failures(run_module, node):
    run = run_module(
        node_preflight_info.main, arguments(node, min_memlock_kib="unlimited", fail_on_unmet=False)
    )
    assert run.exit_code == 0
    assert run.result["ok"] is False
    assert run.result["failures"][0].startswith("memlock of crio's containers is 64 KiB")


def test_gpus_come_from_nvidia_smi(run_module, node):
    fake = node.bin / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho '0, NVIDIA A100-SXM4-80GB, GPU-aa, 81920, 535.104.05, 00000000:07:00.0'\n"
    )
    fake.chmod(0o755)
    run = run_module(node_preflight_info.main, arguments(node, min_gpus=1, probe_uids=[]))
    assert run.exit_code == 0, run.result
    assert run.result["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert run.result["gpus"][0]["memory_total_mib"] == 81920


def test_a_bad_memlock_threshold_is_refused(run_module, node):
    run = run_module(node_preflight_info.main, {"min_memlock_kib": "lots"})
    assert run.failed
    assert "min_memlock_kib" in run.result["msg"]


def test_a_negative_probe_uid_is_refused(run_module, node):
    run = run_module(node_preflight_info.main, {"probe_uids": [0, -1]})
    assert run.failed
    assert run.result["msg"] == "probe_uids: a uid is an integer from 0 to 4294967295, got [0, -1]"
    assert node.calls() == []

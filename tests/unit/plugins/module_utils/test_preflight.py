"""preflight.py: parsers of what a node exposes and the threshold checks."""

# ruff: noqa: E501 - the expected failure lines are compared whole, as users read them.

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.preflight import (
    PreflightError,
    evaluate,
    failures,
    memlock_kib_from_proc_limits,
    nccl_environment,
    parse_ib_port,
    parse_nccl_conf,
    parse_nvidia_smi_csv,
    parse_proc_limits,
    parse_threshold_kib,
    parse_ulimit_lines,
)

CRIO_LIMITS_64K = """\
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max file size             unlimited            unlimited            bytes
Max processes             1048576              1048576              processes
Max open files            1048576              1048576              files
Max locked memory         65536                65536                bytes
Max address space         unlimited            unlimited            bytes
Max realtime timeout      unlimited            unlimited            us
"""

NVIDIA_SMI = """\
0, NVIDIA H100 80GB HBM3, GPU-1b2c, 81559, 550.54.15, 00000000:18:00.0
1, NVIDIA H100 80GB HBM3, GPU-3d4e, 81559, 550.54.15, 00000000:2A:00.0
"""


def test_proc_limits_parse():
    limits = parse_proc_limits(CRIO_LIMITS_64K)
    assert limits["memlock"] == {"soft": 65536, "hard": 65536, "unit": "bytes"}
    assert limits["cpu"]["soft"] == "unlimited"
    assert limits["rttime"]["unit"] == "us"
    assert memlock_kib_from_proc_limits(CRIO_LIMITS_64K) == {"soft": 64, "hard": 64}


def test_proc_limits_without_memlock_or_garbage():
    with pytest.raises(PreflightError, match="no limits"):
        parse_proc_limits("hello\n")
    with pytest.raises(PreflightError, match="Max locked memory"):
        memlock_kib_from_proc_limits("Max open files  1024  1024  files\n")
    with pytest.raises(PreflightError, match="not a limit value"):
        parse_proc_limits("Max locked memory  lots  1  bytes\n")


def test_ulimit_lines():
    assert parse_ulimit_lines("unlimited\nunlimited\n") == {"soft": "unlimited", "hard": "unlimited"}
    assert parse_ulimit_lines("64\n8192\n") == {"soft": 64, "hard": 8192}
    with pytest.raises(PreflightError):
        parse_ulimit_lines("64\n")


def test_nvidia_smi_csv():
    gpus = parse_nvidia_smi_csv(NVIDIA_SMI)
    assert len(gpus) == 2
    assert gpus[1] == {
        "index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-3d4e",
        "memory_total_mib": 81559,
        "driver_version": "550.54.15",
        "pci_bus_id": "00000000:2A:00.0",
    }
    assert parse_nvidia_smi_csv("") == []
    with pytest.raises(PreflightError, match="expected 6 fields"):
        parse_nvidia_smi_csv("0, H100\n")


def test_ib_port_from_sysfs_text():
    port = parse_ib_port("mlx5_0", "1", "4: ACTIVE\n", "InfiniBand\n", "200 Gb/sec (4X HDR)\n")
    assert port == {
        "device": "mlx5_0",
        "port": 1,
        "state": "ACTIVE",
        "link_layer": "InfiniBand",
        "rate": "200 Gb/sec (4X HDR)",
        "rate_gbps": 200.0,
    }
    assert parse_ib_port("mlx5_1", "1", "1: DOWN", "Ethernet", "")["rate_gbps"] is None


def test_nccl_settings():
    assert nccl_environment({"PATH": "/bin", "NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "INFO"}) == {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5",
    }
    assert parse_nccl_conf("# comment\nNCCL_IB_GID_INDEX=3\n\nNCCL_SOCKET_IFNAME = eth0\n") == {
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_SOCKET_IFNAME": "eth0",
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("unlimited", "unlimited"),
        ("-1", "unlimited"),
        ("65536", 65536),
        (65536, 65536),
        ("", None),
        (None, None),
    ],
)
def test_thresholds(value, expected):
    assert parse_threshold_kib(value) == expected


def test_a_bad_threshold_is_refused():
    with pytest.raises(PreflightError):
        parse_threshold_kib("64k")


def node(**overrides):
    facts = {
        "runtimes": {
            "crio": {"running": True, "pid": 10, "memlock_kib": {"soft": 64, "hard": 64}},
            "containerd": {"running": False},
        },
        "login": {"user": "trainer", "memlock_kib": {"soft": "unlimited", "hard": "unlimited"}},
        "shm": {"size_mib": 64},
        "gpus": [],
        "gpu_query_error": "nvidia-smi not found",
        "ib_ports": [
            parse_ib_port("mlx5_0", "1", "4: ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)"),
            parse_ib_port("mlx5_1", "1", "1: DOWN", "InfiniBand", "10 Gb/sec (4X SDR)"),
        ],
    }
    facts.update(overrides)
    return facts


def test_every_unmet_check_gives_one_line_saying_what_to_apply():
    checks = evaluate(
        node(),
        {"min_memlock_kib": "unlimited", "min_shm_mib": 1024, "min_gpus": 8, "min_ib_ports_active": 2},
    )
    assert [check["name"] for check in checks] == ["memlock_crio", "memlock_login", "shm", "gpus", "ib_ports"]
    assert failures(checks) == [
        "memlock of crio is 64 KiB, need unlimited: apply gpuops.training.crio_limits (or machineconfig_limits on OpenShift)",
        "/dev/shm is 64 MiB, need at least 1024 MiB: enlarge /dev/shm (mount -o remount,size=...) on the node, "
        "or mount an emptyDir with medium Memory at /dev/shm in the pods",
        "found 0 GPUs (nvidia-smi not found), need at least 8: install the NVIDIA driver (nvidia-smi must list "
        "the GPUs) or check the GPU operator's driver pods",
        "1 of 2 InfiniBand/RoCE ports are ACTIVE (mlx5_1/1 is DOWN), need 2: check the cables and the subnet "
        "manager (opensm) or the RoCE switch ports, and load the RDMA modules with gpuops.training.rdma_modules",
    ]


def test_thresholds_left_out_are_not_checked():
    assert evaluate(node(), {}) == []


def test_a_met_node_passes_and_a_numeric_memlock_accepts_unlimited():
    facts = node(
        runtimes={"containerd": {"running": True, "memlock_kib": {"soft": "unlimited", "hard": "unlimited"}}},
        login={"user": "root", "memlock_kib": {"soft": 65536, "hard": 65536}},
        shm={"size_mib": 2048},
        gpus=[{"index": 0}],
        ib_ports=[parse_ib_port("mlx5_0", "1", "4: ACTIVE", "Ethernet", "100 Gb/sec (4X EDR)")],
    )
    checks = evaluate(
        facts, {"min_memlock_kib": "65536", "min_shm_mib": 1024, "min_gpus": 1, "min_ib_ports_active": 1}
    )
    assert failures(checks) == []
    assert all(check["ok"] for check in checks)


def test_unreadable_limits_and_missing_ports_are_reported():
    facts = node(
        runtimes={"containerd": {"running": True, "error": "cannot read /proc/5/limits"}},
        login={"user": "trainer", "error": "su -l trainer failed with 1: no such user"},
        ib_ports=[],
    )
    assert failures(evaluate(facts, {"min_memlock_kib": "unlimited", "min_ib_ports_active": 1})) == [
        "memlock of containerd could not be read (cannot read /proc/5/limits), need unlimited",
        "memlock of a login shell of trainer could not be read (su -l trainer failed with 1: no such user), need unlimited",
        "found no InfiniBand/RoCE ports under /sys/class/infiniband, need 1 ACTIVE: check the cables and the "
        "subnet manager (opensm) or the RoCE switch ports, and load the RDMA modules with gpuops.training.rdma_modules",
    ]

"""What host_limits and rdma_modules leave on the node, read through podman exec (testinfra)."""

from __future__ import annotations

import pytest

LIMITS_FILE = "/etc/security/limits.d/90-gpuops-training.conf"
MODULES_FILE = "/etc/modules-load.d/gpuops-rdma.conf"
# dash, the login shell here, calls nproc -p.
LOGIN_LIMITS = "ulimit -S -l; ulimit -H -l; ulimit -S -n; ulimit -H -n; ulimit -S -p; ulimit -S -s"


@pytest.fixture
def phase(host):
    marker = host.file("/var/lib/gpuops-molecule-phase")
    return marker.content_string.strip() if marker.exists else "converge"


def login_limits(host, user):
    # A fresh login shell goes through PAM (pam_limits is in Debian's /etc/pam.d/su).
    return host.check_output("su -s /bin/sh -l %s -c %s", user, LOGIN_LIMITS).split()


def check_the_limits_file_has_exactly_the_entries(host):
    limits = host.file(LIMITS_FILE)
    assert (limits.user, limits.group, limits.mode) == ("root", "root", 0o644)
    rows = [line.split() for line in limits.content_string.splitlines() if not line.startswith("#")]
    assert rows == [
        ["trainer", "soft", "memlock", "4096"],
        ["trainer", "hard", "memlock", "8192"],
        ["@gpu", "-", "nofile", "1000"],
        ["*", "soft", "nproc", "2048"],
        ["*", "soft", "stack", "unlimited"],
    ]


def check_a_fresh_login_shell_gets_the_limits(host):
    assert login_limits(host, "trainer") == ["4096", "8192", "1000", "1000", "2048", "unlimited"]


def check_state_absent_gives_logins_the_defaults_back(host):
    assert not host.file(LIMITS_FILE).exists
    soft_memlock, hard_memlock, soft_nofile = login_limits(host, "trainer")[:3]
    assert (soft_memlock, hard_memlock, soft_nofile) == ("8192", "8192", "1024")


@pytest.mark.parametrize(
    "package",
    ["rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "rdmacm-utils", "perftest"],
)
def test_the_rdma_userspace_is_installed(host, package):
    assert host.package(package).is_installed


def test_the_tools_run(host):
    # No RDMA device in a container: the tools start and say so.
    assert host.exists("ibv_devinfo")
    assert host.exists("ibstat")
    assert host.exists("ib_write_bw")


def test_the_modules_load_at_boot_without_peermem(host):
    modules = host.file(MODULES_FILE)
    assert (modules.user, modules.group, modules.mode) == ("root", "root", 0o644)
    names = [line for line in modules.content_string.splitlines() if line and not line.startswith("#")]
    # No NVIDIA driver in the container, so rdma_modules_peermem=auto leaves nvidia-peermem out.
    assert names == ["ib_core", "ib_uverbs", "rdma_ucm"]


# verify runs after converge (and idempotence) and again after side_effect; each of
# those moments has its own checks, and every one of them runs in its phase.
CHECKS_BY_PHASE = {
    "converge": [check_the_limits_file_has_exactly_the_entries, check_a_fresh_login_shell_gets_the_limits],
    "side_effect": [check_state_absent_gives_logins_the_defaults_back],
}


def test_every_check_of_this_phase_holds(host, phase):
    assert phase in CHECKS_BY_PHASE, f"unknown molecule phase {phase!r}"
    for check in CHECKS_BY_PHASE[phase]:
        check(host)

"""What containerd_limits leaves on the node, read through podman exec (testinfra)."""

from __future__ import annotations

import pytest

DROPIN = "/etc/systemd/system/containerd.service.d/99-gpuops-limits.conf"
# The host's hard memlock limit (8 MiB): no process on this machine can get more, and a
# container cannot raise it (no CAP_SYS_RESOURCE), so systemd sets the closest it can.
HOST_MEMLOCK_CAP_BYTES = 8 * 1024 * 1024


@pytest.fixture
def phase(host):
    marker = host.file("/var/lib/gpuops-molecule-phase")
    return marker.content_string.strip() if marker.exists else "converge"


def systemd_property(host, name):
    return host.check_output("systemctl show --property=%s --value containerd.service", name)


def main_pid_limits(host):
    pid = systemd_property(host, "MainPID")
    rows = {}
    for line in host.file("/proc/%s/limits" % pid).content_string.splitlines()[1:]:
        title, values = line[:26].strip(), line[26:].split()
        rows[title] = values
    return rows


def check_the_dropin_has_exactly_the_configured_limits(host):
    dropin = host.file(DROPIN)
    assert (dropin.user, dropin.group, dropin.mode) == ("root", "root", 0o644)
    lines = [line for line in dropin.content_string.splitlines() if not line.startswith("#")]
    assert lines == ["[Service]", "LimitMEMLOCK=infinity", "LimitNOFILE=1048576"]
    directory = host.file("/etc/systemd/system/containerd.service.d")
    assert (directory.user, directory.mode) == ("root", 0o755)


def check_systemd_reports_the_configured_limits(host):
    assert systemd_property(host, "LimitMEMLOCK") == "infinity"
    assert systemd_property(host, "LimitNOFILE") == "1048576"
    assert systemd_property(host, "DropInPaths").endswith("99-gpuops-limits.conf")


def check_the_handler_restarted_containerd(host):
    assert host.service("containerd").is_running
    before = host.file("/var/lib/gpuops-molecule-containerd-pid-before").content_string.strip()
    assert systemd_property(host, "MainPID") != before


def check_the_restarted_containerd_gets_the_most_the_host_allows(host):
    limits = main_pid_limits(host)
    # Configured infinity; the host caps memlock at 8 MiB, and systemd falls back to the
    # closest value it may set (the current hard limit) instead of failing the start.
    assert limits["Max locked memory"][:2] == [str(HOST_MEMLOCK_CAP_BYTES)] * 2
    # nofile likewise stops at the container's hard limit (1024, tests/podman/containers.conf).
    assert limits["Max open files"][:2] == ["1024", "1024"]


def check_state_absent_removed_the_dropin_and_systemd_forgot_it(host):
    assert not host.file(DROPIN).exists
    assert "99-gpuops-limits.conf" not in systemd_property(host, "DropInPaths")
    # Back to what Debian's unit and systemd's defaults give (no LimitMEMLOCK of ours).
    assert systemd_property(host, "LimitMEMLOCK") != "infinity"
    assert host.service("containerd").is_running


# verify runs after converge (and idempotence) and again after side_effect; each of
# those moments has its own checks, and every one of them runs in its phase.
CHECKS_BY_PHASE = {
    "converge": [
        check_the_dropin_has_exactly_the_configured_limits,
        check_systemd_reports_the_configured_limits,
        check_the_handler_restarted_containerd,
        check_the_restarted_containerd_gets_the_most_the_host_allows,
    ],
    "side_effect": [check_state_absent_removed_the_dropin_and_systemd_forgot_it],
}


def test_every_check_of_this_phase_holds(host, phase):
    assert phase in CHECKS_BY_PHASE, f"unknown molecule phase {phase!r}"
    for check in CHECKS_BY_PHASE[phase]:
        check(host)

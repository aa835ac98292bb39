"""What crio_limits leaves on the node, read through podman exec (testinfra)."""

from __future__ import annotations

import pytest
import tomllib

DROPIN = "/etc/crio/crio.conf.d/99-ulimits.conf"
STARTS = "/var/lib/crio-standin/starts"


@pytest.fixture
def phase(host):
    marker = host.file("/var/lib/gpuops-molecule-phase")
    return marker.content_string.strip() if marker.exists else "converge"


def read_dropin(host):
    dropin = host.file(DROPIN)
    assert dropin.exists
    assert dropin.user == "root"
    assert dropin.group == "root"
    assert dropin.mode == 0o644
    return dropin.content_string


def test_the_dropin_directory_is_root_owned(host):
    directory = host.file("/etc/crio/crio.conf.d")
    assert directory.is_directory
    assert (directory.user, directory.group, directory.mode) == ("root", "root", 0o755)


def check_the_dropin_has_the_default_ulimits_as_toml(host):
    text = read_dropin(host)
    assert tomllib.loads(text) == {
        "crio": {
            "runtime": {"default_ulimits": ["memlock=-1:-1", "nproc=1048576:1048576", "nofile=65536:65536"]}
        }
    }
    # The exact text: the comment header, then the table CRI-O reads.
    assert text.endswith(
        '[crio.runtime]\ndefault_ulimits = [\n\t"memlock=-1:-1",\n\t"nproc=1048576:1048576",\n'
        '\t"nofile=65536:65536"\n]\n'
    )


def check_crio_was_restarted_once_by_the_role(host):
    service = host.service("crio")
    assert service.is_running
    # One start from prepare, one restart by converge's role; idempotence restarts nothing.
    starts = host.file(STARTS).content_string.split()
    assert len(starts) == 2
    assert starts[-1] == host.check_output("systemctl show -p MainPID --value crio.service")


def check_without_crio_the_file_is_written_and_nothing_restarted(host):
    assert tomllib.loads(read_dropin(host))["crio"]["runtime"]["default_ulimits"] == [
        "memlock=-1:-1",
        "stack=8388608:-1",
    ]
    assert host.check_output("systemctl show -p LoadState --value crio.service") == "not-found"
    # prepare, converge's restart, and the restart after state absent: no start afterwards.
    assert len(host.file(STARTS).content_string.split()) == 3


# verify runs after converge (and idempotence) and again after side_effect; each of
# those moments has its own checks, and every one of them runs in its phase.
CHECKS_BY_PHASE = {
    "converge": [
        check_the_dropin_has_the_default_ulimits_as_toml,
        check_crio_was_restarted_once_by_the_role,
    ],
    "side_effect": [check_without_crio_the_file_is_written_and_nothing_restarted],
}


def test_every_check_of_this_phase_holds(host, phase):
    assert phase in CHECKS_BY_PHASE, f"unknown molecule phase {phase!r}"
    for check in CHECKS_BY_PHASE[phase]:
        check(host)

"""What the first roll leaves on every node of the fleet, read through podman exec (testinfra)."""

from __future__ import annotations

import tomllib

DROPIN = "/etc/crio/crio.conf.d/99-ulimits.conf"
STARTS = "/var/lib/crio-standin/starts"


def test_every_node_took_the_dropin_and_restarted_its_runtime_once(host):
    dropin = tomllib.loads(host.file(DROPIN).content_string)
    assert dropin["crio"]["runtime"]["default_ulimits"] == [
        "memlock=-1:-1",
        "nproc=1048576:1048576",
        "nofile=65536:65536",
    ]
    # The stand-in's prepare start and the roll's restart; the idempotent second run none.
    assert len(host.file(STARTS).content_string.split()) == 2

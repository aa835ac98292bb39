# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read InfiniBand and RoCE ports from sysfs and judge their links.

The kernel's RDMA core exposes every port of every RDMA device under
``<root>/class/infiniband/<device>/ports/<n>/``:

- ``state`` (``4: ACTIVE``), ``phys_state`` (``5: LinkUp``), ``link_layer`` (``InfiniBand``
  or ``Ethernet`` for RoCE) and ``rate`` (``100 Gb/sec (4X EDR)``);
- ``counters/``: the port's PMA counters (``symbol_error``, ``link_downed``, ..), counted
  since the driver loaded or the counters were last cleared. A device without a PMA (iWARP
  such as i40iw) writes ``N/A (no PMA)`` in each; that reads as unknown (None), never 0.

Every file is read on its own: one that is missing or unreadable gives None for its value,
and a tree without ``class/infiniband`` has no ports. Nothing here raises on what it reads.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.training.plugins.module_utils.health.nvidia_smi import (
    ISOLATE,
    MONITOR,
)

DEFAULT_SYSFS_ROOT = "/sys"

# Error counters judged, with the count a port may show before it is reported. Counters
# run from the driver load, so a long-lived healthy link gathers a few symbol and receive
# errors (the IB bit error rate allows them); a link that went down, retrained, or lost
# integrity did so for a reason worth a look at any count.
DEFAULT_ERROR_THRESHOLDS: dict[str, int] = {
    "link_downed": 0,
    "link_error_recovery": 0,
    "local_link_integrity_errors": 0,
    "excessive_buffer_overrun_errors": 0,
    "symbol_error": 10,
    "port_rcv_errors": 10,
}

# Counters always read, so a port reports each one (None when the file is missing).
# port_xmit_discards and port_xmit_wait tell of congestion, not of a bad link: reported,
# not judged.
COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
    "port_xmit_wait",
    "port_rcv_data",
    "port_xmit_data",
    "port_rcv_packets",
    "port_xmit_packets",
)

_CODED = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec", re.IGNORECASE)
_UNSIGNED = re.compile(r"^\s*(\d+)\s*$")


def _read(path: str) -> str | None:
    """A sysfs file's text stripped, or None when it is missing or cannot be read."""
    try:
        with open(path, "rb") as handle:
            # sysfs attributes are one short line; a page is more than any of them.
            data = handle.read(4096)
    except (OSError, ValueError):
        return None
    text = data.decode("utf-8", errors="replace").strip()
    return text or None


def _coded(text: str | None) -> tuple[int | None, str | None]:
    """``4: ACTIVE`` as (4, "ACTIVE"); text without a code as (None, text)."""
    if text is None:
        return None, None
    match = _CODED.match(text)
    if match is None:
        return None, text
    return int(match.group(1)), match.group(2) or None


def parse_rate(text: str | None) -> float | None:
    """The rate in Gb/s from ``rate`` (``"100 Gb/sec (4X EDR)"`` -> 100.0), or None."""
    if text is None:
        return None
    match = _RATE.match(text)
    return float(match.group(1)) if match else None


def _counter(text: str | None) -> int | None:
    """A counter's value; None for ``N/A (no PMA)``, a missing file or anything not a count."""
    if text is None:
        return None
    match = _UNSIGNED.match(text)
    return int(match.group(1)) if match else None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (OSError, ValueError):
        return []


def _port_sort_key(name: str) -> tuple[int, str]:
    return (int(name), name) if name.isdigit() else (1 << 30, name)


def read_port(device: str, port: str, port_dir: str) -> dict:
    """One port's record, every value None where sysfs does not give it."""
    state_code, state = _coded(_read(os.path.join(port_dir, "state")))
    phys_code, phys_state = _coded(_read(os.path.join(port_dir, "phys_state")))
    rate = _read(os.path.join(port_dir, "rate"))
    counters_dir = os.path.join(port_dir, "counters")
    names = set(COUNTERS) | set(_listdir(counters_dir))
    counters = {name: _counter(_read(os.path.join(counters_dir, name))) for name in sorted(names)}
    return {
        "device": device,
        "port": int(port) if port.isdigit() else port,
        "name": "%s/%s" % (device, port),
        "link_layer": _read(os.path.join(port_dir, "link_layer")),
        "state": state,
        "state_code": state_code,
        "phys_state": phys_state,
        "phys_state_code": phys_code,
        "rate": rate,
        "rate_gbps": parse_rate(rate),
        "counters": counters,
    }


def read_ports(root: str = DEFAULT_SYSFS_ROOT) -> list[dict]:
    """Every port under ``<root>/class/infiniband``, by device then port number.

    Each record also carries its device's ``hca_type``, ``fw_ver`` and ``board_id``. A root
    without the directory (no RDMA driver loaded, or not a sysfs tree) gives an empty list.
    """
    base = os.path.join(root, "class", "infiniband")
    ports = []
    for device in _listdir(base):
        device_dir = os.path.join(base, device)
        details = {name: _read(os.path.join(device_dir, name)) for name in ("hca_type", "fw_ver", "board_id")}
        ports_dir = os.path.join(device_dir, "ports")
        for port in sorted(_listdir(ports_dir), key=_port_sort_key):
            port_dir = os.path.join(ports_dir, port)
            if not os.path.isdir(port_dir):
                continue
            record = read_port(device, port, port_dir)
            record.update(details)
            ports.append(record)
    return ports


def _finding(port: dict, check: str, klass: str, reason: str, remedy: str) -> dict:
    device = "%s port %s (%s)" % (port["device"], port["port"], port["link_layer"] or "link layer unknown")
    return {"device": device, "check": check, "class": klass, "reason": reason, "remedy": remedy}


def _shown(name: str | None, code: int | None) -> str:
    if name is None and code is None:
        return "unknown (not readable)"
    return "%s (%s)" % (name, code) if code is not None else str(name)


def port_findings(
    port: dict, expected_rate_gbps: float | None = None, thresholds: dict[str, int] | None = None
) -> list[dict]:
    """Findings for one port record (read_port's result)."""
    found = []
    limits = DEFAULT_ERROR_THRESHOLDS if thresholds is None else thresholds
    # A state that cannot be read is not a pass: the port is judged as not active.
    if (port["state"] or "").upper() != "ACTIVE":
        found.append(
            _finding(
                port,
                "ib_port_state",
                ISOLATE,
                "port state is %s, not ACTIVE" % _shown(port["state"], port["state_code"]),
                "Drain the node; check the cable and the switch port (ibstat, ibportstate), and that "
                "a subnet manager runs on the fabric (an INIT or ARMED port has a link but no SM).",
            )
        )
    if (port["phys_state"] or "").lower() != "linkup":
        found.append(
            _finding(
                port,
                "ib_port_phys_state",
                ISOLATE,
                "physical link is %s, not LinkUp" % _shown(port["phys_state"], port["phys_state_code"]),
                "Drain the node; reseat or replace the cable or transceiver and check the switch port "
                "(Polling: no peer answers; Disabled: the port was turned off).",
            )
        )
    if expected_rate_gbps:
        rate = port["rate_gbps"]
        if rate is None:
            found.append(
                _finding(
                    port,
                    "ib_port_rate",
                    MONITOR,
                    "the rate cannot be read (%r), %g Gb/s expected" % (port["rate"], expected_rate_gbps),
                    "Check the port with ibstat; the driver did not report a rate.",
                )
            )
        elif rate < expected_rate_gbps:
            # Half the rate or less is a link trained at fewer lanes or a lower speed
            # generation: collectives over it run at that rate, which slows every rank.
            klass = ISOLATE if rate < expected_rate_gbps / 2 else MONITOR
            found.append(
                _finding(
                    port,
                    "ib_port_rate",
                    klass,
                    "link rate %g Gb/s (%s), %g Gb/s expected" % (rate, port["rate"], expected_rate_gbps),
                    "Check the cable, the transceiver and the switch port's speed and width settings; "
                    "a link that trained at fewer lanes or a lower speed often comes back after a reseat.",
                )
            )
    counters = port["counters"]
    for name, limit in limits.items():
        value = counters.get(name)
        if value is not None and value > limit:
            found.append(
                _finding(
                    port,
                    "ib_%s" % name,
                    MONITOR,
                    "%s is %d (more than %d) since the counters were last cleared" % (name, value, limit),
                    "Watch whether it grows (perfquery, or clear with perfquery -x -R and read again); "
                    "a growing count points at the cable or transceiver.",
                )
            )
    return found


def findings(
    ports: list[dict], expected_rate_gbps: float | None = None, thresholds: dict[str, int] | None = None
) -> list[dict]:
    """Findings for every port (read_ports's result), port by port."""
    found = []
    for port in ports:
        found.extend(port_findings(port, expected_rate_gbps, thresholds))
    return found

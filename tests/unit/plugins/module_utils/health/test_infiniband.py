"""The InfiniBand/RoCE port reader on node_exporter's real sysfs fixture and on broken trees.
The fixture's .about file names its source and the facts asserted here."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health.infiniband import (
    COUNTERS,
    findings,
    parse_rate,
    read_ports,
)
from ansible_collections.gpuops.training.plugins.module_utils.health.nvidia_smi import ISOLATE, MONITOR

REPO_ROOT = pathlib.Path(__file__).resolve().parents[5]
SYSFS = REPO_ROOT / "tests" / "unit" / "fixtures" / "health" / "sysfs-infiniband" / "sys"


@pytest.fixture
def ports():
    return {port["name"]: port for port in read_ports(str(SYSFS))}


def test_the_fixture_has_three_active_infiniband_ports_in_order():
    found = read_ports(str(SYSFS))
    assert [port["name"] for port in found] == ["i40iw0/1", "mlx4_0/1", "mlx4_0/2"]
    for port in found:
        assert port["link_layer"] == "InfiniBand"
        assert (port["state"], port["state_code"]) == ("ACTIVE", 4)
        assert (port["phys_state"], port["phys_state_code"]) == ("LinkUp", 5)


def test_device_details_and_rates(ports):
    assert ports["i40iw0/1"]["hca_type"] == "I40IW"
    assert ports["i40iw0/1"]["fw_ver"] == "0.2"
    assert ports["i40iw0/1"]["rate"] == "10 Gb/sec (4X)"
    assert ports["i40iw0/1"]["rate_gbps"] == 10.0
    assert ports["mlx4_0/1"]["hca_type"] == "MT4099"
    assert ports["mlx4_0/1"]["fw_ver"] == "2.31.5050"
    assert ports["mlx4_0/1"]["board_id"] == "SM_1141000001000"
    assert ports["mlx4_0/1"]["port"] == 1 and ports["mlx4_0/2"]["port"] == 2
    assert ports["mlx4_0/1"]["rate"] == "40 Gb/sec (4X QDR)"
    assert ports["mlx4_0/2"]["rate_gbps"] == 40.0


def test_no_pma_counters_are_unknown_not_zero(ports):
    counters = ports["i40iw0/1"]["counters"]
    assert len(counters) == 17
    assert set(COUNTERS) <= set(counters)
    assert all(value is None for value in counters.values())


def test_mlx4_counter_values(ports):
    first = ports["mlx4_0/1"]["counters"]
    assert first["link_downed"] == 0
    assert first["link_error_recovery"] == 0
    assert first["port_rcv_errors"] == 0
    assert first["port_rcv_discards"] == 0
    assert first["port_xmit_discards"] == 5
    assert first["port_xmit_wait"] == 4294967295
    assert first["port_rcv_data"] == 4631917
    assert first["port_xmit_data"] == 3733440
    assert first["port_rcv_packets"] == 6825908347
    assert first["port_xmit_packets"] == 6235865
    assert first["multicast_rcv_packets"] == 93
    assert first["unicast_xmit_packets"] == 61239
    # No symbol_error file on this port: unknown.
    assert first["symbol_error"] is None
    second = ports["mlx4_0/2"]["counters"]
    assert second["link_downed"] == 0 and second["port_rcv_data"] == 0
    assert second["symbol_error"] is None
    assert second["port_rcv_errors"] is None
    assert second["port_xmit_discards"] is None


def test_the_fixture_gives_no_findings_without_an_expected_rate():
    # port_xmit_discards 5 is congestion: reported, not judged.
    assert findings(read_ports(str(SYSFS))) == []


def test_a_rate_below_half_of_the_expected_isolates():
    found = findings(read_ports(str(SYSFS)), expected_rate_gbps=40)
    assert [(f["device"], f["check"], f["class"]) for f in found] == [
        ("i40iw0 port 1 (InfiniBand)", "ib_port_rate", ISOLATE)
    ]
    assert "10 Gb/s" in found[0]["reason"] and "40 Gb/s expected" in found[0]["reason"]


def test_a_rate_a_little_below_the_expected_is_monitored():
    found = findings(read_ports(str(SYSFS)), expected_rate_gbps=12)
    assert [(f["device"], f["check"], f["class"]) for f in found] == [
        ("i40iw0 port 1 (InfiniBand)", "ib_port_rate", MONITOR)
    ]


@pytest.mark.parametrize(
    "text, rate",
    [
        ("100 Gb/sec (4X EDR)", 100.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("400 Gb/sec (4X NDR)", 400.0),
        ("", None),
        (None, None),
        ("fast", None),
    ],
)
def test_parse_rate(text, rate):
    assert parse_rate(text) == rate


def copy_tree(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(SYSFS, root)
    return root


def port_dir(root, device="mlx4_0", port="1"):
    return root / "class" / "infiniband" / device / "ports" / port


def test_a_down_port_isolates_and_error_counters_are_monitored(tmp_path):
    root = copy_tree(tmp_path)
    port = port_dir(root)
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("2: Polling\n")
    (port / "counters" / "link_downed").write_text("3\n")
    (port / "counters" / "symbol_error").write_text("11\n")
    (port / "counters" / "link_error_recovery").write_text("1\n")
    found = [f for f in findings(read_ports(str(root))) if f["device"].startswith("mlx4_0 port 1")]
    assert [(f["check"], f["class"]) for f in found] == [
        ("ib_port_state", ISOLATE),
        ("ib_port_phys_state", ISOLATE),
        ("ib_link_downed", MONITOR),
        ("ib_link_error_recovery", MONITOR),
        ("ib_symbol_error", MONITOR),
    ]
    assert "DOWN (1)" in found[0]["reason"]
    assert "Polling (2)" in found[1]["reason"]
    assert "link_downed is 3" in found[2]["reason"]


def test_symbol_errors_at_the_threshold_are_not_reported(tmp_path):
    root = copy_tree(tmp_path)
    (port_dir(root) / "counters" / "symbol_error").write_text("10\n")
    assert findings(read_ports(str(root))) == []
    assert findings(read_ports(str(root)), thresholds={"symbol_error": 0})[0]["check"] == "ib_symbol_error"


def test_missing_and_unreadable_files_read_as_none(tmp_path):
    root = copy_tree(tmp_path)
    port = port_dir(root)
    (port / "rate").unlink()
    (port / "link_layer").unlink()
    (port / "counters" / "link_downed").write_text("garbage\n")
    (port / "counters" / "port_rcv_errors").write_bytes(b"\xff\xfe\n")
    shutil.rmtree(port / "counters_ext")
    (port / "state").unlink()
    (port / "state").mkdir()  # reading a directory fails: unknown, not a traceback
    record = {p["name"]: p for p in read_ports(str(root))}["mlx4_0/1"]
    assert record["rate"] is None and record["rate_gbps"] is None
    assert record["link_layer"] is None
    assert record["state"] is None and record["state_code"] is None
    assert record["counters"]["link_downed"] is None
    assert record["counters"]["port_rcv_errors"] is None
    found = findings([record], expected_rate_gbps=40)
    # An unreadable state is not a pass; an unreadable rate is only watched.
    assert [(f["check"], f["class"]) for f in found] == [
        ("ib_port_state", ISOLATE),
        ("ib_port_rate", MONITOR),
    ]
    assert "unknown (not readable)" in found[0]["reason"]
    assert found[0]["device"] == "mlx4_0 port 1 (link layer unknown)"


def test_a_file_that_cannot_be_read_reads_as_none(tmp_path):
    # A directory where the rate file should be: reading it fails for any user, root included
    # (a file without read permission would not fail for root, who runs these tests in CI).
    root = copy_tree(tmp_path)
    rate = port_dir(root) / "rate"
    rate.unlink()
    rate.mkdir()
    record = {p["name"]: p for p in read_ports(str(root))}["mlx4_0/1"]
    assert record["rate"] is None


def test_a_tree_without_infiniband_has_no_ports(tmp_path):
    assert read_ports(str(tmp_path)) == []
    assert read_ports(str(tmp_path / "no-such-root")) == []
    (tmp_path / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    assert read_ports(str(tmp_path)) == []
    # A file where the ports directory should be is skipped too.
    (tmp_path / "class" / "infiniband" / "mlx5_0" / "ports").write_text("x")
    assert read_ports(str(tmp_path)) == []
    assert findings([]) == []


def test_ports_sort_by_number_and_stray_files_are_skipped(tmp_path):
    ports = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports"
    for number in ("10", "2", "1"):
        (ports / number).mkdir(parents=True)
        (ports / number / "state").write_text("4: ACTIVE\n")
        (ports / number / "phys_state").write_text("5: LinkUp\n")
        (ports / number / "link_layer").write_text("Ethernet\n")
        (ports / number / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (ports / "README").write_text("not a port")
    found = read_ports(str(tmp_path))
    assert [port["port"] for port in found] == [1, 2, 10]
    assert found[0]["link_layer"] == "Ethernet"
    assert found[0]["hca_type"] is None
    assert all(value is None for value in found[0]["counters"].values())
    assert findings(found, expected_rate_gbps=200) == []

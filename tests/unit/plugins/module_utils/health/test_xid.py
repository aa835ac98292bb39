"""The Xid/SXid finder on real kernel logs (dmesg, dmesg --ctime and --time-format iso,
journalctl -k, and lines pasted into markdown) and on bad input. Each fixture's .about file
names its source and the facts asserted here."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health.nvidia_smi import (
    ISOLATE,
    MONITOR,
    REBOOT,
)
from ansible_collections.gpuops.training.plugins.module_utils.health.xid import (
    CATALOGUE,
    XID_CODES,
    KernelLogError,
    describe_xid,
    findings,
    parse_kernel_log,
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[5]
FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures" / "health"
KERNEL_LOGS = [
    "dmesg-ctime-xid119-gsp-timeout.log",
    "dmesg-iso-xid13-xid43-oom.log",
    "dmesg-xid32-xid31-laptop.log",
    "journal-xid45-after-xid145-149.log",
    "journal-xid79-fallen-off-bus.log",
    "markdown-quote-xid79-sxid20034.txt",
]


def events_of(name: str) -> list[dict]:
    return parse_kernel_log((FIXTURES / name).read_text())


def summary(found: list[dict]) -> list[tuple[str, str, str]]:
    return [(item["device"], item["check"], item["class"]) for item in found]


@pytest.mark.parametrize("name", KERNEL_LOGS)
def test_every_kernel_log_fixture_has_an_about_file(name):
    assert (FIXTURES / (name + ".about")).is_file()


def test_gsp_timeout_dmesg_ctime():
    events = events_of("dmesg-ctime-xid119-gsp-timeout.log")
    assert [event["line"] for event in events] == [3, 38, 40, 42, 43]
    assert {(event["kind"], event["code"], event["pci"], event["device"]) for event in events} == {
        ("xid", 119, "0000:9b:00", "0000:9b:00.0")
    }
    assert events[0]["text"].startswith("pid=2024380, name=nvidia-smi, Timeout after 6s")
    assert [event["text"].split(",")[1].strip() for event in events] == [
        "name=nvidia-smi",
        "name=nvidia-smi",
        "name=nvidia-smi",
        "name=cache_mgr_main",
        "name=gpud",
    ]
    found = findings(events)
    assert summary(found) == [("GPU 0000:9b:00.0", "xid_119", REBOOT)]
    assert "on 5 lines (3 to 43)" in found[0]["reason"]
    assert "catalogue immediate action RESET_GPU" in found[0]["reason"]


def test_graphics_exception_burst_dmesg_iso_ignores_oom_lines():
    events = events_of("dmesg-iso-xid13-xid43-oom.log")
    assert len(events) == 17
    assert [event["code"] for event in events] == [13] * 16 + [43]
    assert [event["line"] for event in events] == list(range(1, 18))
    assert {event["device"] for event in events} == {"0000:38:00.0"}
    assert events[-1]["text"] == "pid=2924364, name=pt_main_thread, Ch 00000008"
    assert summary(findings(events)) == [
        ("GPU 0000:38:00.0", "xid_13", MONITOR),
        ("GPU 0000:38:00.0", "xid_43", MONITOR),
    ]


def test_laptop_dmesg_xid32_then_xid31():
    events = events_of("dmesg-xid32-xid31-laptop.log")
    assert [(event["line"], event["code"]) for event in events] == [(1, 32), (2, 32), (3, 31)]
    assert events[2]["text"] == "Ch 00000003, engmask 00000101, intr 10000000"
    assert summary(findings(events)) == [
        ("GPU 0000:01:00.0", "xid_32", MONITOR),
        ("GPU 0000:01:00.0", "xid_31", MONITOR),
    ]


def test_journal_xid45_names_its_cause_and_is_not_read_as_145_or_149():
    events = events_of("journal-xid45-after-xid145-149.log")
    assert [event["code"] for event in events] == [45] * 8
    by_gpu = {}
    for event in events:
        by_gpu.setdefault(event["pci"], []).append(event["line"])
    assert by_gpu == {"0000:dc:00": [1, 5], "0000:ed:00": [2, 7], "0000:ba:00": [3, 6], "0000:97:00": [4, 8]}
    found = findings(events)
    assert summary(found) == [
        ("GPU 0000:dc:00.0", "xid_45", MONITOR),
        ("GPU 0000:ed:00.0", "xid_45", MONITOR),
        ("GPU 0000:ba:00.0", "xid_45", MONITOR),
        ("GPU 0000:97:00.0", "xid_45", MONITOR),
    ]
    assert "earlier Xid 149 as the cause" in found[0]["reason"]
    assert all("earlier Xid 145 as the cause" in item["reason"] for item in found[1:])


def test_journal_xid79_only_the_xid_line_is_an_event():
    events = events_of("journal-xid79-fallen-off-bus.log")
    assert len(events) == 1
    assert (events[0]["line"], events[0]["code"], events[0]["pci"]) == (2, 79, "0000:2b:00")
    assert events[0]["text"] == "GPU has fallen off the bus."
    assert summary(findings(events)) == [("GPU 0000:2b:00.0", "xid_79", REBOOT)]


def test_markdown_quoted_xid79_with_sxid20034_from_three_switches():
    events = events_of("markdown-quote-xid79-sxid20034.txt")
    assert [(event["line"], event["kind"], event["code"]) for event in events] == [(5, "xid", 79)] + [
        (line, "sxid", 20034) for line in range(11, 26, 2)
    ]
    sxids = [event for event in events if event["kind"] == "sxid"]
    assert [event["switch"] for event in sxids] == [
        "nvidia-nvswitch1",
        "nvidia-nvswitch0",
        "nvidia-nvswitch2",
        "nvidia-nvswitch0",
        "nvidia-nvswitch2",
        "nvidia-nvswitch0",
        "nvidia-nvswitch2",
        "nvidia-nvswitch0",
    ]
    assert [event["fatal"] for event in sxids] == [True, True, None, None, True, True, None, None]
    assert sxids[0]["pci"] == "0000:06:00.0"
    assert sxids[0]["text"] == "Fatal, Link 48 LTSSM Fault Up"
    found = findings(events)
    assert summary(found) == [
        ("GPU 0000:91:00.0", "xid_79", REBOOT),
        ("nvidia-nvswitch1 (0000:06:00.0)", "sxid_20034", REBOOT),
        ("nvidia-nvswitch0 (0000:05:00.0)", "sxid_20034", REBOOT),
        ("nvidia-nvswitch2 (0000:07:00.0)", "sxid_20034", REBOOT),
    ]
    assert "on 4 lines (13 to 25)" in found[2]["reason"]
    for item in found:
        assert set(item) == {"device", "check", "class", "reason", "remedy"}
        assert item["reason"] and item["remedy"]


def test_non_fatal_and_unstated_sxids_are_monitor():
    text = (
        "[38889.018130] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 04 RX Short\n"
        "[38889.018131] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Severity 0 Engine instance 04\n"
        "[38889.018132] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 12028, Data {0x0}\n"
    )
    found = findings(parse_kernel_log(text))
    assert summary(found) == [
        ("nvidia-nvswitch1 (0000:06:00.0)", "sxid_20009", MONITOR),
        ("nvidia-nvswitch1 (0000:06:00.0)", "sxid_12028", MONITOR),
    ]
    assert "non-fatal" in found[0]["reason"]
    assert "fatality not stated" in found[1]["reason"]


@pytest.mark.parametrize(
    ("code", "klass"),
    [
        (13, MONITOR),
        (31, MONITOR),
        (43, MONITOR),
        (45, MONITOR),
        (48, ISOLATE),
        (61, ISOLATE),
        (62, REBOOT),
        (63, MONITOR),
        (64, ISOLATE),
        (74, ISOLATE),
        (79, REBOOT),
        (92, MONITOR),
        (94, MONITOR),
        (95, REBOOT),
        (119, REBOOT),
        (120, REBOOT),
        (140, REBOOT),
    ],
)
def test_the_table_classes_the_well_known_codes(code, klass):
    assert code in XID_CODES
    entry = describe_xid(code)
    assert entry["class"] == klass
    assert entry["meaning"] and entry["remedy"] and entry["catalogue_action"]
    line = "NVRM: Xid (PCI:0000:3b:00): %d, pid=1, name=python" % code
    assert summary(findings(parse_kernel_log(line))) == [("GPU 0000:3b:00.0", "xid_%d" % code, klass)]


def test_an_unknown_code_gets_the_default_class():
    entry = describe_xid(9999)
    assert entry["class"] == MONITOR
    assert entry["catalogue_action"] == ""
    found = findings(parse_kernel_log("NVRM: Xid (PCI:0000:3b:00): 9999, something new"))
    assert summary(found) == [("GPU 0000:3b:00.0", "xid_9999", MONITOR)]
    assert "not in this module's table" in found[0]["reason"]


def test_the_catalogue_is_named():
    assert "Xid Catalog" in CATALOGUE and "r580" in CATALOGUE


@pytest.mark.parametrize(
    ("line", "pci", "code", "text"),
    [
        # Very old drivers leave out "PCI:".
        ("NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007", "0000:01:00", 3, "C 00000005 SC 00000007"),
        # syslog with a host and a dmesg stamp, CRLF line end.
        ("Jan 18 11:38:05 host kernel: [ 269.5] NVRM: Xid (PCI:0000:3b:00): 79\r", "0000:3b:00", 79, ""),
        (
            "<3>[ 1.0] NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0",
            "0018:01:00",
            145,
            "RLW_RXPIPE Nonfatal XC0",
        ),
    ],
)
def test_line_forms(line, pci, code, text):
    (event,) = parse_kernel_log(line)
    assert (event["pci"], event["code"], event["text"]) == (pci, code, text)


def test_redacted_pci_is_kept_as_logged():
    (event,) = parse_kernel_log("kernel: NVRM: Xid (PCI:...): 137, RLW_RXPIPE interrupt hit")
    assert (event["pci"], event["device"], event["code"]) == ("...", "...", 137)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "NVRM: Xid (PCI:0000:3b:00): N/A",
        "NVRM: Xid (PCI:0000:3b:00: 79, missing parenthesis",
        "NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
        "grep Xid /var/log/messages found nothing",
        '{"kind": "not a log"}',
    ],
)
def test_text_without_events_gives_none(text):
    assert parse_kernel_log(text) == []
    assert findings(parse_kernel_log(text)) == []


def test_bytes_with_bad_utf8_are_read():
    data = b"\xff\xfe[ 1.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n"
    (event,) = parse_kernel_log(data)
    assert (event["line"], event["code"]) == (1, 48)


def test_line_numbers_count_newlines_only():
    # A form feed inside a line must not shift the numbers grep -n gives.
    text = "first\x0cstill first\nNVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    assert [event["line"] for event in parse_kernel_log(text)] == [2]


def test_non_text_input_gives_a_clear_error():
    with pytest.raises(KernelLogError, match="expected kernel log text, got NoneType"):
        parse_kernel_log(None)

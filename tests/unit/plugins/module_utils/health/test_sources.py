"""Telling a saved file's kind from its text: every health fixture, the forms around them,
and input that is neither."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health.sources import (
    KIND_KERNEL_LOG,
    KIND_NVIDIA_SMI_XML,
    KIND_UNKNOWN,
    detect_kind,
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[5]
FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures" / "health"


def fixture_cases():
    cases = []
    for path in sorted(FIXTURES.iterdir()):
        if path.is_dir():
            # A sysfs tree (sysfs-infiniband) is read in place, not a saved output.
            continue
        if path.name.endswith(".about"):
            # The provenance notes are prose: neither kind.
            expected = KIND_UNKNOWN
        elif path.suffix == ".xml":
            expected = KIND_NVIDIA_SMI_XML
        else:
            expected = KIND_KERNEL_LOG
        cases.append(pytest.param(path, expected, id=path.name))
    return cases


def test_there_are_fixtures_of_both_kinds():
    kinds = {expected for _path, expected in (case.values for case in fixture_cases())}
    assert kinds == {KIND_NVIDIA_SMI_XML, KIND_KERNEL_LOG, KIND_UNKNOWN}
    assert len(fixture_cases()) == 27


@pytest.mark.parametrize(("path", "expected"), fixture_cases())
def test_every_fixture_is_recognised(path, expected):
    assert detect_kind(path.read_text()) == expected
    assert detect_kind(path.read_bytes()) == expected


def test_a_cut_off_report_is_still_a_report():
    text = (FIXTURES / "nvidia-smi-a10g-r515.xml").read_text()
    assert detect_kind(text[:300]) == KIND_NVIDIA_SMI_XML


@pytest.mark.parametrize(
    "text",
    [
        "<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>",
        (
            '\ufeff<?xml version="1.0" ?>\n'
            '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
        ),
        "\n\n  <nvidia_smi_log/>",
    ],
)
def test_report_forms(text):
    assert detect_kind(text) == KIND_NVIDIA_SMI_XML


@pytest.mark.parametrize(
    "text",
    [
        # dmesg with no NVIDIA lines is still a kernel log (a clean one).
        "[    0.000000] Linux version 5.15.0-112-generic\n[    0.000001] Command line: ro quiet\n",
        "<6>[    2.757687] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  530.41.03\n",
        "[Sun Feb 23 16:24:30 2025] clocksource: Long readout interval, skipping watchdog check\n",
        "kern  :info  : 2025-01-21T08:41:30,287197+00:00 eth0: link up\n",
        "2025-01-21T04:41:44,283302+00:00 nvidia-peermem: loaded\n",
        "May 18 19:02:39 node-1 kernel: pcieport 0000:00:01.1: AER: Corrected error received\n",
        "Feb 14 05:03:41 000-000-00000-1-gpu-1 kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE\n",
        "2026-02-14T05:03:41+0000 gpu-1 kernel: EXT4-fs (md127p3): re-mounted\n",
        "> [  117.984502] nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 22013, Non-fatal, Link 60\n",
        "some preamble\nkernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001\n",
    ],
)
def test_kernel_log_forms(text):
    assert detect_kind(text) == KIND_KERNEL_LOG


@pytest.mark.parametrize(
    "data",
    [
        "",
        "   \n\t\n",
        None,
        42,
        b"",
        '{"gpus": []}',
        # nvidia-smi -q without -x: plain text, which no parser here reads.
        "==============NVSMI LOG==============\n\nTimestamp : Tue Jun 21 12:58:00 2022\n"
        "Driver Version : 470.103.01\n",
        "<html><body><nvidia_smi_log>not at the start</nvidia_smi_log></body></html>",
        "node-1:123:456 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node-1:123:456 [0] NCCL INFO NET/IB : No device\n",
        # One kernel-looking line inside prose is not a kernel log.
        "How to read it:\n\nRun dmesg and look\nfor lines like\n[ 1.0] usb 1-1: new device\n"
        "then read the\nnext section.\n",
    ],
)
def test_neither_kind(data):
    assert detect_kind(data) == KIND_UNKNOWN

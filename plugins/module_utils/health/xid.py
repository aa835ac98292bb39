# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find NVIDIA Xid and SXid events in kernel log text and judge them.

The driver writes one line per event, whatever collects the kernel log around it:

- GPU: ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`` (very old
  drivers leave out ``PCI:``);
- NVSwitch: ``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 ...``,
  one event often spread over several lines (``Fatal, Link ..``, ``Severity ..``, ``Data
  {..}``) that share the switch and the code.

Lines are matched anywhere, so plain ``dmesg`` (``[ 12.345]``), ``dmesg --ctime`` or
``--time-format iso``, ``journalctl -k`` (``May 18 19:02:39 host kernel:``), syslog, and
lines pasted into markdown (``> [..] NVRM: ..``) all read the same.

Classes per Xid code follow NVIDIA's Xid catalogue; see CATALOGUE below.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.training.plugins.module_utils.health.nvidia_smi import (
    ISOLATE,
    MONITOR,
    REBOOT,
    normalize_pci,
)

# Where the classes come from. The document is NVIDIA's "XID Errors" (GPU deployment and
# management documentation), page "Analyzing Xid Errors with the Xid Catalog", Table 1
# "Xids", https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, in the r580
# release of the catalogue (the form dcgm-exporter PR #588 calls "XID errors v580", Nov 2025).
# Its rows were read as published on 2025-10-29: the column headers and the first rows from
# the page itself, every row used below checked against leptonai/gpud's table generated
# from the page that day (components/accelerator/nvidia/xid/catalog_generated.go, commit
# b9842de2b11177a482560391805f1691c9ef9607). The meanings below are our own short words.
#
# The class comes from the catalogue's "Resolution Bucket (Immediate Action)":
#   RESTART_APP, IGNORE          -> monitor  (the application failed; the node is fine)
#   RESET_GPU, RESTART_BM        -> reboot   (a GPU reset or a node reboot clears it)
#   CONTACT_SUPPORT              -> isolate  (nothing on the node clears it)
#   WORKFLOW_* (the catalogue defers to a decision procedure): our choice, said per code.
CATALOGUE = (
    "NVIDIA XID Errors, 'Analyzing Xid Errors with the Xid Catalog', Table 1 Xids "
    "(r580 catalogue, as published 2025-10-29)"
)

# code: (meaning, the catalogue's immediate action, class, remedy)
XID_CODES: dict[int, tuple[str, str, str, str]] = {
    13: (
        "graphics engine exception: a kernel faulted (out-of-range access, illegal instruction)",
        "RESTART_APP",
        MONITOR,
        "Restart the job and check the application; if it repeats on the same GPC/TPC/SM across "
        "jobs, run dcgmi diag -r 3 on the GPU.",
    ),
    31: (
        "GPU memory page fault: an access to an address the context had not mapped",
        "RESTART_APP",
        MONITOR,
        "Restart the job and check the application (often an application or driver bug); if it "
        "repeats with known-good code, run dcgmi diag.",
    ),
    32: (
        "corrupted push buffer stream (PBDMA error) on a channel",
        "RESTART_APP",
        MONITOR,
        "Restart the job; check the application and the CUDA/driver versions if it repeats.",
    ),
    43: (
        "the GPU stopped the channel of an application that faulted",
        "IGNORE",
        MONITOR,
        "Nothing on the node: the faulting application was stopped and the GPU keeps working.",
    ),
    45: (
        "the driver tore down a channel because of an earlier error",
        "WORKFLOW_XID_45",
        # A consequence, not a cause: the Xid before it (48, 74, 94, 145, 149 ..) is judged
        # on its own line.
        MONITOR,
        "Look at the Xid logged before it on the same GPU and follow that one; alone it needs nothing.",
    ),
    48: (
        "uncorrectable (double-bit) ECC error in GPU memory",
        "WORKFLOW_XID_48",
        # The data the job read may be corrupt, the same call as nvidia-smi's volatile
        # uncorrectable count.
        ISOLATE,
        "Drain the node; check nvidia-smi -q -d ECC,ROW_REMAPPER (or PAGE_RETIREMENT) for pending "
        "remaps, reset the GPU, and RMA it if the errors come back.",
    ),
    61: (
        "internal micro-controller breakpoint or warning (older GPUs; unused from Ampere on)",
        "CONTACT_SUPPORT",
        ISOLATE,
        "Drain the node, collect nvidia-bug-report.sh and contact NVIDIA support.",
    ),
    62: (
        "internal micro-controller halted",
        "RESET_GPU",
        REBOOT,
        "Reset the GPU or reboot the node; contact NVIDIA support if it repeats.",
    ),
    63: (
        "a memory row was marked for remapping (or a page for retirement)",
        "IGNORE",
        # The remap waits for a GPU reset; nvidia-smi's remapped_rows pending says when, and
        # is judged there (reboot).
        MONITOR,
        "Check nvidia-smi -q -d ROW_REMAPPER: a pending remap is applied by the next GPU reset.",
    ),
    64: (
        "a memory row could not be remapped (or a page not retired)",
        "RESET_GPU",
        # The catalogue's immediate action is a reset, which brings the GPU back for a
        # while; its investigatory action is CONTACT_SUPPORT, and a remapping failure is an
        # RMA criterion in NVIDIA's GPU memory error management guide. A training node
        # should not keep the GPU, so isolate (as for nvidia-smi's remap failure).
        ISOLATE,
        "Take the GPU out of service and RMA it; a reset only hides the failing memory for a while.",
    ),
    74: (
        "NVLink error",
        "WORKFLOW_NVLINK_ERR",
        # The workflow reads the error registers to tell link noise from a failing link;
        # until someone has, collectives over that link may hang or slow down.
        ISOLATE,
        "Drain the node; read the registers in the Xid line per the catalogue's NVLink workflow, "
        "check nvidia-smi nvlink -e, reseat the link, and run field diagnostics if it persists.",
    ),
    79: (
        "the GPU fell off the bus: it no longer answers on PCIe",
        "RESTART_BM",
        REBOOT,
        "Reboot the node (a GPU reset does not reach it); if it happens again, check power, "
        "temperature and the slot, and contact NVIDIA support.",
    ),
    92: (
        "high rate of single-bit (corrected) ECC errors",
        "IGNORE",
        MONITOR,
        "Watch the corrected-error counts; contact support if the rate stays high.",
    ),
    94: (
        "contained memory error: the affected application was stopped, the GPU kept running",
        "RESTART_APP",
        MONITOR,
        "Restart the job; check nvidia-smi for a pending row remap, which the next GPU reset applies.",
    ),
    95: (
        "uncontained memory error: every application on the GPU is affected",
        "RESET_GPU",
        REBOOT,
        "Stop the GPU's work and reset it (or reboot the node); RMA if it repeats.",
    ),
    119: (
        "the GPU's GSP firmware did not answer an RPC in time",
        "RESET_GPU",
        REBOOT,
        "Reset the GPU or reboot the node; if it repeats, update the driver and report it to NVIDIA.",
    ),
    120: (
        "error in the GPU's GSP firmware",
        "RESET_GPU",
        REBOOT,
        "Reset the GPU or reboot the node; if it repeats, update the driver and report it to NVIDIA.",
    ),
    140: (
        "an uncorrectable ECC error escaped containment",
        "RESET_GPU",
        REBOOT,
        "Reset the GPU or reboot the node; contact NVIDIA support if it repeats.",
    ),
}

# A code not in the table: too many codes are application faults to drain a node on one we
# cannot name, so the default is to watch it and look it up.
UNKNOWN_XID = (
    "an Xid code not in this module's table",
    "",
    MONITOR,
    "Look the code up in NVIDIA's Xid catalogue and watch whether it repeats.",
)

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)]*)\): (?P<code>\d+)(?:,\s*(?P<text>.*))?")
_SXID = re.compile(
    r"(?P<switch>nvidia-nvswitch\d+): SXid \((?:PCI:)?(?P<pci>[^)]*)\): (?P<code>\d+)(?:,\s*(?P<text>.*))?"
)
# Xid 45 lines on newer drivers name the error that caused them.
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")


class KernelLogError(ValueError):
    """The input is not kernel log text."""


def _lines(text: str | bytes) -> list[str]:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise KernelLogError("expected kernel log text, got %s" % type(text).__name__)
    # Split on newlines only, so the line numbers are those of an editor or grep -n.
    return [line.rstrip("\r") for line in text.split("\n")]


def _fatal(text: str) -> bool | None:
    lowered = text.lower()
    if lowered.startswith("non-fatal"):
        return False
    if lowered.startswith("fatal"):
        return True
    return None


def parse_kernel_log(text: str | bytes) -> list[dict]:
    """The Xid and SXid events in kernel log text, in the order they appear.

    Each event: ``line`` (1-based), ``kind`` (``xid`` or ``sxid``), ``pci`` (as logged),
    ``device`` (the PCI address normalised to ``dddd:bb:dd.f``), ``switch`` (the NVSwitch,
    SXid only), ``code``, ``text`` (the message after the code) and, for SXid, ``fatal``
    (True, False, or None when the line does not say). Empty text gives no events.
    """
    events = []
    for number, line in enumerate(_lines(text), start=1):
        if "Xid" not in line:
            continue
        match = _SXID.search(line)
        kind = "sxid"
        if match is None:
            match = _XID.search(line)
            kind = "xid"
        if match is None:
            continue
        message = (match.group("text") or "").strip()
        event = {
            "line": number,
            "kind": kind,
            "pci": match.group("pci"),
            "device": normalize_pci(match.group("pci")),
            "switch": match.group("switch") if kind == "sxid" else None,
            "code": int(match.group("code")),
            "text": message,
        }
        if kind == "sxid":
            event["fatal"] = _fatal(message)
        events.append(event)
    return events


def describe_xid(code: int) -> dict:
    """The table's entry for an Xid code (the default entry for codes it does not know)."""
    meaning, action, klass, remedy = XID_CODES.get(code, UNKNOWN_XID)
    return {"code": code, "meaning": meaning, "catalogue_action": action, "class": klass, "remedy": remedy}


def _lines_said(group: list[dict]) -> str:
    first, last = group[0]["line"], group[-1]["line"]
    if len(group) == 1:
        return "on line %d" % first
    # "lines", not "times": one SXid event often takes several lines.
    return "on %d lines (%d to %d)" % (len(group), first, last)


def findings(events: list[dict]) -> list[dict]:
    """One finding per device and code, in the order each was first seen.

    The Xid catalogue has no SXid rows, so SXid classes come from the lines themselves: the
    driver marks an SXid ``Fatal`` or ``Non-fatal``. A fatal NVSwitch error stops NVLink
    traffic through the switch until the switches and GPUs are reset, on an HGX baseboard in
    practice a node reboot, so ``reboot`` (our reading, not a catalogue row); a non-fatal one
    is ``monitor``, as is a code whose lines never say (continuation lines, ``Severity ..``
    and ``Data {..}``, carry no word of their own, so the group's Fatal line decides).
    """
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for event in events:
        key = (event["kind"], event["switch"] or event["device"] or "", event["code"])
        groups.setdefault(key, []).append(event)
    found = []
    for (kind, _where, code), group in groups.items():
        first = group[0]
        if kind == "xid":
            meaning, action, klass, remedy = XID_CODES.get(code, UNKNOWN_XID)
            reason = "Xid %d (%s) %s" % (code, meaning, _lines_said(group))
            if action:
                reason += "; catalogue immediate action %s" % action
            causes = sorted({int(m) for event in group for m in _CAUSED_BY.findall(event["text"])})
            if causes:
                reason += "; the driver names earlier Xid %s as the cause" % ", ".join(str(c) for c in causes)
            device = "GPU %s" % first["device"]
        else:
            fatal = [event["fatal"] for event in group]
            if True in fatal:
                klass, word = REBOOT, "fatal"
                remedy = (
                    "Reset the NVSwitches and GPUs (reboot the node) so Fabric Manager rebuilds the fabric; "
                    "if it repeats on the same link, check the link and contact NVIDIA support."
                )
            else:
                klass = MONITOR
                word = "non-fatal" if False in fatal else "fatality not stated"
                remedy = (
                    "Watch whether it repeats on the same link; look the code up in the Fabric Manager guide."
                )
            reason = "SXid %d (NVSwitch error, %s) %s" % (code, word, _lines_said(group))
            device = "%s (%s)" % (first["switch"], first["device"])
        found.append(
            {
                "device": device,
                "check": "%s_%d" % (kind, code),
                "class": klass,
                "reason": reason,
                "remedy": remedy,
            }
        )
    return found

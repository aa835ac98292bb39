# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tell what a saved file is, so each goes to the parser that reads it.

Files arrive under any name (``gpu0.txt``, ``bug-report-part.log``), so the kind is read
from the text, cheaply and without parsing it: an ``nvidia-smi -q -x`` report, a kernel log
(``dmesg`` in its time formats, ``journalctl -k``, syslog, or lines pasted with a markdown
``> ``), or unknown. A cut-off report is still a report: its parser then says what is
wrong with it.
"""

from __future__ import annotations

import re

KIND_NVIDIA_SMI_XML = "nvidia_smi_xml"
KIND_KERNEL_LOG = "kernel_log"
KIND_UNKNOWN = "unknown"

# How much of the text is looked at: the XML root comes after at most a declaration and a
# DOCTYPE, and a kernel log shows its form in its first lines.
HEAD_CHARS = 4096
HEAD_LINES = 50

_XML_START = re.compile(
    r"^(?:<\?xml[^>]*\?>\s*)?(?:<!DOCTYPE\s+nvidia_smi_log[^>]*>\s*)?<nvidia_smi_log[\s>/]"
)
# An Xid or SXid line anywhere makes the text a kernel log, whatever surrounds it.
_GPU_EVENT = re.compile(r"NVRM: Xid \(|nvidia-nvswitch\d+: SXid \(")
_QUOTE = r"(?:>\s*)?"
_KERNEL_LINE = re.compile(
    _QUOTE
    + r"(?:"
    # dmesg, with or without a printk level: "[   12.345678] ", "<3>[ 1.2] "
    + r"(?:<\d+>)?\[\s*\d+\.\d+\]"
    # dmesg --ctime: "[Sun Feb 23 16:24:18 2025]"
    + r"|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]"
    # dmesg --time-format iso: "2025-01-21T04:41:44,283302+00:00 "
    + r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+[+-]\d\d:\d\d "
    # dmesg --decode: "kern  :warn  : "
    + r"|(?:kern|user|daemon|syslog|auth|local\d)\s*:\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:"
    # journalctl -k and syslog: "May 18 19:02:39 host kernel: ", ISO stamps, the host optional
    + r"|(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[\d:.,]+(?:Z|[+-]\d\d:?\d\d)?)"
    + r"\s+(?:\S+\s+)?kernel:"
    + r")"
)


def _text(data: object) -> str | None:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data if isinstance(data, str) else None


def detect_kind(data: str | bytes) -> str:
    """``nvidia_smi_xml``, ``kernel_log`` or ``unknown`` for a saved file's text.

    Anything that is not text (None, a number) is ``unknown``, as is empty text.
    """
    text = _text(data)
    if text is None:
        return KIND_UNKNOWN
    head = text[:HEAD_CHARS].lstrip("\ufeff \t\r\n")
    if not head:
        return KIND_UNKNOWN
    if _XML_START.match(head):
        return KIND_NVIDIA_SMI_XML
    if _GPU_EVENT.search(text):
        return KIND_KERNEL_LOG
    lines = [line for line in head.split("\n") if line.strip()][:HEAD_LINES]
    # A lone kernel-looking line inside something else (a pasted command in a runbook) is
    # not enough: most of the first lines must have a kernel log's prefix.
    kernel_lines = sum(1 for line in lines if _KERNEL_LINE.match(line.lstrip()))
    if kernel_lines and kernel_lines * 2 >= len(lines):
        return KIND_KERNEL_LOG
    return KIND_UNKNOWN

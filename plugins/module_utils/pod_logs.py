# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A pod's log from the copy saved while the run went and the log read at its end.

On a run of days the node rotates a container's log (the kubelet keeps a few files of
``containerLogMaxSize``) and ``kubectl logs`` returns the newest file only: the head, where
NCCL prints its init and the trainer its first records, is gone by the end. The training_job
role saves every pod's log early (``logs/early/<pod>.log``, until every rank has taken its
first step) and :func:`write_joined` puts that copy in front of what the final read returns,
without repeating the lines both hold. A pod deleted by the end keeps its early copy.

Everything here works on bytes and streams: the final log is never held whole in memory
(only as many of its first bytes as the early copy is long), so a fleet of 10 MB logs costs
the controller the early copies and a buffer, not the logs.
"""

from __future__ import annotations

import io
import re

# Written between the early copy and the final log when they do not overlap: lines between
# them were rotated away. No log reader takes it for a record.
GAP_LINE = (
    "[gpuops.training] the node rotated away this pod's log between its early copy (above) "
    "and the final read (below)"
)
_GAP = GAP_LINE.encode() + b"\n"
# The trainer's first step record: every rank of the pod is past init_process_group and DDP's
# first collective, so NCCL has printed its init.
_FIRST_STEP = re.compile(r'"event"\s*:\s*"(step|run_end)"')
_FIRST_STEP_BYTES = re.compile(_FIRST_STEP.pattern.encode())


class PodLogError(TypeError):
    pass


def _text(value, name):
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PodLogError("%s must be a log as a string, got %s" % (name, type(value).__name__))
    return value


def past_init(log):
    """Whether the log (text or bytes) shows the trainer's first step (or its end): its head
    holds the init."""
    if isinstance(log, (bytes, bytearray)):
        return bool(_FIRST_STEP_BYTES.search(log))
    return bool(_FIRST_STEP.search(_text(log, "the log")))


def join_prefix(head, final_start, previous_start=b""):
    """What goes in front of the final log, and the source of the result.

    ``head`` is the early copy's whole lines, ``final_start`` the final log's first
    ``len(head)`` bytes (all of it when it is shorter), ``previous_start`` the first bytes of
    the log of the container before its last restart. Returns ``(prefix, source)``:
    nothing and ``final`` when the final log (or the previous container's, which the early
    copy then belongs to) still starts with the early copy; the early copy up to the line
    where the rest of it is the final log's start and ``early+final`` when the node rotated
    the head away before the early copy's end (the whole rest must match, so a repeated line
    cannot join them wrongly); else the early copy, :data:`GAP_LINE` and ``early+gap+final``.
    """
    if not head or final_start.startswith(head) or previous_start.startswith(head):
        return b"", "final"
    newline = final_start.find(b"\n")
    anchor = final_start if newline < 0 else final_start[: newline + 1]
    at = head.find(anchor)
    while at >= 0:
        if (at == 0 or head[at - 1 : at] == b"\n") and final_start.startswith(head[at:]):
            return head[:at], "early+final"
        at = head.find(anchor, at + 1)
    return head + _GAP, "early+gap+final"


def write_joined(early, final_chunks, out, previous_start=b""):
    """Write the pod's log to verify to ``out`` (a binary file): the early copy (bytes, empty
    when none was saved) joined to the final log, read from ``final_chunks`` (an iterable of
    bytes, empty when the pod is gone) as it streams. Returns ``(source, bytes written)``;
    source is ``final``, ``early`` (no final log), ``early+final`` or ``early+gap+final``
    (see :func:`join_prefix`)."""
    # Only whole lines of the early copy: its last line may have been read half written.
    head = early[: early.rfind(b"\n") + 1]
    chunks = iter(final_chunks)
    start = bytearray()
    while len(start) < max(len(head), 1):
        chunk = next(chunks, None)
        if chunk is None:
            break
        start += chunk
    if not start:
        out.write(early)
        return ("early" if early else "final"), len(early)
    prefix, source = join_prefix(head, bytes(start), previous_start)
    out.write(prefix)
    out.write(start)
    written = len(prefix) + len(start)
    for chunk in chunks:
        out.write(chunk)
        written += len(chunk)
    return source, written


def merge_pod_log(early, final, previous=None):
    """The pod's log to verify from text held in memory (the pod_log_merge filter), joined as
    :func:`write_joined` joins streams: ``{"log": text, "source": ...}``."""
    early = _text(early, "early").encode("utf-8", "surrogateescape")
    final = _text(final, "final").encode("utf-8", "surrogateescape")
    previous = _text(previous, "previous").encode("utf-8", "surrogateescape")
    out = io.BytesIO()
    source, _written = write_joined(early, [final] if final else [], out, previous)
    return {"log": out.getvalue().decode("utf-8", "surrogateescape"), "source": source}

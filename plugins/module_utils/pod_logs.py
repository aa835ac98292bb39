# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A pod's log from the copy saved while the run went and the log read at its end.

On a run of days the node rotates a container's log (the kubelet keeps a few files of
``containerLogMaxSize``) and ``kubectl logs`` returns the newest file only: the head, where
NCCL prints its init and the trainer its first records, is gone by the end. The training_job
role saves every pod's log early (``logs/early/<pod>.log``, once every rank has taken its
first step) and :func:`merge_pod_log` puts that copy in front of what the final read returned,
without repeating the lines both hold. A pod deleted by the end keeps its early copy.
"""

from __future__ import annotations

import re

# Written between the early copy and the final log when they do not overlap: lines between
# them were rotated away. No log reader takes it for a record.
GAP_LINE = (
    "[gpuops.training] the node rotated away this pod's log between its early copy (above) "
    "and the final read (below)"
)
# The trainer's first step record: every rank of the pod is past init_process_group and DDP's
# first collective, so NCCL has printed its init.
_FIRST_STEP = re.compile(r'"event"\s*:\s*"(step|run_end)"')


class PodLogError(TypeError):
    pass


def _text(value, name):
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PodLogError("%s must be a log as a string, got %s" % (name, type(value).__name__))
    return value


def past_init(log):
    """Whether the log shows the trainer's first step (or its end): its head holds the init."""
    return bool(_FIRST_STEP.search(_text(log, "the log")))


def merge_pod_log(early, final, previous=None):
    """The pod's log to verify, and how it was made.

    ``early`` is the copy saved while the run went, ``final`` the log read at the end (empty
    when the pod is gone), ``previous`` the log of the container before its last restart.
    Returns ``{"log": text, "source": ...}``; source is ``final`` (it still starts with the
    early copy, or the early copy belongs to the previous container), ``early`` (no final
    log), ``early+final`` (joined where they overlap) or ``early+gap+final`` (they do not
    overlap: :data:`GAP_LINE` between them).
    """
    early = _text(early, "early")
    final = _text(final, "final")
    previous = _text(previous, "previous")
    # Only whole lines of the early copy: its last line may have been read half written.
    head = early[: early.rfind("\n") + 1]
    if not head:
        return {"log": final or early, "source": "final" if final or not early else "early"}
    if not final:
        return {"log": early, "source": "early"}
    if final.startswith(head) or previous.startswith(head):
        return {"log": final, "source": "final"}
    # The final log starts inside the early copy when the node rotated the head away before the
    # early copy's end: join at the line where the rest of the early copy is the final's start.
    # The whole rest of the early copy must match: a repeated line cannot join them wrongly.
    anchor = final.splitlines(keepends=True)[0]
    at = head.find(anchor)
    while at >= 0:
        if (at == 0 or head[at - 1] == "\n") and final.startswith(head[at:]):
            return {"log": head[:at] + final, "source": "early+final"}
        at = head.find(anchor, at + 1)
    return {"log": head + GAP_LINE + "\n" + final, "source": "early+gap+final"}

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One isolate test's log, read as the measurement the planner judges.

A test is ``{id, round, kind, nodes, log, rc}``; its measurement adds ``busbw`` (the peak
large-message bus bandwidth of its nccl-tests table, as ``nccl_tests_info`` judges it),
``rows`` (the large-message rows that show it), ``nranks`` and ``error`` when the log holds no
usable result: no table, a failed test, wrong results or out-of-bounds values (a node that
corrupts data is at fault whatever its bandwidth), or a launcher that exited with no result.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    LogSourceError,
    collect_sources,
)
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import (
    LARGE_MESSAGE_BYTES,
    parse_nccl_tests,
)

# The rows kept as evidence of each test: the large-message ones, at most this many.
MAX_EVIDENCE_ROWS = 8


def _rows(table, large_message_bytes):
    rows = [row for row in table["rows"] if row["size"] >= large_message_bytes]
    if not rows and table["rows"]:
        largest = max(row["size"] for row in table["rows"])
        rows = [row for row in table["rows"] if row["size"] == largest]
    return [
        {
            "size": row["size"],
            "busbw_out_of_place": row["out_of_place"]["busbw"],
            "busbw_in_place": row["in_place"]["busbw"],
            "algbw_out_of_place": row["out_of_place"]["algbw"],
            "time_us_out_of_place": row["out_of_place"]["time_us"],
        }
        for row in rows[-MAX_EVIDENCE_ROWS:]
    ]


def measure(test, large_message_bytes=LARGE_MESSAGE_BYTES):
    """The test with what its log says (see the module's doc)."""
    entry = {key: test.get(key) for key in ("id", "round", "kind", "nodes", "log", "rc")}
    entry.update(busbw=None, rows=[], nranks=None, error=None)
    path = test.get("log")
    rc = test.get("rc")
    exited = " (the launcher exited with code %s)" % rc if rc not in (None, 0, "0") else ""
    if not path or not os.path.isfile(path):
        entry["error"] = "no log at %s%s" % (path, exited)
        return entry
    try:
        result = parse_nccl_tests(collect_sources(paths=[path]), large_message_bytes)
    except (LogSourceError, OSError) as error:
        entry["error"] = "its log could not be read: %s" % error
        return entry
    judged = [table for table in result["tables"] if table["peak_busbw"] is not None]
    entry["nranks"] = result["nranks"]
    if judged:
        entry["busbw"] = max(table["peak_busbw"] for table in judged)
        best = max(judged, key=lambda table: table["peak_busbw"])
        entry["rows"] = _rows(best, large_message_bytes)
    errors = [error["message"] for error in result["errors"]]
    if result["wrong_total"]:
        entry["error"] = "%d wrong results (#wrong): data was corrupted" % result["wrong_total"]
    elif errors:
        entry["error"] = "; ".join(errors[:3])
    elif not judged:
        entry["error"] = "no nccl-tests result in its log%s" % exited
    elif any(table["failed"] for table in result["tables"]):
        entry["error"] = "the test failed part way%s" % exited
    return entry

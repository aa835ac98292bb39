# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's own history: every health pass, nccl-tests result and training run's throughput,
kept per node, and a result judged against the node's recent median.

A fixed floor (a fabric profile's expected bus bandwidth, a straggler percentage against the
run's peers) misses a node that is slowly getting worse while it is still above the floor, and
peers that all degrade together. So each result is also compared with the same node's earlier
results of the same kind: those with the same ``metric``, ``key`` (what makes two results
comparable: the test, its size, the number of nodes) and ``device``.

Records are JSON lines in ``<history dir>/<node>.jsonl``, one file per node, appended under a
lock and trimmed to the newest ``keep`` records.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import statistics
import time

from ansible_collections.gpuops.training.plugins.module_utils.health.fleet import CLASSES, fenced_findings
from ansible_collections.gpuops.training.plugins.module_utils.report_files import write_atomically

SCHEMA = "gpuops.node-history/v1"
SOURCES = ("node_health", "nccl_tests", "training")
DEFAULT_DROP_PERCENT = 15.0
DEFAULT_WINDOW = 10
DEFAULT_MIN_SAMPLES = 3
DEFAULT_KEEP = 1000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

_WORDS = {
    "busbw_gbps": ("bus bandwidth", "GB/s"),
    "images_per_s": ("throughput", "images/s"),
}
_REMEDIES = {
    "nccl_tests": (
        "Run nccl_tests.yml -e nccl_tests_mode=isolate to compare it with its peers now, and "
        "node_health.yml on it (PCIe link, throttling, IB port errors); keep it in service while "
        "it stays above the fixed floor, and watch the next results."
    ),
    "training": (
        "Run node_health.yml on it (throttle reasons, PCIe link, ECC) and compare the GPU with its "
        "peers in the next run; keep it in service while the run's own checks pass."
    ),
}

_DEFAULT_REMEDY = "Check the node with node_health.yml and watch the next results."


class HistoryError(ValueError):
    """Bad input, naming the field."""


def check_settings(drop_percent, window, min_samples, keep):
    """The problems of the settings, each naming the option; empty when they are good."""
    problems = []
    if (
        not isinstance(drop_percent, (int, float))
        or isinstance(drop_percent, bool)
        or not 0 < drop_percent < 100
    ):
        problems.append("drop_percent must be a percentage above 0 and below 100, got %r" % (drop_percent,))
    for name, value, least in (("window", window, 1), ("min_samples", min_samples, 1), ("keep", keep, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            problems.append("%s must be an integer of at least %d, got %r" % (name, least, value))
    if not problems and min_samples > window:
        problems.append("min_samples (%d) cannot be more than window (%d)" % (min_samples, window))
    if not problems and keep < window:
        problems.append("keep (%d) cannot be less than window (%d)" % (keep, window))
    return problems


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def normalise(record, index=0, now=None):
    """One record as stored: checked, with its time and schema. Raises HistoryError naming
    ``records[index].<field>``."""
    where = "records[%d]" % index
    if not isinstance(record, dict):
        raise HistoryError("%s must be a mapping, got %r" % (where, record))
    node = record.get("node")
    if not isinstance(node, str) or not node.strip():
        raise HistoryError("%s.node must name the node, got %r" % (where, node))
    source = record.get("source")
    if source not in SOURCES:
        raise HistoryError("%s.source must be one of %s, got %r" % (where, ", ".join(SOURCES), source))
    metric = record.get("metric")
    if not isinstance(metric, str) or not metric:
        raise HistoryError("%s.metric must name what was measured, got %r" % (where, metric))
    value = record.get("value")
    if value is not None and not _is_number(value):
        raise HistoryError("%s.value must be a finite number or null, got %r" % (where, value))
    stamp = record.get("time", now if now is not None else time.time())
    if not _is_number(stamp):
        raise HistoryError("%s.time must be seconds since the epoch, got %r" % (where, stamp))
    stored = {
        "schema": SCHEMA,
        "time": float(stamp),
        "node": node.strip(),
        "source": source,
        "metric": metric,
        "key": str(record.get("key") or ""),
        "device": str(record.get("device") or ""),
        "value": value,
        "run_id": str(record.get("run_id") or ""),
    }
    if record.get("details") is not None:
        stored["details"] = record["details"]
    return stored


def node_file(history_dir, node):
    """``<dir>/<node>.jsonl``, the node's name made safe for a file name."""
    name = _UNSAFE.sub("_", node)
    if name in ("", ".", ".."):
        raise HistoryError("node %r cannot name a history file" % node)
    return os.path.join(history_dir, name + ".jsonl")


def read_node(history_dir, node):
    """The node's records, oldest first; lines that are not records (a write cut short) are
    skipped."""
    path = node_file(history_dir, node)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("schema") == SCHEMA and record.get("node") == node:
            records.append(record)
    records.sort(key=lambda record: record.get("time") or 0.0)
    return records


def _group(record):
    return (record["node"], record["source"], record["metric"], record["key"], record["device"])


def judge(
    records,
    history,
    drop_percent=DEFAULT_DROP_PERCENT,
    window=DEFAULT_WINDOW,
    min_samples=DEFAULT_MIN_SAMPLES,
):
    """Each numeric record against its node's earlier results of the same kind (``history``:
    stored records, any nodes): the median of the newest ``window`` before it, judged once
    there are ``min_samples``. Returns one judgement per numeric record, in order."""
    earlier = {}
    for entry in history:
        if _is_number(entry.get("value")):
            earlier.setdefault(_group(entry), []).append(entry)
    judged = []
    for record in records:
        if not _is_number(record.get("value")):
            continue
        # A run verified again is not its own history.
        run_id = record["run_id"]
        prior = [
            entry
            for entry in earlier.get(_group(record), [])
            if entry["time"] < record["time"] and not (run_id and entry.get("run_id") == run_id)
        ]
        prior = sorted(prior, key=lambda entry: entry["time"])[-window:]
        verdict = {
            "node": record["node"],
            "source": record["source"],
            "metric": record["metric"],
            "key": record["key"],
            "device": record["device"],
            "value": record["value"],
            "samples": len(prior),
            "median": None,
            "below_median_percent": None,
            "flagged": False,
        }
        if len(prior) >= min_samples:
            median = statistics.median(entry["value"] for entry in prior)
            verdict["median"] = round(median, 6)
            if median > 0:
                below = 100.0 * (median - record["value"]) / median
                verdict["below_median_percent"] = round(below, 1)
                if below > drop_percent:
                    verdict.update(flagged=True, **_finding(verdict, drop_percent))
        judged.append(verdict)
    return judged


def _number(value):
    return ("%.3g" % value) if abs(value) < 1000 else ("%.0f" % value)


def _finding(verdict, drop_percent):
    words, unit = _WORDS.get(verdict["metric"], (verdict["metric"], ""))
    what = "%s%s" % (verdict["node"], (" " + verdict["device"]) if verdict["device"] else "")
    kind = (" (%s)" % verdict["key"]) if verdict["key"] else ""
    reason = (
        "%s: %s %s %s%s is %s %% below this node's median of %s %s over its last %d results (more than %s %%)"
        % (
            what,
            words,
            _number(verdict["value"]),
            unit,
            kind,
            _number(verdict["below_median_percent"]),
            _number(verdict["median"]),
            unit,
            verdict["samples"],
            _number(drop_percent),
        )
    )
    return {
        "class": "monitor",
        "check": "history",
        "reason": " ".join(reason.split()),
        "remedy": _REMEDIES.get(
            verdict["source"], "Check the node with node_health.yml and watch the next results."
        ),
    }


def append(history_dir, records, keep=DEFAULT_KEEP):
    """Append the records to their nodes' files (created with the directory), each file under
    an exclusive lock and trimmed to its newest ``keep`` lines. Returns the files written."""
    by_file = {}
    for record in records:
        by_file.setdefault(node_file(history_dir, record["node"]), []).append(record)
    if by_file:
        os.makedirs(history_dir, exist_ok=True)
    for path, entries in sorted(by_file.items()):
        text = "".join(json.dumps(entry, sort_keys=True) + "\n" for entry in entries)
        with open(path, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                handle.write(text)
                handle.flush()
                handle.seek(0)
                lines = handle.readlines()
                if len(lines) > keep:
                    write_atomically(path, "".join(lines[-keep:]).encode("utf-8"))
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return sorted(by_file)


def run(
    history_dir,
    records,
    drop_percent=DEFAULT_DROP_PERCENT,
    window=DEFAULT_WINDOW,
    min_samples=DEFAULT_MIN_SAMPLES,
    keep=DEFAULT_KEEP,
    record=True,
    check_mode=False,
    now=None,
):
    """Judge ``records`` against each node's history, then (unless ``record`` is false or in
    check mode) append them. Returns ``judged``, ``flagged``, ``appended``, ``files``."""
    problems = check_settings(drop_percent, window, min_samples, keep)
    if problems:
        raise HistoryError("; ".join(problems))
    if not isinstance(history_dir, str) or not history_dir:
        raise HistoryError("dir must name the history directory, got %r" % (history_dir,))
    if not isinstance(records, list):
        raise HistoryError("records must be a list, got %r" % (records,))
    now = time.time() if now is None else now
    stored = [normalise(record, index, now) for index, record in enumerate(records)]
    history = []
    for node in sorted({record["node"] for record in stored}):
        history.extend(read_node(history_dir, node))
    judged = judge(stored, history, drop_percent, window, min_samples)
    # A run verified again adds nothing: its figures are kept once.
    kept = {(_group(entry), entry.get("run_id")) for entry in history if entry.get("run_id")}
    new = [entry for entry in stored if not (entry["run_id"] and (_group(entry), entry["run_id"]) in kept)]
    files = []
    if record and not check_mode and new:
        files = append(history_dir, new, keep)
    return {
        "judged": judged,
        "flagged": [verdict for verdict in judged if verdict["flagged"]],
        "appended": len(new) if files else 0,
        "files": files,
    }


def isolate_records(summary, collective, run_id="", gpus_per_node=None):
    """What an isolate run (isolate.json's summary) adds to each node's history: every node's
    bus bandwidth alone, and its bus bandwidth with each partner it was paired with (the
    link's own history). Halves are left out: their nodes change from run to run."""
    if not isinstance(summary, dict) or not isinstance(summary.get("tests"), list):
        raise HistoryError("the isolate summary must be a mapping with its tests, got %r" % (summary,))
    gpus = (" x %s GPUs" % gpus_per_node) if gpus_per_node else ""
    records = []
    for index, test in enumerate(summary["tests"]):
        nodes = test.get("nodes") if isinstance(test, dict) else None
        if not isinstance(nodes, list) or not all(isinstance(node, str) and node for node in nodes):
            raise HistoryError(
                "tests[%d] must be a mapping with the names of its nodes, got %r" % (index, test)
            )
        value = test.get("busbw")
        if not _is_number(value) or len(nodes) not in (1, 2):
            continue
        for node in nodes:
            partner = [other for other in nodes if other != node]
            key = (
                ("%s with %s" % (collective, partner[0])) if partner else ("%s alone%s" % (collective, gpus))
            )
            records.append(
                {
                    "node": node,
                    "source": "nccl_tests",
                    "metric": "busbw_gbps",
                    "key": key,
                    "value": value,
                    "run_id": run_id,
                    "details": {"test": test.get("id"), "slow": bool(test.get("slow"))},
                }
            )
    return records


def training_records(metrics, run_id=""):
    """What a training run (training_log_info's result) adds to its nodes' histories: each GPU's
    compute throughput (images per second of its own computing, so that waiting for a slow peer
    does not count against it), keyed by the run's workload, so a GPU is only compared with
    itself training the same. Ranks that did not end well, or name no node or GPU, are left
    out."""
    if not isinstance(metrics, dict) or not isinstance(metrics.get("ranks"), list):
        raise HistoryError(
            "the training metrics must be training_log_info's result, with its ranks, got %r"
            % (type(metrics).__name__ if isinstance(metrics, dict) else metrics,)
        )
    workload = metrics.get("workload")
    if not isinstance(workload, str) or not workload:
        return []  # no run_start record survived: nothing says what the figures are comparable with
    records = []
    for rank in metrics["ranks"]:
        if not isinstance(rank, dict) or rank.get("status") != "ok":
            continue
        node, local_rank, rate = rank.get("node"), rank.get("local_rank"), rank.get("compute_images_per_s")
        if not isinstance(node, str) or not node.strip() or not isinstance(local_rank, int):
            continue
        if not _is_number(rate) or rate <= 0:
            continue
        records.append(
            {
                "node": node,
                "source": "training",
                "metric": "images_per_s",
                "key": workload,
                "device": "GPU %d" % local_rank,
                "value": rate,
                "run_id": run_id,
                "details": {"rank": rank.get("rank"), "host": rank.get("host")},
            }
        )
    return records


# Findings a health pass keeps per node: enough to read a node's past at a glance.
MAX_KEPT_FINDINGS = 20


def health_records(entries, run_id="", checks=()):
    """What a health pass adds to each node's history: one record per node, without a figure
    (``value`` null: a pass is kept, not judged), its verdict and findings in ``details``.
    ``entries`` are the pass's nodes as health.fleet's ``entries_of`` makes them; the key names
    the checks that ran, so passes of different checks are told apart."""
    if not isinstance(entries, list):
        raise HistoryError("the health pass's nodes must be a list, got %r" % (entries,))
    key = ", ".join(sorted(str(check) for check in checks))
    records = []
    for entry in entries:
        # Worst first, so that the cap keeps what matters.
        findings = fenced_findings(entry, CLASSES)
        records.append(
            {
                "node": entry["node"],
                "source": "node_health",
                "metric": "health_pass",
                "key": key,
                "value": None,
                "run_id": run_id,
                "details": {
                    "verdict": entry.get("verdict"),
                    "complete": entry.get("complete"),
                    "needs_action": entry.get("needs_action"),
                    "findings": [
                        {name: finding.get(name) for name in ("device", "check", "class", "reason")}
                        for finding in findings[:MAX_KEPT_FINDINGS]
                    ],
                    "findings_total": len(findings),
                    "not_run": [item.get("check") for item in entry.get("not_run") or []],
                    "error": entry.get("error"),
                },
            }
        )
    return records


def measure_records(summary, nodes, run_id="", gpus_per_node=None):
    """What a measure run (nccl_tests.json's summary) adds to its nodes' histories: each
    collective's peak bus bandwidth, when the run was one node alone or a pair - the same
    records, under the same keys, as an isolate run's singles and pairs. A run of more nodes
    adds nothing: its figure belongs to the set of nodes, not to one of them."""
    if not isinstance(summary, dict) or not isinstance(summary.get("collectives"), list):
        raise HistoryError("the measure summary must be a mapping with its collectives, got %r" % (summary,))
    if not isinstance(nodes, list) or not all(isinstance(node, str) and node for node in nodes):
        raise HistoryError("nodes must be the names of the run's nodes, got %r" % (nodes,))
    if len(set(nodes)) not in (1, 2):
        return []
    records = []
    for row in summary["collectives"]:
        if not isinstance(row, dict) or not row.get("ok") or not isinstance(row.get("collective"), str):
            continue
        test = {"id": row["collective"], "nodes": sorted(set(nodes)), "busbw": row.get("peak_busbw_gbyte_s")}
        records.extend(isolate_records({"tests": [test]}, row["collective"], run_id, gpus_per_node))
    return records

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a launcher's record and the log modules' results together into one run summary."""

from __future__ import annotations

import json
import os

from ansible_collections.gpuops.training.plugins.module_utils.quantities import (
    QuantityError,
    format_bytes,
    parse_quantity,
)
from ansible_collections.gpuops.training.plugins.module_utils.ranks_text import ranks_text
from ansible_collections.gpuops.training.plugins.module_utils.run_fleet import (
    VERDICT_DIFFER_LINES,
    differ_line,
    differs,
)
from ansible_collections.gpuops.training.plugins.module_utils.sizing import (
    DEFAULT_GPU_RESOURCE,
    DEFAULT_NCCL_PER_GPU,
    SizingError,
    node_share,
    shm_bytes,
    size_memory,
)
from ansible_collections.gpuops.training.plugins.module_utils.training_log import (
    DEFAULT_LEAK_TOLERANCE_MIB,
    DEFAULT_STRAGGLER_PERCENT,
    describe_memory_leak,
    describe_straggler,
)
from ansible_collections.gpuops.training.plugins.module_utils.training_settings import CLUSTER_LAUNCHERS

SUMMARY_SCHEMA = "gpuops.run-summary/v1"
# How the memory section sizes the next run and when it warns (the training_verify role's
# training_verify_memory_* variables).
DEFAULT_MEMORY_OPTIONS = {
    "buffer_percent": 10,  # the limit: the peak plus this
    "limit_margin_percent": 10,  # warn when a rank's peak came within this of its cgroup limit
    # Warn when a rank's GPU peak, as the driver sees the device (the CUDA context, NCCL's
    # buffers and other processes included), came within this of the device's total memory; a
    # failure instead with gpu_margin_fails.
    "gpu_margin_percent": 5,
    "gpu_margin_fails": False,
    "leak_fails": False,  # a suspected leak fails the verdict instead of warning
    "loader": None,  # the DataLoader: workers, batch_size, sample_bytes (for /dev/shm)
    # The node's allocatable resources ({'memory': ..., 'nvidia.com/gpu': ...}), or per node name:
    # the recommendation then states the pod's share of the node's RAM and GPUs.
    "node_allocatable": None,
    "gpu_resource": DEFAULT_GPU_RESOURCE,
}


# What to do about a straggler: its node is the suspect.
STRAGGLER_REMEDY = (
    "check that node: thermal or power throttling (nvidia-smi -q -d PERFORMANCE shows the clocks' "
    "throttle reasons), a degraded GPU or PCIe link (nvidia-smi -q: the link's current generation and "
    "width against its maximum; Xid errors in the kernel log), noisy neighbours (other pods or processes "
    "on its CPUs, GPUs or network); drain it or move the job off it and run again (a node_health check "
    "is planned)"
)


def nccl_statement(nccl, backend):
    """One sentence on NCCL that never reports success for a run that did not use it."""
    if nccl.get("unverifiable"):
        # NCCL_DEBUG below INFO: a statement, not a failure (nccl_log_info's unverifiable).
        return "NCCL transport %s" % "; ".join(nccl["unverifiable"])
    if not nccl.get("nccl_used"):
        if backend and backend != "nccl":
            return (
                "NCCL was not used: the run used the %s backend, so there is no NCCL transport to verify."
                % backend
            )
        return "NCCL was not used: no NCCL lines were found in the logs."
    ranks = nccl.get("init_complete_ranks") or []
    text = "NCCL %s: %d of %s ranks reached Init COMPLETE" % (
        nccl.get("nccl_version") or "(version not printed)",
        len(ranks),
        nccl.get("nranks"),
    )
    transport = nccl.get("transport")
    if transport:
        text += ", transport %s" % transport
        if nccl.get("gdr"):
            text += " with GPUDirect RDMA"
    return text + "."


# Up to this many ranks the verdict gives each rank's memory; past it, one line across them.
VERDICT_MEMORY_RANKS = 8


def build_run_summary(run, training, nccl, memory_options=None, stragglers_fail=False, history=None):
    """Return the summary dict written to summary.json; ``verdict`` is passed or failed.

    ``memory_options`` (see DEFAULT_MEMORY_OPTIONS) shape the memory section: each rank's
    memory, the sizing of the next run, and the warnings (or failures) it raises. Stragglers
    (training_log_info's) are warnings, failures with ``stragglers_fail``. ``history`` is
    node_history's result for the GPUs' throughput (None: not kept); a GPU it flags is a
    warning.
    """
    run = run or {}
    training = training or {}
    nccl = nccl or {}
    memory = memory_section(run, training, memory_options)
    stragglers = straggler_rows(run, training)
    failures = list(training.get("failures") or [])
    if training.get("ranks") is None and training.get("msg"):
        failures.append(training["msg"])
    failures.extend(nccl.get("failures") or [])
    if nccl.get("ranks") is None and nccl.get("nccl_used") is None and nccl.get("msg"):
        failures.append(nccl["msg"])
    if run.get("timed_out"):
        failures.insert(0, "the launcher stopped the run after its timeout of %s s" % run.get("timeout_s"))
    elif run.get("rc") not in (None, 0, "0"):
        failures.append("the launcher exited with code %s" % run.get("rc"))
    failures.extend(memory.pop("failures"))
    log_failures, log_warnings = _log_problems(run)
    failures[:0] = log_failures
    if stragglers_fail:
        failures.extend(row["statement"] for row in stragglers)
    history_rows = history_section(training, history)

    started, ended = run.get("started"), run.get("ended")
    duration = round(float(ended) - float(started), 1) if started is not None and ended is not None else None
    ranks = [
        {
            "rank": rank.get("rank"),
            "host": rank.get("host"),
            "node": rank.get("node"),
            "status": rank.get("status"),
            "epochs_completed": rank.get("epochs_completed"),
            "last_step": rank.get("last_step"),
            "first_epoch_loss": rank.get("first_epoch_loss"),
            "last_epoch_loss": rank.get("last_epoch_loss"),
            "images_per_s": rank.get("images_per_s"),
            "attempt": rank.get("attempt"),
            "error": rank.get("error"),
            "memlock_bytes": rank.get("memlock_bytes"),
            "timing": rank.get("timing"),
            "compute_images_per_s": rank.get("compute_images_per_s"),
        }
        for rank in training.get("ranks") or []
    ]
    checkpoints = training.get("checkpoints") or []
    backend = training.get("backend")
    summary = {
        "schema": SUMMARY_SCHEMA,
        "verdict": "failed" if failures else "passed",
        "failures": failures,
        "warnings": log_warnings
        + ([] if stragglers_fail else [row["statement"] for row in stragglers])
        + [warning["what"] for warning in memory["warnings"]]
        + [row["reason"] for row in (history_rows or {}).get("flagged", [])],
        "run_id": run.get("run_id"),
        "launcher": run.get("launcher"),
        "host": run.get("host"),
        "run_dir": run.get("run_dir"),
        "launcher_rc": run.get("rc"),
        "duration_s": duration,
        "world_size": run.get("world_size"),
        "ranks_reporting": training.get("ranks_reporting") or [],
        "ranks": ranks,
        "backend": backend,
        "model": training.get("model"),
        "device": training.get("device"),
        "epochs": training.get("epochs") or [],
        "steps": training.get("steps") or [],
        "loss": training.get("loss") or {},
        "throughput": training.get("throughput") or {},
        "checkpoints": {
            "count": len(checkpoints),
            "last": checkpoints[-1] if checkpoints else None,
        },
        "evaluation": _last_evaluation(training.get("evaluations") or []),
        "restarts": training.get("restarts", 0),
        "resumes": training.get("resumes") or [],
        "memlock": training.get("memlock") or {},
        "stragglers": stragglers,
        "straggler_percent": training.get("straggler_percent", DEFAULT_STRAGGLER_PERCENT),
        "stragglers_fail": bool(stragglers_fail),
        "straggler_remedy": STRAGGLER_REMEDY,
        "memory": memory,
        "nccl": {
            "used": bool(nccl.get("nccl_used")),
            "statement": nccl_statement(nccl, backend),
            "verifiable": not nccl.get("unverifiable"),
            "unverifiable": list(nccl.get("unverifiable") or []),
            "version": nccl.get("nccl_version"),
            "nranks": nccl.get("nranks"),
            "init_complete_ranks": nccl.get("init_complete_ranks") or [],
            "transport": nccl.get("transport"),
            "gdr": nccl.get("gdr"),
            "net_paths": nccl.get("net_paths") or [],
            "p2p_types": nccl.get("p2p_types") or [],
            "ib_devices": [
                device.get("name") for device in nccl.get("ib_devices") or [] if device.get("name")
            ],
            "socket_ifaces": nccl.get("socket_ifaces") or [],
            "warning_count": nccl.get("warning_count", 0),
            "ranks": _nccl_ranks(nccl),
            "errors": [
                {key: error.get(key) for key in ("kind", "message", "remedy", "count", "lines")}
                for error in nccl.get("errors") or []
            ],
        },
        "logs": list(run.get("log_paths") or []),
        "history": history_rows,
    }
    slower = {
        row["rank"]: "%s%% slower than its peers' median in compute" % round(row.get("percent_below") or 0)
        for row in stragglers
    }
    for row in (history_rows or {}).get("flagged", []):
        if row["rank"] is not None:
            what = "%s%% below this GPU's own median" % round(row.get("below_median_percent") or 0)
            slower[row["rank"]] = "; ".join(filter(None, (slower.get(row["rank"]), what)))
    summary["differs"] = differs(summary, slower)
    summary["verdict_lines"] = verdict_lines(summary)
    return summary


def history_section(training, history):
    """What node_history said of the GPUs' throughput: how many were judged, how many had
    enough history to be, and each flagged GPU with the rank that ran on it. None when the
    history was not kept."""
    if not isinstance(history, dict) or history.get("skipped"):
        return None
    rank_on = {}
    for rank in training.get("ranks") or []:
        if isinstance(rank.get("local_rank"), int) and rank.get("node"):
            rank_on[(rank["node"], "GPU %d" % rank["local_rank"])] = rank.get("rank")
    judged = history.get("judged") or []
    return {
        "gpus_judged": len(judged),
        "gpus_with_history": sum(1 for verdict in judged if verdict.get("median") is not None),
        "files": list(history.get("files") or []),
        "flagged": [
            dict(
                {key: verdict.get(key) for key in HISTORY_KEYS},
                rank=rank_on.get((verdict.get("node"), verdict.get("device"))),
            )
            for verdict in history.get("flagged") or []
        ],
    }


# What summary.json keeps of each GPU node_history flagged.
HISTORY_KEYS = (
    "node",
    "device",
    "key",
    "value",
    "median",
    "below_median_percent",
    "samples",
    "reason",
    "remedy",
)


def verdict_lines(summary):
    """What the verdict prints beyond its first lines, short at any size: what differs (at most
    VERDICT_DIFFER_LINES groups, then how many more), and memory rank by rank up to
    VERDICT_MEMORY_RANKS ranks, else across the ranks."""
    lines = [differ_line(group) for group in summary["differs"][:VERDICT_DIFFER_LINES]]
    more = len(summary["differs"]) - VERDICT_DIFFER_LINES
    if more > 0:
        lines.append("... and %d more groups of ranks that differ (report.html, ranks.csv)" % more)
    if lines:
        lines.insert(0, "What differs, by node:")
    memory = summary["memory"]["ranks"]
    if len(memory) <= VERDICT_MEMORY_RANKS:
        lines += ["Memory %s" % row["statement"] for row in memory]
    else:
        lines.append(
            "Memory across %d ranks: %s" % (len(memory), memory_across_ranks(memory, summary["ranks"]))
        )
    return lines


def memory_across_ranks(memory, ranks):
    """``RSS median 1.2Gi to 1.4Gi, highest peak 1.5Gi on rank 5 (node a) in train``, the same
    for the cgroup working set, and the GPU device with the least headroom."""
    nodes = {rank.get("rank"): rank.get("node") or rank.get("host") for rank in ranks}
    parts = []
    for label, median_key, peak_key, phase_key in (
        ("RSS", "rss_median_bytes", "rss_peak_bytes", "rss_peak_phase"),
        (
            "cgroup working set",
            "working_set_median_bytes",
            "working_set_peak_bytes",
            "working_set_peak_phase",
        ),
    ):
        rows = [row for row in memory if row.get(peak_key) is not None and row.get(median_key) is not None]
        if not rows:
            continue
        medians = [row[median_key] for row in rows]
        top = max(rows, key=lambda row: row[peak_key])
        parts.append(
            "%s median %s to %s, highest peak %s on rank %s (node %s) in %s"
            % (
                label,
                format_bytes(min(medians), "Mi"),
                format_bytes(max(medians), "Mi"),
                format_bytes(top[peak_key], "Mi"),
                top.get("rank"),
                nodes.get(top.get("rank")) or "unknown",
                top.get(phase_key),
            )
        )
    rows = [row for row in memory if row.get("device_headroom_percent") is not None]
    if rows:
        low = min(rows, key=lambda row: row["device_headroom_percent"])
        parts.append(
            "GPU device least headroom %s (%.1f %%) of %s on rank %s (node %s), peak %s in %s"
            % (
                _signed_bytes(low["device_headroom_bytes"]),
                low["device_headroom_percent"],
                format_bytes(low["device_total_bytes"], "Mi"),
                low.get("rank"),
                low.get("node") or nodes.get(low.get("rank")) or "unknown",
                format_bytes(low["device_peak_bytes"], "Mi"),
                low.get("device_peak_phase"),
            )
        )
    return "; ".join(parts) or "no memory figures"


def _log_problems(run):
    """(failures, warnings) for the pods whose log the launcher could not read: unreadable,
    the pod's ranks are judged without it; partial (the pod gone, its early copy kept, or its
    previous container's log lost), a warning."""
    failures, warnings = [], []
    for entry in run.get("unreadable_logs") or []:
        where = "pod %s" % entry.get("pod")
        if entry.get("node"):
            where += " (node %s)" % entry["node"]
        if entry.get("status", "unreadable") == "unreadable":
            failures.append(
                "%s: its log could not be read: %s; its ranks are judged without it"
                % (where, entry.get("reason"))
            )
        else:
            warnings.append("%s: part of its log could not be read: %s" % (where, entry.get("reason")))
    return failures, warnings


def straggler_rows(run, training):
    """training_log_info's stragglers, each placed: ``pod`` (from the name of the log its
    records came from, ``logs/<pod>.log``, on a cluster launcher or one the run record's
    ``pod_nodes`` names), ``node`` (``pod_nodes[pod]``, else the node the rank recorded; on a
    local or SSH launch the rank's host) and ``host``, with a ``statement``."""
    percent = training.get("straggler_percent", DEFAULT_STRAGGLER_PERCENT)
    ranks = {rank.get("rank"): rank for rank in training.get("ranks") or []}
    rows = []
    for straggler in training.get("stragglers") or []:
        rank = ranks.get(straggler.get("rank")) or {}
        pod, node = _place(run, rank, straggler.get("source"))
        row = dict(straggler, pod=pod, node=node, host=rank.get("host"))
        row["statement"] = describe_straggler(straggler, percent, _place_text(pod, node))
        rows.append(row)
    return rows


def _place(run, rank, source):
    """Where a rank ran: ``(pod, node)``. The pod from the name of its log ``source``
    (``logs/<pod>.log``, on a cluster launcher or one the run record's ``pod_nodes`` names);
    the node from ``pod_nodes[pod]``, else the node the rank recorded (on a cluster launcher),
    else on a local or SSH launch the rank's own host."""
    pod_nodes = run.get("pod_nodes") or {}
    launcher = run.get("launcher")
    on_cluster = launcher in CLUSTER_LAUNCHERS
    pod = _pod_of_log(source, on_cluster, pod_nodes)
    if pod is not None and pod_nodes.get(pod):
        node = pod_nodes[pod]
    elif on_cluster:
        node = rank.get("node")  # the node the launcher handed the rank (GPUOPS_NODE_NAME)
    elif launcher is not None:
        node = rank.get("host")  # local and SSH launches: the rank's own host
    else:
        node = rank.get("node") or rank.get("host")
    return pod, node


def _place_text(pod, node):
    """``pod rn-worker-2, node gpu-b``, or ``node gpu-b``."""
    return ", ".join((["pod %s" % pod] if pod else []) + ["node %s" % (node or "unknown")])


def _pod_of_log(source, on_cluster, pod_nodes):
    """The pod whose log is ``source`` (``<pod>.log`` or ``<pod>.previous.log``, as the training_job
    role keeps them), on a cluster launcher or when ``pod_nodes`` names it; else None."""
    name = os.path.basename(str(source or ""))
    for suffix in (".previous.log", ".log"):
        if name.endswith(suffix) and len(name) > len(suffix):
            pod = name[: -len(suffix)]
            return pod if on_cluster or pod in pod_nodes else None
    return None


def _nccl_ranks(nccl):
    """Per rank of the largest communicator: where it ran and whether its init completed."""
    communicators = nccl.get("communicators") or []
    nranks = nccl.get("nranks")
    rows = {}
    for comm in communicators:
        rank = comm.get("rank")
        if comm.get("nranks") != nranks or not isinstance(rank, int) or rank in rows:
            continue
        rows[rank] = {
            "rank": rank,
            "host": comm.get("host"),
            "cuda_dev": comm.get("cuda_dev"),
            "bus_id": comm.get("bus_id"),
            "init_complete": bool(comm.get("init_complete")),
            "init_s": comm.get("init_s"),
        }
    return [rows[rank] for rank in sorted(rows)]


def _last_evaluation(evaluations):
    """The newest COCO-style evaluation the trainer reported, or None."""
    if not evaluations:
        return None
    last = evaluations[-1]
    return {key: last.get(key) for key in ("epoch", "step", "map", "map_50", "map_75", "images")}


def memory_section(run, training, options=None):
    """Each rank's memory, the memory the next run's containers should ask for, and what to
    warn about: a peak close to the cgroup's limit (naming the phase), a GPU whose peak came
    within ``gpu_margin_percent`` of the device's total (naming the rank, its pod and node; a
    failure with ``gpu_margin_fails``), a suspected leak.

    The recommendation is per container (the ranks that share a host or pod): on a cluster
    launcher, from the pod's memory cgroup working set when the ranks report it (every rank,
    its DataLoader workers and /dev/shm counted); otherwise from the ranks' resident sets
    summed, plus /dev/shm for the loader workers the run's settings name (the workers' own
    memory is not in a rank's resident set). Request: the median; limit: the peak plus
    ``buffer_percent``. ``failures`` holds the leaks when ``leak_fails`` is set.
    """
    options = dict(DEFAULT_MEMORY_OPTIONS, **{k: v for k, v in (options or {}).items() if v is not None})
    buffer_percent = options["buffer_percent"]
    margin_percent = float(options["limit_margin_percent"])
    gpu_margin_percent = float(options["gpu_margin_percent"])
    ranks = [_rank_memory(run, rank, buffer_percent) for rank in training.get("ranks") or []]
    ranks = [row for row in ranks if row is not None]
    tolerance = training.get("memory_leak_tolerance_mib", DEFAULT_LEAK_TOLERANCE_MIB)
    leaks = list(training.get("memory_leaks") or [])
    warnings = []
    for row in ranks:
        warning = _limit_warning(row, margin_percent)
        if warning:
            warnings.append(warning)
    near = [row for row in ranks if _within_gpu_margin(row, gpu_margin_percent)]
    gpu_warnings = gpu_margin_warnings(near, gpu_margin_percent)
    if not options["gpu_margin_fails"]:
        warnings.extend(gpu_warnings)
    leak_messages = [describe_memory_leak(leak, tolerance) for leak in leaks]
    if not options["leak_fails"]:
        warnings.extend(
            {
                "what": message,
                "remedy": "look for state kept from one epoch to the next (lists of tensors or losses, "
                "caches, references held by hooks or the loader); rerun with more epochs to confirm",
            }
            for message in leak_messages
        )
    recommendation = _recommendation(run, training, ranks, options)
    share_warning = _node_share(run, recommendation, training, options)
    if share_warning:
        warnings.append(share_warning)
    failures = []
    if options["gpu_margin_fails"]:
        failures.extend(warning["what"] for warning in gpu_warnings)
    if options["leak_fails"]:
        failures.extend(leak_messages)
    return {
        "buffer_percent": buffer_percent,
        "limit_margin_percent": options["limit_margin_percent"],
        "gpu_margin_percent": options["gpu_margin_percent"],
        "gpu_margin_fails": bool(options["gpu_margin_fails"]),
        "leak_tolerance_mib": tolerance,
        "leak_fails": bool(options["leak_fails"]),
        "ranks": ranks,
        "gpu_within_margin": [row["rank"] for row in near],
        "recommendation": recommendation,
        "leaks": leaks,
        "warnings": warnings,
        "failures": failures,
    }


def _rank_memory(run, rank, buffer_percent):
    """A rank's row: its resident set (median, peak and where), cgroup and GPU peaks, the GPU
    device's peak against its total (headroom), and the request and limit its own resident set
    asks for."""
    memory = rank.get("memory") or {}
    quantities = memory.get("quantities") or {}
    if not quantities:
        return None
    rss = quantities.get("host_rss") or {}
    working_set = quantities.get("cgroup_working_set") or {}
    allocated = quantities.get("cuda_allocated") or {}
    reserved = quantities.get("cuda_reserved") or {}
    device = quantities.get("device_used") or {}
    device_total = memory.get("device_total_bytes")
    device_peak = device.get("peak_bytes")
    headroom = headroom_percent = None
    if device_total and device_peak is not None:
        headroom = device_total - device_peak
        headroom_percent = round(100.0 * headroom / device_total, 1)
    last = rank.get("last_memory") or {}
    pod, node = _place(run, rank, last.get("source") or next(iter(rank.get("sources") or ()), None))
    row = {
        "rank": rank.get("rank"),
        "host": rank.get("host"),
        "pod": pod,
        "node": node,
        "samples": memory.get("samples"),
        "rss_median_bytes": rss.get("median_bytes"),
        "rss_peak_bytes": rss.get("peak_bytes"),
        "rss_peak_phase": rss.get("peak_phase"),
        "rss_peak_epoch": rss.get("peak_epoch"),
        "rss_peak_step": rss.get("peak_step"),
        "rss_growth_mib_per_epoch": rss.get("growth_mib_per_epoch"),
        "working_set_median_bytes": working_set.get("median_bytes"),
        "working_set_peak_bytes": working_set.get("peak_bytes"),
        "working_set_peak_phase": working_set.get("peak_phase"),
        "working_set_peak_epoch": working_set.get("peak_epoch"),
        "working_set_peak_step": working_set.get("peak_step"),
        "cgroup_limit_bytes": memory.get("cgroup_limit_bytes"),
        "gpu_allocated_peak_bytes": allocated.get("peak_bytes"),
        "gpu_reserved_peak_bytes": reserved.get("peak_bytes"),
        "gpu_peak_phase": reserved.get("peak_phase") or allocated.get("peak_phase"),
        "device_used_median_bytes": device.get("median_bytes"),
        "device_peak_bytes": device_peak,
        "device_peak_phase": device.get("peak_phase"),
        "device_peak_epoch": device.get("peak_epoch"),
        "device_peak_step": device.get("peak_step"),
        "device_total_bytes": device_total,
        "device_headroom_bytes": headroom,
        "device_headroom_percent": headroom_percent,
        "request": None,
        "limit": None,
    }
    if rss.get("peak_bytes"):
        sizing = size_memory(min(rss["median_bytes"], rss["peak_bytes"]), rss["peak_bytes"], buffer_percent)
        row["request"], row["limit"] = sizing["request"], sizing["limit"]
    row["statement"] = _rank_memory_text(row)
    return row


def _rank_memory_text(row):
    """One line on a rank's memory, for the verdict."""
    parts = []
    if row["rss_peak_bytes"] is not None:
        parts.append(
            "RSS median %s, peak %s in %s (epoch %s, step %s)"
            % (
                format_bytes(row["rss_median_bytes"], "Mi"),
                format_bytes(row["rss_peak_bytes"], "Mi"),
                row["rss_peak_phase"],
                row["rss_peak_epoch"],
                row["rss_peak_step"],
            )
        )
    if row["working_set_peak_bytes"] is not None:
        parts.append(
            "cgroup working set median %s, peak %s in %s%s"
            % (
                format_bytes(row["working_set_median_bytes"], "Mi"),
                format_bytes(row["working_set_peak_bytes"], "Mi"),
                row["working_set_peak_phase"],
                " (limit %s)" % format_bytes(row["cgroup_limit_bytes"], "Mi")
                if row["cgroup_limit_bytes"]
                else "",
            )
        )
    if row["gpu_reserved_peak_bytes"] is not None:
        parts.append(
            "GPU reserved peak %s in %s"
            % (format_bytes(row["gpu_reserved_peak_bytes"], "Mi"), row["gpu_peak_phase"])
        )
    if row["device_headroom_bytes"] is not None:
        parts.append(
            "GPU device peak %s of %s in %s (headroom %s, %.1f %%)"
            % (
                format_bytes(row["device_peak_bytes"], "Mi"),
                format_bytes(row["device_total_bytes"], "Mi"),
                row["device_peak_phase"],
                _signed_bytes(row["device_headroom_bytes"]),
                row["device_headroom_percent"],
            )
        )
    return "rank %s: %s" % (row["rank"], "; ".join(parts) or "no memory figures")


def _signed_bytes(value):
    """Bytes in Mi, a negative figure (a peak past the smallest total a rank reported) with its sign."""
    return format_bytes(value, "Mi") if value >= 0 else "-" + format_bytes(-value, "Mi")


# What to do about a GPU whose peak came close to the device's capacity.
GPU_MARGIN_REMEDY = (
    "a rank at its GPU's capacity fails with CUDA out of memory: lower what that phase holds on the GPU "
    "(the batch size, with gradient accumulation to keep the effective batch; --amp), look for other "
    "processes on that GPU (nvidia-smi on the node) and for what the allocator does not hold (the CUDA "
    "context, NCCL's buffers: NCCL_BUFFSIZE and the channels NCCL opens), or run on GPUs with more memory"
)


def _within_gpu_margin(row, margin_percent):
    """Whether the rank's GPU device peak came within ``margin_percent`` of the device's total."""
    total, peak = row.get("device_total_bytes"), row.get("device_peak_bytes")
    return bool(total) and peak is not None and peak >= total * (1 - margin_percent / 100.0)


def gpu_margin_warnings(rows, margin_percent):
    """The warnings for the memory rows whose GPU device peak came within ``margin_percent`` of
    the device's total: one per rank, naming its pod and node, up to VERDICT_MEMORY_RANKS ranks;
    past that, one across them, by node, naming the rank with the least headroom."""
    if not rows:
        return []
    if len(rows) <= VERDICT_MEMORY_RANKS:
        return [{"what": _gpu_rank_text(row, margin_percent), "remedy": GPU_MARGIN_REMEDY} for row in rows]
    by_node = {}
    for row in rows:
        by_node.setdefault(row.get("node") or "unknown", []).append(row["rank"])
    nodes = "; ".join(
        "node %s: rank%s %s" % (node, "" if len(ranks) == 1 else "s", ranks_text(ranks))
        for node, ranks in by_node.items()
    )
    closest = min(rows, key=lambda row: row["device_headroom_percent"])
    what = "the GPU memory of %d ranks peaked within the %s %% margin of their device's total: %s; " % (
        len(rows),
        _percent_text(margin_percent),
        nodes,
    )
    return [
        {
            "what": what + "the least headroom: " + _gpu_rank_text(closest, margin_percent),
            "remedy": GPU_MARGIN_REMEDY,
        }
    ]


def _gpu_rank_text(row, margin_percent):
    """``rank 3 (pod gm-worker-1, node gpu-b): GPU memory peaked at ...``"""
    place = _place_text(row.get("pod"), row.get("node"))
    return "rank %s (%s): %s" % (row["rank"], place, _gpu_peak_text(row, margin_percent))


def _gpu_peak_text(row, margin_percent):
    """``GPU memory peaked at 78Gi of the device's 80Gi (97.5 %) in phase train (epoch 1, step
    6): headroom 2Gi (2.5 %), within the 5 % margin; PyTorch's allocator reserved at most 55Gi
    of it (...)``"""
    text = (
        "GPU memory peaked at %s of the device's %s (%.1f %%) in phase %s (epoch %s, step %s): "
        "headroom %s (%.1f %%), within the %s %% margin"
        % (
            format_bytes(row["device_peak_bytes"], "Mi"),
            format_bytes(row["device_total_bytes"], "Mi"),
            100.0 * row["device_peak_bytes"] / row["device_total_bytes"],
            row.get("device_peak_phase"),
            row.get("device_peak_epoch"),
            row.get("device_peak_step"),
            _signed_bytes(row["device_headroom_bytes"]),
            row["device_headroom_percent"],
            _percent_text(margin_percent),
        )
    )
    if row.get("gpu_reserved_peak_bytes") is not None:
        text += (
            "; PyTorch's allocator reserved at most %s of it (the rest: the CUDA context, NCCL's "
            "buffers, other processes on the GPU)" % format_bytes(row["gpu_reserved_peak_bytes"], "Mi")
        )
    return text


def _limit_warning(row, margin_percent):
    """A warning when the rank's peak came within ``margin_percent`` of its cgroup limit."""
    limit = row.get("cgroup_limit_bytes")
    if row.get("working_set_peak_bytes") is not None:
        peak, what, where = (
            row["working_set_peak_bytes"],
            "the memory cgroup's working set",
            "working_set_peak",
        )
    else:
        peak, what, where = row.get("rss_peak_bytes"), "its resident set", "rss_peak"
    if not limit or peak is None or peak < limit * (1 - margin_percent / 100.0):
        return None
    return {
        "what": "rank %s: memory peaked at %s (%s) in phase %s (epoch %s, step %s), %.1f %% of its memory "
        "limit %s, within the %s %% margin"
        % (
            row["rank"],
            format_bytes(peak, "Mi"),
            what,
            row.get(where + "_phase"),
            row.get(where + "_epoch"),
            row.get(where + "_step"),
            100.0 * peak / limit,
            format_bytes(limit, "Mi"),
            _percent_text(margin_percent),
        ),
        "remedy": "raise the container's memory limit to the recommendation below, or lower what that "
        "phase holds (batch size, DataLoader workers and prefetch, checkpoint size)",
    }


def _recommendation(run, training, ranks, options):
    """The memory request and limit for one container of the next run (the busiest one)."""
    if not ranks:
        return None
    by_host = {}
    for row in ranks:
        by_host.setdefault(row.get("host"), []).append(row)
    on_cluster = run.get("launcher") in CLUSTER_LAUNCHERS
    container_cgroup = on_cluster and all(row["working_set_peak_bytes"] is not None for row in ranks)
    best = None
    for host, rows in by_host.items():
        if container_cgroup:
            # Every rank of the pod samples the same cgroup: its largest figures are the pod's.
            median = max(row["working_set_median_bytes"] for row in rows)
            peak = max(row["working_set_peak_bytes"] for row in rows)
        else:
            if any(row["rss_peak_bytes"] is None for row in rows):
                continue
            median = sum(row["rss_median_bytes"] for row in rows)
            peak = sum(row["rss_peak_bytes"] for row in rows)
        if best is None or peak > best[2]:
            best = (host, rows, peak, median)
    if best is None or best[2] <= 0:
        return None  # nothing measured to size from (a cgroup whose working set read 0)
    host, rows, peak, median = best
    shm, shm_note = (
        (None, None) if container_cgroup else _loader_shm(options.get("loader"), len(rows), training)
    )
    sizing = size_memory(min(median, peak), peak + (shm or 0), options["buffer_percent"])
    if container_cgroup:
        basis = "cgroup_working_set"
        how = "the pod's memory cgroup working set (its ranks, their DataLoader workers and /dev/shm)"
    else:
        basis = "host_rss"
        how = "the resident sets of its %d rank%s summed%s" % (
            len(rows),
            "" if len(rows) == 1 else "s",
            " plus /dev/shm (%s)" % shm_note if shm_note else "",
        )
    statement = (
        "Memory per container (%s, %d rank%s): request %s (the median), limit %s (peak %s + %s %%), from %s."
        % (
            host,
            len(rows),
            "" if len(rows) == 1 else "s",
            sizing["request"],
            sizing["limit"],
            format_bytes(peak + (shm or 0), "Mi"),
            _percent_text(options["buffer_percent"]),
            how,
        )
    )
    return {
        "basis": basis,
        "host": host,
        "ranks": [row["rank"] for row in rows],
        "median_bytes": int(median),
        "peak_bytes": int(peak),
        "shm_bytes": int(shm) if shm is not None else None,
        "request": sizing["request"],
        "limit": sizing["limit"],
        "qos": sizing["qos"],
        "resources": sizing["resources"],
        "statement": statement,
    }


def _pod_gpus(run, recommendation, training):
    """The GPUs of the recommended pod: what a cluster launcher's pods requested
    (``gpus_per_pod`` in its run record), else one per rank of it on a CUDA run, none on a CPU run."""
    requested = run.get("gpus_per_pod")
    if isinstance(requested, str) and requested.strip().isdigit():
        requested = int(requested)
    if isinstance(requested, int) and not isinstance(requested, bool) and requested >= 0:
        return requested
    return len(recommendation["ranks"]) if str(training.get("device") or "").startswith("cuda") else 0


def _node_share(run, recommendation, training, options):
    """Add to the recommendation the pod's share of its node's RAM (its recommended limit) next
    to its share of the node's GPUs, when the node's allocatable is known; return a warning when
    the RAM share is the larger (the pod would strand GPUs) or the pod does not fit the node."""
    allocatable = options.get("node_allocatable")
    if recommendation is None or not allocatable:
        return None
    nodes = {rank.get("rank"): rank.get("node") for rank in training.get("ranks") or []}
    node = next((nodes.get(rank) for rank in recommendation["ranks"] if nodes.get(rank)), None)
    if "memory" not in allocatable:  # per node name
        known = list(allocatable.values())
        if node in allocatable:
            allocatable = allocatable[node]
        elif len(allocatable) == 1:
            node, allocatable = next(iter(allocatable.items()))
        elif all(resources == known[0] for resources in known):
            allocatable = known[0]  # the run's nodes are alike: whichever the pod ran on
        else:
            recommendation["node"], recommendation["node_share"] = node, None
            recommendation["statement"] += " The allocatable resources of its node (%s) are not known." % node
            return None
    gpus = _pod_gpus(run, recommendation, training)
    gpu_resource = options.get("gpu_resource") or DEFAULT_GPU_RESOURCE
    recommendation["node"] = node
    try:
        share = node_share(recommendation["limit"], gpus, allocatable, gpu_resource)
    except SizingError as error:
        recommendation["node_share"] = None
        recommendation["statement"] += " It does not fit its node%s: %s." % (
            " " + node if node else "",
            error,
        )
        return {
            "what": "memory: the recommended pod does not fit its node%s: %s"
            % (" " + node if node else "", error),
            "remedy": "run fewer ranks per pod or on nodes with more memory and GPUs",
        }
    recommendation["node_share"] = share
    recommendation["statement"] += " " + share["statement"]
    if not share["strands_gpus"]:
        return None
    return {
        "what": "memory: the recommended pod (%s, %s GPU%s) takes %.1f %% of the memory of %s but %.1f %% of "
        "its GPUs: %s such pod%s fill its memory and leave %s of its %s GPUs stranded"
        % (
            share["pod_memory"],
            share["pod_gpus"],
            "" if share["pod_gpus"] == 1 else "s",
            100 * share["memory_share"],
            "node " + node if node else "the node",
            100 * share["gpu_share"],
            share["pods_per_node"],
            "" if share["pods_per_node"] == 1 else "s",
            share["stranded_gpus"],
            share["node_gpus"],
        ),
        "remedy": "keep the pod's memory at or below %s (the node's RAM per GPU times its GPUs): lower what "
        "the peak phase holds (batch size, DataLoader workers and prefetch, checkpoint size), or give the "
        "pod more GPUs" % share["fair_memory"],
    }


def _loader_shm(loader, ranks, training):
    """/dev/shm for the loader workers of ``ranks`` ranks (and NCCL's buffers on an NCCL run),
    with a note saying how it was sized; (None, note) when nothing is to be added."""
    if not loader:
        return None, None
    nccl = training.get("backend") == "nccl"
    try:
        total = shm_bytes(
            loader.get("workers"),
            loader.get("batch_size"),
            loader.get("sample_bytes"),
            gpus=ranks,
            nccl_per_gpu=DEFAULT_NCCL_PER_GPU if nccl else 0,
        )
    except SizingError as error:
        if loader.get("workers") in (0, "0") and not nccl:
            return None, "none: 0 loader workers, no NCCL"
        return None, "not sized: %s" % error
    return total, "%s for %s loader workers a rank, batches of %s%s" % (
        format_bytes(total, "Mi"),
        loader.get("workers"),
        loader.get("batch_size"),
        ", NCCL's buffers" if nccl else "",
    )


def _percent_text(value):
    return "%g" % float(value)


# -- sizing the next run from an earlier run's summary (train.yml -e training_job_memory_from_run=ID) --

FROM_RUN = "training_job_memory_from_run"


class MemoryFromRunError(ValueError):
    """An earlier run's summary cannot size this run; the message names training_job_memory_from_run."""


def memory_from_run(summary, run_id, memory=None, shm_size=None, default_memory=None, default_shm_size=""):
    """The pod memory (and /dev/shm size) an earlier run's summary recommends, for the
    training_job role's ``training_job_memory`` and ``training_job_shm_size``.

    ``summary`` is the run's summary.json (its text or the parsed dict). The pods request and
    limit the recommended limit (the run's peak plus its buffer: the role's pods are
    Guaranteed); the /dev/shm size is the recommendation's ``shm_bytes`` rounded up to whole Gi,
    when it has one. ``memory`` and ``shm_size`` are the values set now: one other than its
    default (``default_memory``, ``default_shm_size``) that differs from the recommendation is a
    conflict. Returns ``memory``, ``shm_size`` (None: leave it), ``request``, ``limit``,
    ``shm_bytes``, ``basis``, ``host``, ``ranks``, ``recommendation`` (its statement) and
    ``lines`` (what to show before the launch). Raises MemoryFromRunError.
    """
    where = "run %s's summary.json" % run_id
    if isinstance(summary, (str, bytes)):
        try:
            summary = json.loads(summary)
        except ValueError as error:
            raise MemoryFromRunError(
                "%s: %s is not JSON (%s); expected the summary training_verify writes"
                % (FROM_RUN, where, error)
            ) from error
    if not isinstance(summary, dict) or summary.get("schema") != SUMMARY_SCHEMA:
        raise MemoryFromRunError(
            "%s: %s is not a run summary (schema %s); expected the summary.json training_verify writes"
            % (FROM_RUN, where, SUMMARY_SCHEMA)
        )
    recommendation = (summary.get("memory") or {}).get("recommendation")
    if not isinstance(recommendation, dict) or not recommendation.get("limit"):
        raise MemoryFromRunError(
            "%s: %s has no memory recommendation (memory.recommendation is %s): its ranks recorded no "
            "memory (a trainer from before memory records, or ranks that never started); expected a run "
            "whose summary recommends a memory request and limit"
            % (FROM_RUN, where, json.dumps(recommendation))
        )
    limit = str(recommendation["limit"])
    try:
        limit_bytes = parse_quantity(limit, "memory.recommendation.limit")
    except QuantityError as error:
        raise MemoryFromRunError(
            "%s: %s recommends a limit that is not a memory quantity: %s" % (FROM_RUN, where, error)
        ) from error
    shm = recommendation.get("shm_bytes")
    shm_text = (
        format_bytes(shm, "Gi") if isinstance(shm, int) and not isinstance(shm, bool) and shm > 0 else None
    )
    conflicts = []
    if _is_set(memory, default_memory) and _quantity(memory, "training_job_memory") != limit_bytes:
        conflicts.append(
            "training_job_memory is %s, the run recommends %s (its limit: peak plus buffer)" % (memory, limit)
        )
    if (
        shm_text is not None
        and _is_set(shm_size, default_shm_size)
        and _quantity(shm_size, "training_job_shm_size") != parse_quantity(shm_text)
    ):
        conflicts.append("training_job_shm_size is %s, the run recommends %s" % (shm_size, shm_text))
    if conflicts:
        raise MemoryFromRunError(
            "%s=%s conflicts with values set explicitly: %s; expected either the recommendation or an "
            "explicit value, not both: drop training_job_memory_from_run, or leave those variables at "
            "their defaults (training_job_memory %s, training_job_shm_size %s)"
            % (FROM_RUN, run_id, "; ".join(conflicts), default_memory, json.dumps(default_shm_size))
        )
    ranks = recommendation.get("ranks") or []
    lines = [
        "training_job_memory: %s, requested and limited alike (Guaranteed QoS): the limit run %s recommends "
        "(peak %s plus its buffer; its request, the median, was %s)"
        % (
            limit,
            run_id,
            format_bytes(recommendation["peak_bytes"], "Mi")
            if isinstance(recommendation.get("peak_bytes"), int)
            else "unknown",
            recommendation.get("request"),
        ),
        "training_job_shm_size: %s"
        % (
            "%s, the /dev/shm size in the recommendation of run %s" % (shm_text, run_id)
            if shm_text
            else "left as it is (the recommendation of run %s carries no /dev/shm size)" % run_id
        ),
        "measured on %s with %d rank%s per container, from %s"
        % (
            recommendation.get("host"),
            len(ranks),
            "" if len(ranks) == 1 else "s",
            "the pod's memory cgroup working set"
            if recommendation.get("basis") == "cgroup_working_set"
            else "the ranks' resident sets",
        ),
    ]
    return {
        "run_id": run_id,
        "memory": limit,
        "shm_size": shm_text,
        "request": recommendation.get("request"),
        "limit": limit,
        "shm_bytes": shm if shm_text else None,
        "basis": recommendation.get("basis"),
        "host": recommendation.get("host"),
        "ranks": ranks,
        "recommendation": recommendation.get("statement"),
        "lines": lines,
    }


def _is_set(value, default):
    """Whether a value was set to something other than its default (and not left empty)."""
    if value is None or str(value).strip() == "":
        return False
    if default is None or str(default).strip() == "":
        return True
    try:
        return parse_quantity(value) != parse_quantity(default)
    except QuantityError:
        return str(value) != str(default)


def _quantity(value, what="quantity"):
    try:
        return parse_quantity(value, what)
    except QuantityError as error:
        raise MemoryFromRunError("%s: %s" % (FROM_RUN, error)) from error

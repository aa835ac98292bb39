# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a launcher's record and the log modules' results together into one run summary."""

from __future__ import annotations

SUMMARY_SCHEMA = "gpuops.run-summary/v1"


def nccl_statement(nccl, backend):
    """One sentence on NCCL that never reports success for a run that did not use it."""
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


def build_run_summary(run, training, nccl):
    """Return the summary dict written to summary.json; ``verdict`` is passed or failed."""
    run = run or {}
    training = training or {}
    nccl = nccl or {}
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
        }
        for rank in training.get("ranks") or []
    ]
    checkpoints = training.get("checkpoints") or []
    backend = training.get("backend")
    return {
        "schema": SUMMARY_SCHEMA,
        "verdict": "failed" if failures else "passed",
        "failures": failures,
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
        "nccl": {
            "used": bool(nccl.get("nccl_used")),
            "statement": nccl_statement(nccl, backend),
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
    }


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

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's ranks seen at fleet size: what differs, by node, and the rest aggregated by node.

A verdict on 1024 ranks cannot be a table of 1024 rows: it leads with the ranks that differ
(did not finish, never reported, NCCL's init incomplete, slower than their peers), grouped by
node and what is wrong, and gives one row per node for the rest. The per-rank table stays in
summary.json and goes to ``ranks.csv``.
"""

from __future__ import annotations

import csv
import io

from ansible_collections.gpuops.training.plugins.module_utils.ranks_text import ranks_text

# Above this many ranks the report gives a row per node, and the ranks are in ranks.csv.
RANK_TABLE_LIMIT = 64
# Lines of what differs the verdict prints before it says how many more there are.
VERDICT_DIFFER_LINES = 10
UNKNOWN_NODE = "(node unknown)"


def rank_rows(summary):
    """One row per rank: training progress joined with where NCCL put the rank."""
    nccl = summary.get("nccl") or {}
    by_rank = {row["rank"]: row for row in nccl.get("ranks") or []}
    transport = nccl.get("transport")
    devices = ", ".join(nccl.get("ib_devices") or nccl.get("socket_ifaces") or []) or None
    ranks = sorted({row.get("rank") for row in summary.get("ranks") or []} | set(by_rank), key=_rank_key)
    training = {row.get("rank"): row for row in summary.get("ranks") or []}
    rows = []
    for rank in ranks:
        train, comm = training.get(rank) or {}, by_rank.get(rank) or {}
        gpu = None
        if comm.get("cuda_dev") is not None:
            gpu = "cuda:%s" % comm["cuda_dev"] + (" (%s)" % comm["bus_id"] if comm.get("bus_id") else "")
        rows.append(
            {
                "rank": rank,
                "host": train.get("host") or comm.get("host"),
                "node": train.get("node"),
                "status": train.get("status"),
                "epochs": train.get("epochs_completed"),
                "last_loss": train.get("last_epoch_loss"),
                "images_per_s": train.get("images_per_s"),
                "compute_images_per_s": train.get("compute_images_per_s"),
                "collective_s": (train.get("timing") or {}).get("collective_s"),
                "gpu": gpu,
                "transport": transport if comm else None,
                "devices": devices if comm else None,
                "gdr": nccl.get("gdr") if comm else None,
                "init": ("complete" if comm.get("init_complete") else "incomplete") if comm else None,
                "init_s": comm.get("init_s"),
                "error": train.get("error"),
            }
        )
    return rows


def _rank_key(rank):
    return (0, rank) if isinstance(rank, int) else (1, str(rank))


def what_differs(row, nccl_used=True):
    """What is wrong with a rank, in words; empty when nothing is."""
    problems = []
    status = row.get("status")
    if status is None:
        problems.append("no training records")
    elif status == "error":
        problems.append(
            "failed" + (": %s" % str(row["error"]).splitlines()[0][:160] if row.get("error") else "")
        )
    elif status == "incomplete":
        problems.append("did not finish" if row.get("epochs") else "did not finish an epoch")
    elif status != "ok":
        problems.append("status %s" % status)
    if nccl_used and row.get("init") == "incomplete":
        problems.append("NCCL init incomplete")
    if row.get("straggler"):
        problems.append(row["straggler"])
    return ", ".join(problems)


def differs(summary, stragglers=None):
    """The ranks that differ, grouped by node and what is wrong: ``{node, hosts, ranks
    (text), rank_count, what}``, the largest groups of the most nodes last. ``stragglers``
    maps a rank to how it is slower than its peers."""
    nccl_used = bool((summary.get("nccl") or {}).get("used"))
    groups = {}
    rows = rank_rows(summary)
    known = {row["rank"] for row in rows}
    for row in rows:
        if stragglers and row["rank"] in stragglers:
            row = dict(row, straggler=stragglers[row["rank"]])
        what = what_differs(row, nccl_used)
        if not what:
            continue
        group = groups.setdefault((row.get("node") or UNKNOWN_NODE, what), {"ranks": [], "hosts": set()})
        group["ranks"].append(row["rank"])
        if row.get("host"):
            group["hosts"].add(row["host"])
    world = summary.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool):
        missing = [rank for rank in range(min(world, 1 << 20)) if rank not in known]
        if missing:
            groups[(UNKNOWN_NODE, "never reported")] = {"ranks": missing, "hosts": set()}
    result = [
        {
            "node": node,
            "hosts": sorted(group["hosts"]),
            "ranks": ranks_text(group["ranks"]),
            "rank_count": len(group["ranks"]),
            "what": what,
        }
        for (node, what), group in groups.items()
    ]
    return sorted(result, key=lambda group: (group["rank_count"], group["node"]))


def differ_line(group):
    hosts = ", ".join(group["hosts"][:2]) + (" ..." if len(group["hosts"]) > 2 else "")
    where = group["node"] + (" (%s)" % hosts if hosts else "")
    return "%s: %s %s: %s" % (
        where,
        "rank" if group["rank_count"] == 1 else "ranks",
        group["ranks"],
        group["what"],
    )


def node_rows(summary, memory_rows=()):
    """One row per node: its pods (hosts), its ranks, how many finished, reached NCCL's Init
    COMPLETE, their images/s summed and the highest resident-set peak."""
    peaks = {}
    for row in memory_rows:
        if row.get("rss_peak_bytes") is not None:
            peaks[row.get("rank")] = row["rss_peak_bytes"]
    nodes = {}
    for row in rank_rows(summary):
        node = nodes.setdefault(row.get("node") or UNKNOWN_NODE, {"ranks": [], "hosts": set(), "rows": []})
        node["ranks"].append(row["rank"])
        node["rows"].append(row)
        if row.get("host"):
            node["hosts"].add(row["host"])
    result = []
    for name, node in nodes.items():
        rows = node["rows"]
        ips = [row["images_per_s"] for row in rows if isinstance(row.get("images_per_s"), (int, float))]
        node_peaks = [peaks[rank] for rank in node["ranks"] if rank in peaks]
        result.append(
            {
                "node": name,
                "hosts": ", ".join(sorted(node["hosts"])),
                "ranks": ranks_text(node["ranks"]),
                "rank_count": len(rows),
                "finished": sum(row.get("status") == "ok" for row in rows),
                "init_complete": sum(row.get("init") == "complete" for row in rows),
                "images_per_s": round(sum(ips), 2) if ips else None,
                "rss_peak_bytes": max(node_peaks) if node_peaks else None,
            }
        )
    return sorted(result, key=lambda row: (_first_rank(row), row["node"]))


def _first_rank(row):
    first = row["ranks"].split(",", 1)[0].split("-", 1)[0].strip()
    return int(first) if first.isdigit() else float("inf")


CSV_COLUMNS = (
    "rank", "host", "node", "status", "epochs", "last_loss", "images_per_s", "compute_images_per_s",
    "collective_s", "gpu", "transport", "devices",
    "gdr", "init", "init_s", "rss_median_bytes", "rss_peak_bytes", "working_set_peak_bytes",
    "gpu_reserved_peak_bytes", "device_peak_bytes", "device_total_bytes", "device_headroom_bytes",
    "device_headroom_percent", "error",
)  # fmt: skip


def ranks_csv(summary):
    """Every rank as a CSV row (ranks.csv): the report's rank columns and its memory."""
    memory = {row.get("rank"): row for row in (summary.get("memory") or {}).get("ranks") or []}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rank_rows(summary):
        merged = dict(memory.get(row["rank"]) or {}, **row)
        writer.writerow(["" if merged.get(column) is None else merged.get(column) for column in CSV_COLUMNS])
    return out.getvalue()

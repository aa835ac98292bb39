# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render a run summary (``gpuops.run-summary/v1``) as a Markdown and an HTML report.

Pure text: the plots are drawn by ``report_plots`` and only referenced here by file name.
Both documents carry the same sections: the verdict and what went wrong, the run at a
glance, stragglers with their pod and node, NCCL, warnings with their remedies, per-rank
tables, per-epoch numbers, the curves and links to every log.
"""

from __future__ import annotations

import html
import math
import os

from ansible_collections.gpuops.training.plugins.module_utils.quantities import format_bytes
from ansible_collections.gpuops.training.plugins.module_utils.run_fleet import (
    RANK_TABLE_LIMIT,
    node_rows,
    rank_rows,
)

LOSS_PLOT = "loss.png"
THROUGHPUT_PLOT = "throughput.png"


def _number(value, digits=3):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return ("%%.%df" % digits) % value if isinstance(value, float) else str(value)


def _text(value):
    return "-" if value is None or value == "" or value == [] else str(value)


def _yes_no(value):
    return "-" if value is None else ("yes" if value else "no")


def _loss_text(loss):
    text = "%s → %s" % (_number(loss.get("first")), _number(loss.get("last")))
    if isinstance(loss.get("change_pct"), (int, float)):
        text += " (%+.1f %%)" % loss["change_pct"]
    if loss.get("measure"):
        text += ", epoch %s" % loss["measure"].replace("_", " ")
    return text


def overview_rows(summary):
    """(label, value) pairs of the at-a-glance table."""
    evaluation = summary.get("evaluation")
    checkpoints = summary.get("checkpoints") or {}
    throughput = summary.get("throughput") or {}
    rows = [
        ("Verdict", (summary.get("verdict") or "unknown").upper()),
        ("Launcher", "%s on %s" % (_text(summary.get("launcher")), _text(summary.get("host")))),
        (
            "Model",
            "%s (%s backend, %s)" % tuple(_text(summary.get(k)) for k in ("model", "backend", "device")),
        ),
        (
            "Ranks",
            "%d of %s reported"
            % (len(summary.get("ranks_reporting") or []), _text(summary.get("world_size"))),
        ),
        ("Duration", "%s s" % _number(summary.get("duration_s"), 1)),
        ("Loss", _loss_text(summary.get("loss") or {})),
        (
            "Throughput (last epoch)",
            "%s images/s over %s ranks"
            % (_number(throughput.get("images_per_s"), 2), _text(throughput.get("ranks_counted"))),
        ),
        (
            "Evaluation",
            "mAP %s, AP50 %s on %s images (epoch %s)"
            % (
                _number(evaluation.get("map")),
                _number(evaluation.get("map_50")),
                _text(evaluation.get("images")),
                _text(evaluation.get("epoch")),
            )
            if evaluation
            else "none reported",
        ),
        (
            "Checkpoints",
            "%d%s"
            % (
                checkpoints.get("count") or 0,
                ", last %s" % checkpoints["last"].get("path") if checkpoints.get("last") else "",
            ),
        ),  # fmt: skip
        ("Restarts", _text(summary.get("restarts", 0))),
        ("Stragglers", _stragglers_text(summary)),
        ("Locked memory", _memlock_text(summary.get("memlock") or {})),
        ("Memory, next run", _recommendation_text((summary.get("memory") or {}).get("recommendation"))),
        ("NCCL", _text((summary.get("nccl") or {}).get("statement"))),
    ]
    return rows


def _stragglers_text(summary):
    """One line: the stragglers with pod and node, none, or why none could be named."""
    stragglers = summary.get("stragglers") or []
    percent = summary.get("straggler_percent")
    if stragglers:
        return "; ".join(
            "rank %s (%s%s), %s %% below the median"
            % (
                row.get("rank"),
                "pod %s, " % row["pod"] if row.get("pod") else "",
                "node %s" % _text(row.get("node")),
                _number(row.get("percent_below"), 1),
            )
            for row in stragglers
        )
    if not percent:
        return "not checked"
    timed = [row for row in summary.get("ranks") or [] if row.get("compute_images_per_s")]
    if len(timed) < 2:
        return "not measured (fewer than 2 ranks recorded step timing)"
    return "none: every rank's compute throughput is within %s %% of the median" % _number(percent, 0)


def _memlock_text(memlock):
    """The ranks' RLIMIT_MEMLOCK: what RDMA memory registration gets."""
    if not memlock.get("ranks_reporting"):
        return "not reported"
    if memlock.get("unlimited"):
        return "unlimited on every rank"
    limited = memlock.get("limited_ranks") or []
    smallest = memlock.get("min_bytes")
    return "limited to as little as %s on ranks %s (RDMA needs unlimited)" % (
        format_bytes(smallest, "Ki") if isinstance(smallest, int) and smallest >= 0 else "-",
        ", ".join(str(rank) for rank in limited[:20]) + (" ..." if len(limited) > 20 else ""),
    )


def _recommendation_text(recommendation):
    if not recommendation:
        return "no memory samples in the metrics"
    return recommendation.get("statement") or "request %s, limit %s" % (
        recommendation.get("request"),
        recommendation.get("limit"),
    )


def _mib(value):
    return format_bytes(value, "Mi") if isinstance(value, int) and not isinstance(value, bool) else "-"


def _where(row, prefix):
    phase = row.get(prefix + "_phase")
    if not phase:
        return "-"
    return "%s (epoch %s, step %s)" % (
        phase,
        _text(row.get(prefix + "_epoch")),
        _text(row.get(prefix + "_step")),
    )


MEMORY_COLUMNS = ("rank", "host", "RSS median", "RSS peak", "peak phase", "cgroup working set peak",
                  "cgroup limit", "GPU reserved peak", "request", "limit")  # fmt: skip


def memory_rows(summary):
    """One row of cells per rank: its resident set (median, peak, where the peak was), the
    cgroup's and the GPU's peaks, and the request and limit its own resident set asks for."""
    rows = []
    for row in (summary.get("memory") or {}).get("ranks") or []:
        rows.append(
            [
                _text(row.get("rank")),
                _text(row.get("host")),
                _mib(row.get("rss_median_bytes")),
                _mib(row.get("rss_peak_bytes")),
                _where(row, "rss_peak"),
                _mib(row.get("working_set_peak_bytes")),
                _mib(row.get("cgroup_limit_bytes")),
                _mib(row.get("gpu_reserved_peak_bytes")),
                _text(row.get("request")),
                _text(row.get("limit")),
            ]
        )
    return rows


GPU_MEMORY_COLUMNS = ("rank", "host", "node", "device peak", "peak phase", "device total", "headroom",
                      "headroom %", "allocator reserved peak")  # fmt: skip


def gpu_memory_rows(summary):
    """One row of cells per rank whose samples carry the GPU device's figures (a CUDA run): the
    device's peak as the driver sees it (where it was), its total, the headroom between them
    (a rank within the margin marked), and PyTorch's allocator's reserved peak beside it."""
    memory = summary.get("memory") or {}
    near = set(memory.get("gpu_within_margin") or ())
    rows = []
    for row in memory.get("ranks") or []:
        if row.get("device_total_bytes") is None or row.get("device_peak_bytes") is None:
            continue
        headroom = row.get("device_headroom_bytes")
        rows.append(
            [
                _text(row.get("rank")),
                _text(row.get("host")),
                _text(row.get("node")),
                _mib(row.get("device_peak_bytes")),
                _where(row, "device_peak"),
                _mib(row.get("device_total_bytes")),
                "-" + _mib(-headroom) if isinstance(headroom, int) and headroom < 0 else _mib(headroom),
                "%s %%%s"
                % (
                    _number(row.get("device_headroom_percent"), 1),
                    " (within the margin)" if row.get("rank") in near else "",
                ),
                _mib(row.get("gpu_reserved_peak_bytes")),
            ]
        )
    return rows


def _gpu_memory_note(summary):
    memory = summary.get("memory") or {}
    return (
        "The device as the driver sees it: PyTorch's allocator, the CUDA context, NCCL's buffers and any "
        "other process on the GPU. A peak within %s %% of the device's total is %s."
        % (
            "%g" % memory["gpu_margin_percent"] if _number(memory.get("gpu_margin_percent")) != "-" else "-",
            "a failure" if memory.get("gpu_margin_fails") else "a warning",
        )
    )


def warnings_with_remedies(summary):
    """Each NCCL problem the logs show, each memory warning and each GPU below its own
    history, with what to do about it."""
    memory = [
        {"what": warning.get("what"), "remedy": warning.get("remedy") or "", "lines": []}
        for warning in (summary.get("memory") or {}).get("warnings") or []
    ]
    history = [
        {"what": row.get("reason"), "remedy": row.get("remedy") or "", "lines": []}
        for row in (summary.get("history") or {}).get("flagged") or []
    ]
    nccl = [
        {
            "what": "%s (%s time%s)"
            % (error.get("message"), error.get("count") or 1, "" if (error.get("count") or 1) == 1 else "s"),
            "remedy": error.get("remedy") or "",
            "lines": list(error.get("lines") or []),
        }  # fmt: skip
        for error in (summary.get("nccl") or {}).get("errors") or []
    ]
    return memory + history + nccl


STRAGGLER_COLUMNS = ("rank", "pod", "node", "compute images/s", "median of all ranks", "below median", "log")


def straggler_rows(summary):
    """One row of cells per straggler, slowest first."""
    return [
        [
            _text(row.get("rank")),
            _text(row.get("pod")),
            _text(row.get("node")),
            _number(row.get("compute_images_per_s"), 2),
            _number(row.get("peer_median"), 2),
            "%s %%" % _number(row.get("percent_below"), 1),
            _text(row.get("source")),
        ]
        for row in summary.get("stragglers") or []
    ]


def _straggler_note(summary):
    """What a straggler means for the verdict, and the remedy."""
    return "%s. Remedy: %s." % (
        "Each fails the run" if summary.get("stragglers_fail") else "A warning: the run can still pass",
        summary.get("straggler_remedy") or "check the straggler's node",
    )


RANK_COLUMNS = (
    ("rank", "rank", None),
    ("host", "host", None),
    ("node", "node", None),
    ("status", "status", None),
    ("epochs", "epochs", None),
    ("last epoch loss", "last_loss", 4),
    ("images/s", "images_per_s", 2),
    ("compute images/s", "compute_images_per_s", 2),
    ("collective s", "collective_s", 3),
    ("GPU", "gpu", None),
    ("transport", "transport", None),
    ("NET devices", "devices", None),
    ("GDR", "gdr", "yes/no"),
    ("NCCL init", "init", None),
    ("init s", "init_s", 2),
)


NODE_COLUMNS = (
    ("node", "node", None),
    ("pods", "hosts", None),
    ("ranks", "ranks", None),
    ("finished", "finished", None),
    ("NCCL init complete", "init_complete", None),
    ("images/s (its ranks)", "images_per_s", 2),
    ("highest RSS peak", "rss_peak", None),
)
DIFFER_COLUMNS = (
    ("node", "node", None),
    ("pods", "pods", None),
    ("ranks", "ranks", None),
    ("what", "what", None),
)


def fleet_view(summary):
    """The tables of the ranks: ``("ranks", RANK_COLUMNS, rows)`` up to RANK_TABLE_LIMIT ranks,
    else ``("nodes", NODE_COLUMNS, rows)`` (every rank is then in ranks.csv)."""
    ranks = rank_rows(summary)
    if len(ranks) <= RANK_TABLE_LIMIT:
        return "ranks", RANK_COLUMNS, ranks
    rows = node_rows(summary, (summary.get("memory") or {}).get("ranks") or ())
    for row in rows:
        row["rss_peak"] = _mib(row["rss_peak_bytes"])
        row["finished"] = "%d/%d" % (row["finished"], row["rank_count"])
        row["init_complete"] = "%d/%d" % (row["init_complete"], row["rank_count"])
    return "nodes", NODE_COLUMNS, rows


def differ_rows(summary):
    return [dict(group, pods=", ".join(group["hosts"]) or "-") for group in summary.get("differs") or []]


def _cell(row, key, digits):
    value = row.get(key)
    if digits == "yes/no":
        return _yes_no(value)
    if isinstance(digits, int):
        return _number(value, digits)
    return _text(value)


def _log_link(path, base_dir):
    try:
        return os.path.relpath(path, base_dir) if base_dir and os.path.isabs(path) else path
    except ValueError:  # another drive on Windows-like paths
        return path


def render_markdown(summary, base_dir=None, plots=(LOSS_PLOT, THROUGHPUT_PLOT)):
    out = [
        "# Training run %s: %s"
        % (_text(summary.get("run_id")), (summary.get("verdict") or "unknown").upper()),
        "",
    ]
    out += ["| | |", "|---|---|"]
    out += ["| %s | %s |" % (label, _md_escape(value)) for label, value in overview_rows(summary)]
    out.append("")
    if summary.get("failures"):
        out += ["## What went wrong", ""]
        for failure in summary["failures"]:
            out += ["```", str(failure), "```", ""]
    stragglers = straggler_rows(summary)
    if stragglers:
        out += ["## Stragglers", ""]
        out.append("| " + " | ".join(STRAGGLER_COLUMNS) + " |")
        out.append(
            "|"
            + "|".join("---" if title in ("pod", "node", "log") else "---:" for title in STRAGGLER_COLUMNS)
            + "|"
        )
        out += ["| " + " | ".join(_md_escape(cell) for cell in row) + " |" for row in stragglers]
        out += ["", _md_escape(_straggler_note(summary)), ""]
    warnings = warnings_with_remedies(summary)
    if warnings:
        out += ["## Warnings and remedies", ""]
        for warning in warnings:
            out.append("- **%s**  " % _md_escape(warning["what"]))
            out.append("  Remedy: %s" % _md_escape(warning["remedy"]))
            for line in warning["lines"]:
                out.append("  - `%s`" % line.replace("`", "'"))
        out.append("")
    differ = differ_rows(summary)
    if differ:
        out += ["## What differs", "", "The ranks that did not do what their peers did, by node.", ""]
        out += _md_table(DIFFER_COLUMNS, differ)
    view, columns, rows = fleet_view(summary)
    out += ["## Ranks" if view == "ranks" else "## Nodes", ""]
    if view == "nodes":
        out += ["%d ranks on %d nodes; every rank is in [ranks.csv](ranks.csv) and summary.json." % (
            len(rank_rows(summary)), len(rows)), ""]  # fmt: skip
    out += _md_table(columns, rows)
    memory = memory_rows(summary) if view == "ranks" else []
    if memory:
        out += ["## Memory", ""]
        out.append("| " + " | ".join(MEMORY_COLUMNS) + " |")
        out.append(
            "|"
            + "|".join("---" if title in ("host", "peak phase") else "---:" for title in MEMORY_COLUMNS)
            + "|"
        )
        out += ["| " + " | ".join(_md_escape(cell) for cell in row) + " |" for row in memory]
        out += ["", _md_escape(_recommendation_text(summary["memory"].get("recommendation"))), ""]
    gpu = gpu_memory_rows(summary) if view == "ranks" else []
    if gpu:
        out += ["## GPU memory", ""]
        out.append("| " + " | ".join(GPU_MEMORY_COLUMNS) + " |")
        out.append(
            "|"
            + "|".join(
                "---" if title in ("host", "node", "peak phase") else "---:" for title in GPU_MEMORY_COLUMNS
            )
            + "|"
        )
        out += ["| " + " | ".join(_md_escape(cell) for cell in row) + " |" for row in gpu]
        out += ["", _md_escape(_gpu_memory_note(summary)), ""]
    epochs = summary.get("epochs") or []
    if epochs:
        out += ["## Epochs", "", "| epoch | ranks | mean loss | median loss | images/s (all ranks) |",
                "|---:|---:|---:|---:|---:|"]  # fmt: skip
        for row in epochs:
            out.append("| %s | %s | %s | %s | %s |" % (
                row.get("epoch"), row.get("ranks"), _number(row.get("loss"), 4),
                _number(row.get("loss_median"), 4), _number(row.get("images_per_s"), 2)))  # fmt: skip
        out.append("")
    if plots:
        out += ["## Curves", ""]
        out += ["![%s](%s)" % (name.rsplit(".", 1)[0], name) for name in plots]
        out.append("")
    out += ["## Logs", ""]
    out += ["- [%s](%s)" % (path, _log_link(path, base_dir)) for path in summary.get("logs") or []]
    if not summary.get("logs"):
        out.append("- none collected")
    return "\n".join(out) + "\n"


def _md_table(columns, rows):
    lines = ["| " + " | ".join(title for title, _k, _d in columns) + " |"]
    lines.append("|" + "|".join("---:" if digits not in (None, "yes/no") or key == "rank" else "---"
                                for _t, key, digits in columns) + "|")  # fmt: skip
    for row in rows:
        lines.append(
            "| " + " | ".join(_md_escape(_cell(row, key, digits)) for _t, key, digits in columns) + " |"
        )
    return lines + [""]


def _md_escape(value):
    return str(value).replace("|", "\\|").replace("\n", " ")


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1d2125; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #c9ced4; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.passed { color: #14632d; } .failed { color: #a3121f; }
pre { background: #f4f5f7; padding: 0.6em; overflow-x: auto; }
img { max-width: 100%; border: 1px solid #e2e5e9; margin: 0.5em 0; }
"""


def _html_table(columns, rows):
    esc = html.escape
    out = ["<table><tr>%s</tr>" % "".join("<th>%s</th>" % esc(title) for title, _k, _d in columns)]
    for row in rows:
        cells = []
        for _title, key, digits in columns:
            css = ' class="num"' if isinstance(digits, int) or key in ("rank", "epochs") else ""
            cells.append("<td%s>%s</td>" % (css, esc(_cell(row, key, digits))))
        out.append("<tr>%s</tr>" % "".join(cells))
    out.append("</table>")
    return out


def render_html(summary, base_dir=None, plots=(LOSS_PLOT, THROUGHPUT_PLOT)):
    esc = html.escape
    verdict = summary.get("verdict") or "unknown"
    title = "Training run %s: %s" % (_text(summary.get("run_id")), verdict.upper())
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>%s</title><style>%s</style></head><body>" % (esc(title), STYLE),
        '<h1>Training run %s: <span class="%s">%s</span></h1>'
        % (esc(_text(summary.get("run_id"))), esc(verdict), esc(verdict.upper())),
        "<table>",
    ]
    out += [
        "<tr><th>%s</th><td>%s</td></tr>" % (esc(label), esc(value))
        for label, value in overview_rows(summary)
    ]
    out.append("</table>")
    if summary.get("failures"):
        out.append("<h2>What went wrong</h2>")
        out += ["<pre>%s</pre>" % esc(str(failure)) for failure in summary["failures"]]
    stragglers = straggler_rows(summary)
    if stragglers:
        out.append(
            "<h2>Stragglers</h2><table><tr>%s</tr>"
            % "".join("<th>%s</th>" % esc(t) for t in STRAGGLER_COLUMNS)
        )
        for row in stragglers:
            out.append(
                "<tr>%s</tr>"
                % "".join(
                    "<td%s>%s</td>" % ("" if title in ("pod", "node", "log") else ' class="num"', esc(cell))
                    for title, cell in zip(STRAGGLER_COLUMNS, row, strict=True)
                )
            )
        out.append("</table>")
        out.append("<p>%s</p>" % esc(_straggler_note(summary)))
    warnings = warnings_with_remedies(summary)
    if warnings:
        out.append("<h2>Warnings and remedies</h2><ul>")
        for warning in warnings:
            lines = "".join("<br><code>%s</code>" % esc(line) for line in warning["lines"])
            out.append(
                "<li><strong>%s</strong><br>Remedy: %s%s</li>"
                % (esc(warning["what"]), esc(warning["remedy"]), lines)
            )
        out.append("</ul>")
    differ = differ_rows(summary)
    if differ:
        out.append("<h2>What differs</h2><p>The ranks that did not do what their peers did, by node.</p>")
        out += _html_table(DIFFER_COLUMNS, differ)
    view, columns, rows = fleet_view(summary)
    out.append("<h2>%s</h2>" % ("Ranks" if view == "ranks" else "Nodes"))
    if view == "nodes":
        out.append(
            '<p>%d ranks on %d nodes; every rank is in <a href="ranks.csv">ranks.csv</a> and '
            "summary.json.</p>" % (len(rank_rows(summary)), len(rows))
        )
    out += _html_table(columns, rows)
    memory = memory_rows(summary) if view == "ranks" else []
    if memory:
        out.append(
            "<h2>Memory</h2><table><tr>%s</tr>" % "".join("<th>%s</th>" % esc(t) for t in MEMORY_COLUMNS)
        )
        for row in memory:
            out.append(
                "<tr>%s</tr>"
                % "".join(
                    "<td%s>%s</td>" % ("" if title in ("host", "peak phase") else ' class="num"', esc(cell))
                    for title, cell in zip(MEMORY_COLUMNS, row, strict=True)
                )
            )
        out.append("</table>")
        out.append("<p>%s</p>" % esc(_recommendation_text(summary["memory"].get("recommendation"))))
    gpu = gpu_memory_rows(summary) if view == "ranks" else []
    if gpu:
        out.append(
            "<h2>GPU memory</h2><table><tr>%s</tr>"
            % "".join("<th>%s</th>" % esc(t) for t in GPU_MEMORY_COLUMNS)
        )
        for row in gpu:
            out.append(
                "<tr>%s</tr>"
                % "".join(
                    "<td%s>%s</td>"
                    % ("" if title in ("host", "node", "peak phase") else ' class="num"', esc(cell))
                    for title, cell in zip(GPU_MEMORY_COLUMNS, row, strict=True)
                )
            )
        out.append("</table>")
        out.append("<p>%s</p>" % esc(_gpu_memory_note(summary)))
    epochs = summary.get("epochs") or []
    if epochs:
        out.append("<h2>Epochs</h2><table><tr><th>epoch</th><th>ranks</th><th>mean loss</th>"
                   "<th>median loss</th><th>images/s (all ranks)</th></tr>")  # fmt: skip
        for row in epochs:
            values = (row.get("epoch"), row.get("ranks"), _number(row.get("loss"), 4),
                      _number(row.get("loss_median"), 4), _number(row.get("images_per_s"), 2))  # fmt: skip
            out.append("<tr>%s</tr>" % "".join('<td class="num">%s</td>' % esc(_text(v)) for v in values))
        out.append("</table>")
    if plots:
        out.append("<h2>Curves</h2>")
        out += ['<img src="%s" alt="%s">' % (esc(name), esc(name.rsplit(".", 1)[0])) for name in plots]
    out.append("<h2>Logs</h2><ul>")
    out += [
        '<li><a href="%s">%s</a></li>' % (esc(_log_link(path, base_dir)), esc(path))
        for path in summary.get("logs") or []
    ]
    if not summary.get("logs"):
        out.append("<li>none collected</li>")
    out.append("</ul></body></html>")
    return "\n".join(out) + "\n"

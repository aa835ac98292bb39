#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_report
short_description: Write a training run's report (Markdown, HTML and PNG curves)
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Turns a run summary (the output of the P(gpuops.training.run_summary#filter) filter) into
    C(report.md) and C(report.html) in O(dest), with the loss and throughput curves drawn as
    C(loss.png) and C(throughput.png).
  - The reports give the verdict and what went wrong, the run at a glance, the NCCL
    statement, each NCCL problem with its remedy, what differs (the ranks that did not finish, never reported, did
    not complete NCCL's init or are slower than their peers, grouped by node), a table per rank (host, status, loss,
    throughput, GPU, transport, network devices, GPUDirect RDMA, NCCL init) or, past 64 ranks, a row per node, the
    epochs, the curves, and links to every rank's log relative to O(dest) (globs in the summary's
    C(logs) are expanded to the files they match, up to 4096).
  - C(ranks.csv) holds every rank's row (and its memory), whatever the reports show of them.
  - With V(json) in O(formats), the summary itself is written as C(summary.json) (indented, keys sorted).
  - Files are written only when their content changes, so a second run reports no change.
requirements:
  - matplotlib (for the PNG curves; O(plots=false) works without it)
options:
  summary:
    description: The run summary, schema C(gpuops.run-summary/v1).
    type: dict
    required: true
  dest:
    description: Directory to write the report into; created when missing.
    type: path
    required: true
  formats:
    description: Which documents to write; V(json) is the summary as given, C(summary.json).
    type: list
    elements: str
    choices: [markdown, html, json]
    default: [markdown, html]
  plots:
    description: Draw the loss and throughput curves as PNG files.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reports which files would change and writes nothing.
  diff_mode:
    support: none
    description: The files are documents and images; only their names are reported.
"""

EXAMPLES = r"""
- name: Write the report of a verified run next to its logs
  gpuops.training.run_report:
    summary: "{{ training_job_result | gpuops.training.run_summary(training, nccl) }}"
    dest: "{{ training_job_result.run_dir }}"

- name: Write only the Markdown report, without plots
  gpuops.training.run_report:
    summary: "{{ summary }}"
    dest: /srv/reports/run-42
    formats: [markdown]
    plots: false
"""

RETURN = r"""
files:
  description: Every file of the report, by kind, as absolute paths.
  returned: always
  type: dict
  sample: {"markdown": "/runs/r1/report.md", "html": "/runs/r1/report.html", "json": "/runs/r1/summary.json",
           "ranks_csv": "/runs/r1/ranks.csv",
           "loss_plot": "/runs/r1/loss.png", "throughput_plot": "/runs/r1/throughput.png"}
changed_files:
  description: The files written (or, in check mode, that would be written) because they were missing or different.
  returned: always
  type: list
  elements: str
"""

import glob
import json
import os
import traceback

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpuops.training.plugins.module_utils import report_plots
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module
from ansible_collections.gpuops.training.plugins.module_utils.report_document import (
    LOSS_PLOT,
    THROUGHPUT_PLOT,
    render_html,
    render_markdown,
)
from ansible_collections.gpuops.training.plugins.module_utils.report_files import differs, write_atomically
from ansible_collections.gpuops.training.plugins.module_utils.run_fleet import ranks_csv

RANKS_CSV = "ranks.csv"

SCHEMA = "gpuops.run-summary/v1"


MAX_LOG_LINKS = 4096


def expand_log_paths(patterns):
    """The launchers record globs (``logs/**/*.log``); a report links the files they match."""
    files = []
    for pattern in patterns or []:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        files.extend(path for path in matches if path not in files)
        if len(files) >= MAX_LOG_LINKS:
            return files[:MAX_LOG_LINKS]
    return files


def build_files(summary, dest, formats, plots):
    """Name -> (kind, bytes) of every file of the report."""
    files = {}
    if "json" in formats:
        text = json.dumps(summary, indent=4, sort_keys=True, separators=(",", ": "), ensure_ascii=False)
        files["summary.json"] = ("json", (text + "\n").encode("utf-8"))
    summary = dict(summary, logs=expand_log_paths(summary.get("logs")))
    plot_names = (LOSS_PLOT, THROUGHPUT_PLOT) if plots else ()
    if "markdown" in formats:
        files["report.md"] = ("markdown", render_markdown(summary, dest, plot_names).encode("utf-8"))
    if "html" in formats:
        files["report.html"] = ("html", render_html(summary, dest, plot_names).encode("utf-8"))
    # Every rank, whatever the report shows of them (a row per node past RANK_TABLE_LIMIT ranks).
    files[RANKS_CSV] = ("ranks_csv", ranks_csv(summary).encode("utf-8"))
    if plots:
        files[LOSS_PLOT] = ("loss_plot", report_plots.loss_plot(summary))
        files[THROUGHPUT_PLOT] = ("throughput_plot", report_plots.throughput_plot(summary))
    return files


def main():
    module = build_module(
        argument_spec=dict(
            summary=dict(type="dict", required=True),
            dest=dict(type="path", required=True),
            formats=dict(
                type="list",
                elements="str",
                choices=["markdown", "html", "json"],
                default=["markdown", "html"],
            ),
            plots=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    summary = module.params["summary"]
    if not module.params["dest"] or "\x00" in module.params["dest"]:
        module.fail_json(msg="dest: expected the path of a directory, got %r" % module.params["dest"])
    dest = os.path.abspath(module.params["dest"])
    if summary.get("schema") != SCHEMA:
        module.fail_json(msg="summary: expected a run summary with schema %s (the run_summary filter's output), "
                             "got schema %r" % (SCHEMA, summary.get("schema")))  # fmt: skip
    if module.params["plots"] and not report_plots.HAS_MATPLOTLIB:
        module.fail_json(msg=missing_required_lib("matplotlib") + " (or set plots=false)")
    if os.path.exists(dest) and not os.path.isdir(dest):
        module.fail_json(msg="dest: %s exists and is not a directory" % dest)

    try:
        files = build_files(summary, dest, module.params["formats"], module.params["plots"])
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # A field of another type than the run_summary filter writes.
        module.fail_json(msg="summary: a field is not what the run_summary filter writes (%s: %s)"
                             % (type(exc).__name__, exc))  # fmt: skip
    paths = {name: os.path.join(dest, name) for name in files}
    try:
        changed_files = sorted(
            paths[name] for name, (_kind, content) in files.items() if differs(paths[name], content)
        )
    except OSError as exc:
        module.fail_json(msg="dest: cannot read the report in %s: %s" % (dest, exc))
    if changed_files and not module.check_mode:
        try:
            os.makedirs(dest, exist_ok=True)
            for name, (_kind, content) in files.items():
                if paths[name] in changed_files:
                    write_atomically(paths[name], content)
        except OSError as exc:
            module.fail_json(msg="dest: cannot write the report into %s: %s" % (dest, exc),
                             exception=traceback.format_exc())  # fmt: skip
    module.exit_json(
        changed=bool(changed_files),
        files={kind: paths[name] for name, (kind, _content) in files.items()},
        changed_files=changed_files,
    )


if __name__ == "__main__":
    main()

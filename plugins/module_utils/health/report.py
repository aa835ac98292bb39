# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a health pass's files: ``summary.json``, ``report.md``, ``unhealthy-hosts.txt`` and each
checked node's full node_health_info result under ``nodes/`` - only those whose content changes."""

from __future__ import annotations

import json
import os
import traceback

from ansible_collections.gpuops.training.plugins.module_utils.health import fleet
from ansible_collections.gpuops.training.plugins.module_utils.report_files import changed_paths, write_changed

ACTIONS = (
    fleet.QUARANTINE,
    fleet.UPDATE,
    fleet.KEEP,
    fleet.RELEASE,
    fleet.HOLD,
    fleet.LEFT,
    fleet.MISSING,
    fleet.NONE,
)


def _json_bytes(value):
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode(
        "utf-8"
    )


def quarantine_problem(quarantine):
    """A message naming ``quarantine`` when it is not node_health_quarantine's result; empty when
    it is, or is empty (no quarantine pass)."""
    if not quarantine:
        return ""
    rows = quarantine.get("nodes")
    if not isinstance(rows, list) or not all(
        isinstance(row, dict) and isinstance(row.get("node"), str) and row.get("action") in ACTIONS
        for row in rows
    ):
        return (
            "quarantine: expected node_health_quarantine's result (nodes, each with node and action), "
            "got keys %s" % sorted(quarantine)
        )
    for key in ("max_percent", "allowed"):
        value = quarantine.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "quarantine: %s must be a number, as node_health_quarantine returns it, got %r" % (
                key,
                value,
            )
    return ""


def build_files(params):
    """The summary and ``{relative name: bytes}`` of every file of the pass's report."""
    entries = fleet.entries_of(params["nodes"], params["fail_classes"])
    taken = set()
    details = {}
    files = {}
    judged = {entry["node"] for entry in entries if entry["verdict"] != fleet.UNCHECKED}
    for item in params["nodes"]:
        if item["node"] in judged:
            name = fleet.details_name(item["node"], taken)
            relative = "%s/%s" % (fleet.NODES_DIR, name)
            details[item["node"]] = relative
            files[relative] = _json_bytes({"node": item["node"], "result": item["result"]})
    summary = fleet.build_summary(
        params["run_id"],
        params["platform"],
        entries,
        params["fail_classes"],
        params["fenced_classes"],
        params["quarantine"] or None,
        details,
    )
    files["summary.json"] = _json_bytes(summary)
    files["report.md"] = fleet.render_markdown(summary).encode("utf-8")
    files[fleet.HOSTS_FILE] = fleet.hosts_file_text(summary).encode("utf-8")
    return summary, files


def run_module(module):
    """The node_health_report module: check the arguments, write what changed (nothing in check
    mode), exit."""
    params = module.params
    dest = params["dest"]
    problem = (
        ("" if params["run_id"].strip() else "run_id must name the health pass, got %r" % params["run_id"])
        or ("dest: expected the path of a directory, got %r" % dest if not dest or "\x00" in dest else "")
        or fleet.classes_problem("fail_classes", params["fail_classes"])
        or fleet.classes_problem("fenced_classes", params["fenced_classes"])
        or quarantine_problem(params["quarantine"])
    )
    if problem:
        module.fail_json(msg=problem)
    dest = os.path.abspath(dest)
    if os.path.exists(dest) and not os.path.isdir(dest):
        module.fail_json(msg="dest: %s exists and is not a directory" % dest)
    try:
        summary, files = build_files(params)
    except fleet.HealthFleetError as error:
        module.fail_json(msg=str(error))
    contents = {os.path.join(dest, name): content for name, content in files.items()}
    try:
        changed = changed_paths(contents)
        if changed and not module.check_mode:
            write_changed(contents, changed)
    except OSError as error:
        module.fail_json(
            msg="dest: cannot write the report into %s: %s" % (dest, error), exception=traceback.format_exc()
        )
    module.exit_json(
        changed=bool(changed),
        changed_files=changed,
        files={
            "summary": os.path.join(dest, "summary.json"),
            "markdown": os.path.join(dest, "report.md"),
            "hosts": os.path.join(dest, fleet.HOSTS_FILE),
        },
        verdict=summary["verdict"],
        headline=summary["headline"],
        lines=summary["lines"],
        needs_action=summary["needs_action"],
        unhealthy_hosts=summary["unhealthy_hosts"],
        counts=summary["counts"],
    )

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A health pass over many nodes: one entry per node, the quarantine plan, the summary.

Each node of a pass comes as ``{node, result, error}``: ``result`` is what node_health_info
returned on the node (registered over SSH, or printed in a probe pod's log on Kubernetes),
``error`` why there is none. :func:`node_entry` makes it one entry; a node without a usable
result is ``unchecked``, never healthy. :func:`plan_quarantine` decides, for Kubernetes nodes,
which to taint and which to release, within the cap; :func:`build_summary` and
:func:`render_markdown` give ``summary.json`` (``gpuops.health-summary/v1``) and the report,
the nodes needing action first.
"""

from __future__ import annotations

import math
import re

from ansible_collections.gpuops.training.plugins.module_utils.health.nvidia_smi import (
    ISOLATE,
    MONITOR,
    REBOOT,
)

SCHEMA = "gpuops.health-summary/v1"
HEALTHY = "healthy"
UNCHECKED = "unchecked"
# Worst first: the classes a finding has, and the order of the verdicts in a report.
CLASSES = (ISOLATE, REBOOT, MONITOR)
VERDICTS = (ISOLATE, REBOOT, UNCHECKED, MONITOR, HEALTHY)

# The taint of a quarantined node, and its annotations: why, and the pass that decided it.
TAINT_KEY = "gpuops.training/unhealthy"
TAINT_EFFECT = "NoSchedule"
REASON_ANNOTATION = TAINT_KEY
RUN_ANNOTATION = "gpuops.training/unhealthy-run"
# An annotation of a few findings, not of a log: the report holds the rest.
REASON_LIMIT = 2000

HOSTS_FILE = "unhealthy-hosts.txt"
NODES_DIR = "nodes"

# What a quarantine pass does to a node (plan_quarantine's actions).
QUARANTINE = "quarantine"  # tainted and annotated now
UPDATE = "update"  # stays quarantined, for another check than before
KEEP = "keep"  # stays quarantined, for the same check
RELEASE = "release"  # healthy now: taint and annotations removed
HOLD = "hold"  # quarantined earlier, not released: this pass has no complete result for it
LEFT = "left"  # would be quarantined, but that would pass the cap
MISSING = "missing"  # the node is gone from the API server
NONE = "none"
CHANGING = (QUARANTINE, UPDATE, RELEASE)
STAYING = (KEEP, UPDATE, HOLD)


class HealthFleetError(ValueError):
    """An argument that cannot be used; the message starts with its name."""


def classes_problem(option, values):
    """A message naming ``option`` when ``values`` is not a list of known classes; empty when it is."""
    if not isinstance(values, (list, tuple)):
        return "%s: expected a list of classes among %s, got %r" % (option, ", ".join(CLASSES), values)
    unknown = [value for value in values if value not in CLASSES]
    if unknown:
        return "%s: unknown class %s; the classes are %s" % (
            option,
            ", ".join(repr(value) for value in unknown),
            ", ".join(CLASSES),
        )
    return ""


def percent_problem(option, value):
    """A message naming ``option`` when ``value`` is not a percentage from 0 to 100; empty when it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        return "%s: a percentage from 0 to 100 is expected, got %r" % (option, value)
    return ""


def allowed_quarantined(max_percent, checked):
    """How many of ``checked`` nodes may be quarantined at once: ``max_percent`` of them,
    rounded down (never more than the percentage; below one node that is none)."""
    return int(math.floor(round(max_percent * checked, 6) / 100))


def _text(value):
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _first_line(text):
    for line in _text(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def _why_no_result(result):
    """Why a registered or read result holds no verdict."""
    if result is None:
        return "no result"
    if not isinstance(result, dict):
        return "the result is not node_health_info's (a %s)" % type(result).__name__
    if result.get("unreachable"):
        return "the host was unreachable: %s" % (_first_line(result.get("msg")) or "no message")
    if result.get("skipped"):
        return "the check was skipped on this host"
    if result.get("msg"):
        return "node_health_info failed: %s" % _first_line(result.get("msg"))
    return "the result is not node_health_info's: it has no verdict"


def _findings(value):
    """node_health_info's findings, each with the five fields as text; None when they are not."""
    if not isinstance(value, list):
        return None
    findings = []
    for item in value:
        if not isinstance(item, dict) or item.get("class") not in CLASSES:
            return None
        findings.append(
            {
                "device": _text(item.get("device")) or "node",
                "check": _text(item.get("check")) or "unknown",
                "class": item["class"],
                "reason": _text(item.get("reason")),
                "remedy": _text(item.get("remedy")),
            }
        )
    return findings


def _not_run(value):
    if not isinstance(value, list):
        return None
    entries = []
    for item in value:
        if not isinstance(item, dict):
            return None
        entries.append({"check": _text(item.get("check")) or "unknown", "reason": _text(item.get("reason"))})
    return entries


def node_entry(item, fail_classes=(ISOLATE, REBOOT)):
    """One node of a pass: ``node``, ``verdict`` (a class, ``healthy`` or ``unchecked``),
    ``complete``, ``needs_action``, ``summary``, ``findings``, ``not_run`` and ``error``.

    A node needs action when its verdict is one of ``fail_classes``, it is unchecked, or a
    check did not run on it (a check that did not run never counts as passed).
    """
    if not isinstance(item, dict) or not isinstance(item.get("node"), str) or not item["node"].strip():
        raise HealthFleetError("nodes: each entry needs node (a name), got %r" % (item,))
    node = item["node"]
    result = item.get("result")
    error = _text(item.get("error")).strip()
    findings = not_run = None
    verdict = None
    if isinstance(result, dict) and not result.get("unreachable"):
        verdict = result.get("verdict")
        findings = _findings(result.get("findings"))
        not_run = _not_run(result.get("not_run", []))
    if verdict not in CLASSES + (HEALTHY,) or findings is None or not_run is None:
        why = error or _why_no_result(result)
        if isinstance(result, dict) and "verdict" in result and not error:
            why = "the result is not node_health_info's: its verdict, findings or not_run cannot be read"
        return {
            "node": node,
            "verdict": UNCHECKED,
            "complete": False,
            "needs_action": True,
            "summary": "unchecked: %s" % why,
            "findings": [],
            "not_run": [],
            "error": why,
        }
    complete = not not_run
    return {
        "node": node,
        "verdict": verdict,
        "complete": complete,
        "needs_action": verdict in fail_classes or not complete,
        "summary": _text(result.get("summary")) or verdict,
        "findings": findings,
        "not_run": not_run,
        "error": None,
    }


def entries_of(items, fail_classes=(ISOLATE, REBOOT)):
    """The pass's entries, the nodes needing action first, then by verdict and name."""
    if not isinstance(items, list):
        raise HealthFleetError("nodes: expected a list of {node, result, error}, got %r" % (items,))
    entries = [node_entry(item, fail_classes) for item in items]
    names = [entry["node"] for entry in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise HealthFleetError("nodes: each node once, got %s more than once" % ", ".join(twice))
    return sorted(
        entries,
        key=lambda entry: (not entry["needs_action"], VERDICTS.index(entry["verdict"]), entry["node"]),
    )


def fenced_findings(entry, classes):
    """The findings of ``classes`` that put this node on the unhealthy list, worst first."""
    if entry["verdict"] == UNCHECKED:
        return []
    found = [finding for finding in entry["findings"] if finding["class"] in classes]
    return sorted(found, key=lambda finding: CLASSES.index(finding["class"]))


def label_value(text):
    """``text`` as a label (taint) value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    return value or "unhealthy"


def reason_text(findings):
    """The annotation: each finding's class, check, device and reason."""
    text = "; ".join(
        "%s %s on %s: %s" % (finding["class"], finding["check"], finding["device"], finding["reason"])
        for finding in findings
    )
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 3] + "..."


def _taint(node_object):
    taints = ((node_object or {}).get("spec") or {}).get("taints") or []
    return next(
        (taint for taint in taints if isinstance(taint, dict) and taint.get("key") == TAINT_KEY), None
    )


def node_patch(action, node_object, findings, run_id):
    """The merge patch of one node for ``action`` (quarantine, update or release): the
    collection's taint replaced or removed, other taints kept, at the node's resourceVersion
    (a node changed since it was read is read again, never overwritten)."""
    spec = (node_object or {}).get("spec") or {}
    kept = [
        taint
        for taint in spec.get("taints") or []
        if not (isinstance(taint, dict) and taint.get("key") == TAINT_KEY)
    ]
    metadata = {"resourceVersion": ((node_object or {}).get("metadata") or {}).get("resourceVersion")}
    if action == RELEASE:
        metadata["annotations"] = {REASON_ANNOTATION: None, RUN_ANNOTATION: None}
        return {"metadata": metadata, "spec": {"taints": kept}}
    taint = {"key": TAINT_KEY, "value": label_value(findings[0]["check"]), "effect": TAINT_EFFECT}
    metadata["annotations"] = {REASON_ANNOTATION: reason_text(findings), RUN_ANNOTATION: run_id}
    return {"metadata": metadata, "spec": {"taints": kept + [taint]}}


def node_action(entry, node_object, classes):
    """What this pass does to one node, before the cap: see the actions above."""
    if node_object is None:
        return MISSING
    findings = fenced_findings(entry, classes)
    current = _taint(node_object)
    if findings:
        if current is None:
            return QUARANTINE
        return KEEP if current.get("value") == label_value(findings[0]["check"]) else UPDATE
    if current is None:
        return NONE
    # Released only on evidence: a result from every check asked for, and no finding of the classes.
    return RELEASE if entry["verdict"] != UNCHECKED and entry["complete"] else HOLD


def plan_quarantine(entries, node_objects, classes, max_percent, check_mode=False):
    """Which nodes to taint, keep, release or leave in this pass.

    ``node_objects``: each node as the API server holds it, by name (None: gone). The nodes
    quarantined after the pass (those staying and the new ones) may be at most
    ``max_percent`` of the nodes checked (:func:`allowed_quarantined`); when more would be,
    none is quarantined in this pass: so many at once more often means a broken check or a
    fleet-wide event than bad hardware, and picking some of them would be arbitrary. Releases
    and the nodes that stay are not held back by the cap.
    """
    problem = classes_problem("classes", classes) or percent_problem("max_percent", max_percent)
    if problem:
        raise HealthFleetError(problem)
    rows = []
    for entry in entries:
        node_object = node_objects.get(entry["node"])
        action = node_action(entry, node_object, classes)
        findings = fenced_findings(entry, classes)
        rows.append(
            {
                "node": entry["node"],
                "action": action,
                "check": label_value(findings[0]["check"]) if findings else None,
                "reason": reason_text(findings) if findings else None,
                "was": (_taint(node_object) or {}).get("value"),
            }
        )
    checked = len(entries)
    allowed = allowed_quarantined(max_percent, checked)
    staying = [row for row in rows if row["action"] in STAYING]
    new = [row for row in rows if row["action"] == QUARANTINE]
    over_cap = bool(new) and len(staying) + len(new) > allowed
    if over_cap:
        for row in new:
            row["action"] = LEFT
    plan = {
        "checked": checked,
        "max_percent": max_percent,
        "allowed": allowed,
        "over_cap": over_cap,
        "nodes": rows,
    }
    plan["message"] = plan_message(plan, classes, check_mode)
    return plan


def _names(rows, *actions):
    return [row["node"] for row in rows if row["action"] in actions]


def plan_message(plan, classes, check_mode=False):
    """One paragraph: what the pass did (or, in check mode, would do) and why, naming the nodes."""
    rows = plan["nodes"]
    would = "would be " if check_mode else ""
    parts = []
    quarantined = [row for row in rows if row["action"] == QUARANTINE]
    if quarantined:
        parts.append(
            "%squarantined (tainted %s=<check>:%s): %s"
            % (
                would,
                TAINT_KEY,
                TAINT_EFFECT,
                ", ".join("%s (%s)" % (row["node"], row["check"]) for row in quarantined),
            )
        )
    for action, words in (
        (UPDATE, "%sstill quarantined, for another check now" % would),
        (RELEASE, "%sreleased (healthy, every check ran)" % would),
        (KEEP, "still quarantined"),
        (HOLD, "still quarantined, not released: this pass has no complete result for them"),
        (MISSING, "no longer on the API server"),
    ):
        names = _names(rows, action)
        if names:
            parts.append("%s: %s" % (words, ", ".join(names)))
    if plan["over_cap"]:
        left = _names(rows, LEFT)
        staying = _names(rows, *STAYING)
        parts.append(
            "none of the %d node(s) with %s findings was quarantined (%s): with the %d staying "
            "quarantined that would be %d of the %d nodes checked, above the cap of %s %% (max_percent; "
            "the role's node_health_max_quarantine), which allows %d. So many at once more often means a "
            "broken check or a fleet-wide event (a driver update, a switch) than bad hardware: read their "
            "findings, then fence them by hand or run again with a higher cap"
            % (
                len(left),
                "/".join(classes),
                ", ".join(left),
                len(staying),
                len(staying) + len(left),
                plan["checked"],
                _percent(plan["max_percent"]),
                plan["allowed"],
            )
        )
    if not parts:
        return "Quarantine: no node to quarantine or release among the %d checked." % plan["checked"]
    return "Quarantine: " + "; ".join(parts) + "."


def _percent(value):
    return ("%g" % value) if isinstance(value, (int, float)) else str(value)


def build_summary(run_id, platform, entries, fail_classes, fenced_classes, quarantine=None, details=None):
    """The pass's summary (``gpuops.health-summary/v1``): the verdict (``passed`` when no node
    needs action), the counts, each node (its quarantine action when there was a quarantine
    pass) and the unhealthy hosts (a finding of ``fenced_classes``) for ``--limit @file``."""
    actions = {row["node"]: row["action"] for row in (quarantine or {}).get("nodes") or []}
    nodes = []
    for entry in entries:
        node = dict(entry, quarantine=actions.get(entry["node"]))
        if details and entry["node"] in details:
            node["details"] = details[entry["node"]]
        nodes.append(node)
    counts = {verdict: sum(1 for entry in entries if entry["verdict"] == verdict) for verdict in VERDICTS}
    counts["incomplete"] = sum(
        1 for entry in entries if entry["verdict"] != UNCHECKED and not entry["complete"]
    )
    needs = [entry["node"] for entry in entries if entry["needs_action"]]
    unhealthy = sorted(entry["node"] for entry in entries if fenced_findings(entry, fenced_classes))
    verdict = "failed" if needs else "passed"
    headline = "Node health %s: %s (%d of %d node%s need%s action)" % (
        run_id,
        verdict.upper(),
        len(needs),
        len(entries),
        "" if len(entries) == 1 else "s",
        "s" if len(needs) == 1 else "",
    )
    summary = {
        "schema": SCHEMA,
        "run_id": run_id,
        "platform": platform,
        "verdict": verdict,
        "headline": headline,
        "nodes_checked": len(entries),
        "counts": counts,
        "needs_action": needs,
        "fail_classes": list(fail_classes),
        "fenced_classes": list(fenced_classes),
        "unhealthy_hosts": unhealthy,
        "hosts_file": HOSTS_FILE,
        "quarantine": _quarantine_summary(quarantine),
        "nodes": nodes,
    }
    summary["lines"] = verdict_lines(summary)
    return summary


def _quarantine_summary(quarantine):
    if not quarantine:
        return {"enabled": False}
    rows = quarantine.get("nodes") or []
    return {
        "enabled": True,
        "check_mode": bool(quarantine.get("check_mode")),
        "max_percent": quarantine.get("max_percent"),
        "allowed": quarantine.get("allowed"),
        "over_cap": bool(quarantine.get("over_cap")),
        "message": quarantine.get("message") or "",
        "quarantined": _names(rows, QUARANTINE),
        "released": _names(rows, RELEASE),
        "still_quarantined": _names(rows, KEEP, UPDATE, HOLD),
        "left": _names(rows, LEFT),
        "missing": _names(rows, MISSING),
    }


def _node_line(entry):
    if entry["verdict"] == UNCHECKED:
        return "%s: UNCHECKED - %s" % (entry["node"], entry["error"])
    worst = [finding for finding in entry["findings"] if finding["class"] == entry["verdict"]]
    line = "%s: %s" % (entry["node"], entry["verdict"].upper())
    if worst:
        line += " - %s on %s: %s" % (worst[0]["check"], worst[0]["device"], worst[0]["reason"])
        if len(entry["findings"]) > 1:
            line += " (+%d more)" % (len(entry["findings"]) - 1)
    if entry["not_run"]:
        line += "; not run: %s" % ", ".join(
            "%s (%s)" % (item["check"], item["reason"]) for item in entry["not_run"]
        )
    return line


def verdict_lines(summary):
    """What the play shows: the headline, each node needing action, the quarantine."""
    lines = [summary["headline"]]
    lines += [_node_line(node) for node in summary["nodes"] if node["needs_action"]]
    if summary["quarantine"].get("enabled"):
        lines.append(summary["quarantine"]["message"])
    if summary["unhealthy_hosts"]:
        lines.append(
            "Unhealthy hosts (%s findings), one a line for --limit @%s: %s"
            % ("/".join(summary["fenced_classes"]), HOSTS_FILE, ", ".join(summary["unhealthy_hosts"]))
        )
    return lines


def hosts_file_text(summary):
    """The unhealthy hosts, one a line (empty when there is none)."""
    return "".join(host + "\n" for host in summary["unhealthy_hosts"])


def details_name(node, taken):
    """A file name for a node's full result under nodes/, unique among ``taken``."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", node)
    if base.startswith("."):
        base = "_" + base
    name, index = base + ".json", 1
    while name in taken:
        index += 1
        name = "%s-%d.json" % (base, index)
    taken.add(name)
    return name


def _md(value):
    return _text(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(summary):
    """The pass's report: the verdict, each node needing action with its findings and remedies,
    the quarantine, and a table of every node."""
    counts = summary["counts"]
    out = ["# Node health %s: %s" % (summary["run_id"], summary["verdict"].upper()), ""]
    out += [summary["headline"] + ".", ""]
    out += ["| | |", "|---|---|"]
    out.append("| Platform | %s |" % _md(summary["platform"]))
    out.append("| Nodes checked | %d |" % summary["nodes_checked"])
    out.append("| Verdicts | %s |" % ", ".join("%d %s" % (counts[verdict], verdict) for verdict in VERDICTS))
    out.append("| Checks not all run | %d node(s) |" % counts["incomplete"])
    out.append(
        "| The play fails on | %s, an unchecked node, a check not run |"
        % (", ".join(summary["fail_classes"]) or "-")
    )
    quarantine = summary["quarantine"]
    if quarantine.get("enabled"):
        out.append(
            "| Quarantine | %s%d quarantined, %d released, %d still quarantined, %d left "
            "(cap %s %%: %s node(s)) |"
            % (
                "check mode: " if quarantine.get("check_mode") else "",
                len(quarantine["quarantined"]),
                len(quarantine["released"]),
                len(quarantine["still_quarantined"]),
                len(quarantine["left"]),
                _percent(quarantine["max_percent"]),
                quarantine["allowed"],
            )
        )
    else:
        out.append("| Quarantine | off |")
    out.append(
        "| Unhealthy hosts | %d in [%s](%s) (%s findings) |"
        % (len(summary["unhealthy_hosts"]), HOSTS_FILE, HOSTS_FILE, "/".join(summary["fenced_classes"]))
    )
    out.append("")
    needing = [node for node in summary["nodes"] if node["needs_action"]]
    if needing:
        out += ["## Nodes needing action", ""]
        for node in needing:
            out += _node_section(node)
    if quarantine.get("enabled"):
        out += ["## Quarantine", "", quarantine["message"], ""]
    out += ["## Every node", ""]
    out += ["| node | verdict | findings | not run | quarantine | details |", "|---|---|---:|---|---|---|"]
    for node in summary["nodes"]:
        details = node.get("details")
        out.append(
            "| %s | %s | %d | %s | %s | %s |"
            % (
                _md(node["node"]),
                node["verdict"],
                len(node["findings"]),
                _md(", ".join(item["check"] for item in node["not_run"]) or "-"),
                node.get("quarantine") or "-",
                "[%s](%s)" % (details, details) if details else "-",
            )
        )
    out.append("")
    return "\n".join(out)


def _node_section(node):
    out = ["### %s: %s" % (node["node"], node["verdict"].upper()), ""]
    if node["verdict"] == UNCHECKED:
        out += [
            "No result: %s. The node was not checked; it is neither passed nor quarantined." % node["error"],
            "",
        ]
    else:
        out += ["`%s`" % node["summary"].replace("`", "'"), ""]
    if node["findings"]:
        out += ["| device | check | class | reason | remedy |", "|---|---|---|---|---|"]
        for finding in node["findings"]:
            out.append(
                "| %s | %s | %s | %s | %s |"
                % tuple(_md(finding[key]) for key in ("device", "check", "class", "reason", "remedy"))
            )
        out.append("")
    if node["not_run"]:
        out += ["Not run (not passed):", ""]
        out += ["- %s: %s" % (_md(item["check"]), _md(item["reason"])) for item in node["not_run"]]
        out.append("")
    if node.get("quarantine") not in (None, NONE):
        out += ["Quarantine: %s." % node["quarantine"], ""]
    if node.get("details"):
        out += ["Everything node_health_info read: [%s](%s)." % (node["details"], node["details"]), ""]
    return out

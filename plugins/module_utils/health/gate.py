# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health gate before a launch (the training_job role's ``training_job_gate``).

Before the run starts, node_health_info judges the nodes the run may use (the node_health role
does the probing and, on Kubernetes, the quarantine); this module decides what follows:

- :func:`gate_problems`: the gate's settings, each problem naming its variable;
- :func:`candidate_nodes`: on Kubernetes, the nodes the run may use - those its node selector
  finds, not cordoned, whose NoSchedule and NoExecute taints its tolerations tolerate (the
  gate's own quarantine taint aside: the pass judges those nodes again and releases the
  healthy ones);
- :func:`decide`: which nodes passed, which failed or could not be vouched for, and whether
  enough passed to launch; a node passes only with a result from every check asked for and no
  finding of the fencing classes - a check that did not run is never a pass;
- :func:`avoiding_affinity`: the run's node affinity with every node that did not pass left
  out, so the run avoids them even where the quarantine cap kept a taint back.
"""

from __future__ import annotations

import copy

from ansible_collections.gpuops.training.plugins.module_utils import pod_scheduling
from ansible_collections.gpuops.training.plugins.module_utils.health import fleet
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int

GATES = ("none", "quick", "full")
HOST_LAUNCHERS = ("local", "ssh")
POD_LAUNCHERS = ("pytorchjob", "indexed_job", "trainjob")
# Taint effects that keep a pod off a node (PreferNoSchedule only discourages).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
REQUIRED = pod_scheduling.REQUIRED_AFFINITY


def gate_problems(s, var):
    """Every problem of the gate's settings (``gate_min_nodes``, and ``gate`` against the
    launcher), each naming its variable through ``var``. An unknown ``gate`` is the argument
    spec's choices' to name (training_checks.problems), once."""
    gate = s.get("gate", "none")
    found = []
    minimum = s.get("gate_min_nodes", 0)
    if isinstance(minimum, bool) or as_int(minimum) is None or as_int(minimum) < 0:
        found.append(
            "%s must be 0 (the run's own count) or a number of nodes, got %r"
            % (var("gate_min_nodes"), minimum)
        )
    if gate not in GATES or gate == "none":
        return found
    launcher = s.get("launcher")
    if launcher not in HOST_LAUNCHERS + POD_LAUNCHERS:
        found.append(
            "%s is %s, but the %s launcher does not say which nodes the run may use (Run:ai places its "
            "pods itself): set it to none and judge the nodes with playbooks/node_health.yml"
            % (var("gate"), gate, launcher)
        )
    elif gate == "full" and launcher in POD_LAUNCHERS:
        found.append(
            "%s is full, whose one-node nccl-test runs over SSH or on the local host; on the %s launcher "
            "use quick, and measure the fabric with playbooks/nccl_tests.yml" % (var("gate"), launcher)
        )
    return found


def _tolerated(taint, tolerations):
    """Whether one of ``tolerations`` tolerates ``taint`` (Kubernetes' matching rules)."""
    for toleration in tolerations:
        if not isinstance(toleration, dict):
            continue
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key") or ""
        if operator == "Exists" and key in ("", taint.get("key")):
            return True
        if (
            operator == "Equal"
            and key == taint.get("key")
            and (toleration.get("value") or "") == (taint.get("value") or "")
        ):
            return True
    return False


def _label_text(value):
    # YAML turns a label value such as true into a bool; the API server holds the string.
    return str(value).lower() if isinstance(value, bool) else str(value)


def _taint_text(taint):
    value = ("=" + str(taint["value"])) if taint.get("value") else ""
    return "%s%s:%s" % (taint.get("key"), value, taint.get("effect"))


def candidate_nodes(nodes, tolerations, node_selector=None):
    """The nodes (API objects) the run may use, by name, and those among the ones
    ``node_selector`` matches that it may not, each ``{node, reason}``: cordoned, or a taint
    it does not tolerate. Nodes the selector does not match are left out silently."""
    candidates, excluded = [], []
    wanted = {key: _label_text(value) for key, value in (node_selector or {}).items()}
    for node in nodes or []:
        metadata = (node or {}).get("metadata") or {}
        name = metadata.get("name")
        labels = metadata.get("labels") or {}
        if not name or any(labels.get(key) != value for key, value in wanted.items()):
            continue
        spec = node.get("spec") or {}
        if spec.get("unschedulable"):
            excluded.append({"node": name, "reason": "cordoned (unschedulable)"})
            continue
        blocking = [
            taint
            for taint in spec.get("taints") or []
            if isinstance(taint, dict)
            and taint.get("effect") in BLOCKING_EFFECTS
            and taint.get("key") != fleet.TAINT_KEY
            and not _tolerated(taint, tolerations or [])
        ]
        if blocking:
            excluded.append(
                {
                    "node": name,
                    "reason": "the run does not tolerate its taint %s"
                    % ", ".join(map(_taint_text, blocking)),
                }
            )
            continue
        candidates.append(name)
    return sorted(candidates), sorted(excluded, key=lambda item: item["node"])


def _why_failed(entry, classes):
    findings = fleet.fenced_findings(entry, classes)
    first = findings[0]
    more = " (+%d more)" % (len(findings) - 1) if len(findings) > 1 else ""
    return "%s %s on %s: %s%s" % (first["class"], first["check"], first["device"], first["reason"], more)


def _why_unverified(entry):
    if entry["verdict"] == fleet.UNCHECKED:
        return "not checked: %s" % entry["error"]
    return "not verified, a check did not run (never a pass): %s" % ", ".join(
        "%s (%s)" % (item["check"], item["reason"]) for item in entry["not_run"]
    )


def decide(order, items, classes, needed, quarantine=None, more_checks=None):
    """What the gate concludes from a health pass.

    ``order``: the nodes the run may use, in the order it uses them (an SSH run's node ranks);
    ``items``: the pass's ``{node, result, error}`` (node_health_items); ``classes``: the
    finding classes that fail a node (those the quarantine fences); ``needed``: the fewest
    nodes the run may start on; ``quarantine``: node_health_quarantine's result, if any;
    ``more_checks``: what a further check (the ``full`` gate's nccl-test) found on a node that
    passed node_health, by node - ``{outcome: failed or not_run, check, reason}``.

    Returns ``passed`` (in ``order``), ``failed`` and ``unverified`` (each ``{node, reason}``),
    ``warned`` (passed, with findings of other classes), ``avoid`` (every node not passed),
    ``enough``, ``needed`` and ``lines`` (what the play shows).
    """
    problem = fleet.classes_problem("classes", classes)
    if problem:
        raise fleet.HealthFleetError(problem)
    if isinstance(needed, bool) or as_int(needed) is None or as_int(needed) < 1:
        raise fleet.HealthFleetError(
            "needed: a number of nodes of at least 1 is expected, got %r" % (needed,)
        )
    needed = as_int(needed)
    entries = {entry["node"]: entry for entry in fleet.entries_of(items or [])}
    passed, failed, unverified, warned = [], [], [], []
    for name in order:
        entry = entries.get(name)
        if entry is None:
            unverified.append({"node": name, "reason": "not checked: the health pass has no result for it"})
        elif fleet.fenced_findings(entry, classes):
            failed.append({"node": name, "reason": _why_failed(entry, classes)})
        elif entry["verdict"] == fleet.UNCHECKED or not entry["complete"]:
            unverified.append({"node": name, "reason": _why_unverified(entry)})
        elif name in (more_checks or {}):
            found = more_checks[name]
            check = found.get("check") or "a further check"
            reason = "%s: %s" % (check, found.get("reason") or "no reason given")
            if found.get("outcome") == "not_run":
                why = "not verified, %s did not run (never a pass)" % reason
                unverified.append({"node": name, "reason": why})
            else:
                failed.append({"node": name, "reason": reason})
        else:
            passed.append(name)
            if entry["findings"]:
                warned.append({"node": name, "reason": "used; %s" % entry["summary"]})
    actions = {row.get("node"): row.get("action") for row in (quarantine or {}).get("nodes") or []}
    for item in failed:
        action = actions.get(item["node"])
        if action in (fleet.QUARANTINE, fleet.KEEP, fleet.UPDATE):
            item["quarantine"] = "tainted %s:%s" % (fleet.TAINT_KEY, fleet.TAINT_EFFECT)
        elif action == fleet.LEFT:
            item["quarantine"] = "not tainted (the quarantine cap); this run avoids it all the same"
    enough = len(passed) >= needed
    result = {
        "passed": passed,
        "failed": failed,
        "unverified": unverified,
        "warned": warned,
        "avoid": sorted(item["node"] for item in failed + unverified),
        "needed": needed,
        "enough": enough,
    }
    result["lines"] = decision_lines(result, len(order))
    return result


def decision_lines(result, considered):
    """The gate's verdict and one line per node that did not pass or passed with a warning."""
    verdict = "PASSED" if result["enough"] else "STOPPED"
    lines = [
        "Health gate: %s - %d of %d node(s) passed, the run needs %d%s"
        % (
            verdict,
            len(result["passed"]),
            considered,
            result["needed"],
            "" if result["enough"] else "; nothing was launched",
        )
    ]
    for item in result["failed"]:
        lines.append(
            "%s: FAILED - %s%s"
            % (item["node"], item["reason"], ("; " + item["quarantine"]) if item.get("quarantine") else "")
        )
    lines += ["%s: UNVERIFIED - %s" % (item["node"], item["reason"]) for item in result["unverified"]]
    lines += ["%s: WARNING - %s" % (item["node"], item["reason"]) for item in result["warned"]]
    if result["enough"] and result["avoid"]:
        lines.append("The run avoids: %s" % ", ".join(result["avoid"]))
    return lines


def avoiding_affinity(affinity, avoid):
    """``affinity`` (a nodeAffinity, or empty) with every node of ``avoid`` left out of each of
    its required terms (a term with none gets one): a node field requirement takes a single
    value, so one ``metadata.name NotIn`` requirement per node, all in every term."""
    result = copy.deepcopy(affinity) if isinstance(affinity, dict) else {}
    if not avoid:
        return result
    requirements = [{"key": "metadata.name", "operator": "NotIn", "values": [name]} for name in sorted(avoid)]
    required = result.get(REQUIRED) or {}
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchFields"] = list(term.get("matchFields") or []) + copy.deepcopy(requirements)
    result[REQUIRED] = {"nodeSelectorTerms": terms}
    return result

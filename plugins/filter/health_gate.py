# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: health_gate
short_description: Decide from a health pass which nodes a training run may start on
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - The decision of the gpuops.training.training_job role's health gate (C(training_job_gate)). The input is the
    health pass's nodes, each C(node), C(result) (node_health_info's) and C(error), as the gpuops.training.node_health
    role leaves them in C(node_health_items).
  - A node passes with a result from every check asked for and no finding of O(classes); a node without a result,
    or on which a check did not run, is never a pass (C(unverified)). A node with findings of other classes passes
    and is named with a warning.
  - The same plugin file holds C(health_gate_candidates), which takes Kubernetes Node objects (as
    C(kubernetes.core.k8s_info) returns them) and the training_job settings (keys without the C(training_job_)
    prefix) and returns C(candidates) - the nodes the run's pods may use, those C(node_selector) matches, not cordoned, every NoSchedule or
    NoExecute taint tolerated by the run's tolerations (the GPU taint's included, as the pods get it), the
    quarantine taint C(gpuops.training/unhealthy) aside (the pass judges those nodes again) - and C(excluded), each
    C(node) and C(reason).
options:
  _input:
    description: The health pass's nodes, each C(node), C(result) and C(error).
    type: list
    elements: dict
    required: true
  order:
    description: The nodes the run may use, in the order it uses them (over SSH, the node ranks).
    type: list
    elements: str
    required: true
  classes:
    description: The finding classes that fail a node (those the quarantine fences).
    type: list
    elements: str
    default: [isolate]
  needed:
    description: The fewest nodes the run may start on.
    type: int
    required: true
  quarantine:
    description: The quarantine's result (gpuops.training.node_health_quarantine's), to say which failed node was tainted.
    type: dict
    default: {}
  affinity:
    description: The run's own node affinity, returned with every node that did not pass left out.
    type: dict
    default: {}
  more_checks:
    description:
      - What a further check found on nodes that passed node_health (the C(full) gate's nccl-test), by node -
        C(outcome) (V(failed), or V(not_run) - its tool missing, never a pass), C(check) and C(reason).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Decide which nodes the run may use
  ansible.builtin.set_fact:
    gate: "{{ node_health_items | gpuops.training.health_gate(order=hosts, classes=['isolate'], needed=2) }}"

- name: Stop naming each node that did not pass
  ansible.builtin.fail:
    msg: "{{ gate.lines | join('\n') }}"
  when: not gate.enough
"""

RETURN = r"""
_value:
  description:
    - C(passed) (names, in O(order)), C(failed) and C(unverified) (each C(node), C(reason); a failed node also
      C(quarantine) when the quarantine tainted it or its cap kept it back), C(warned), C(avoid) (every node not
      passed), C(needed), C(enough) (whether at least O(needed) passed), C(lines) (the verdict, one line per node
      not passed) and C(node_affinity) (O(affinity) with a C(metadata.name NotIn) requirement per node of C(avoid)
      in every required term).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils import pod_scheduling
from ansible_collections.gpuops.training.plugins.module_utils.health import gate
from ansible_collections.gpuops.training.plugins.module_utils.health.fleet import HealthFleetError


def _mapping(name, value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AnsibleFilterError("health_gate: %s must be a mapping, got %r" % (name, value))
    return value


def health_gate(
    items, order, classes=("isolate",), needed=None, quarantine=None, affinity=None, more_checks=None
):
    if not isinstance(order, list) or not all(isinstance(name, str) for name in order):
        raise AnsibleFilterError("health_gate: order must be a list of node names, got %r" % (order,))
    if not isinstance(classes, (list, tuple)):
        raise AnsibleFilterError(
            "health_gate: classes must be a list of finding classes, got %r" % (classes,)
        )
    quarantine = _mapping("quarantine", quarantine)
    if not isinstance(quarantine.get("nodes") or [], list) or not all(
        isinstance(row, dict) for row in quarantine.get("nodes") or []
    ):
        raise AnsibleFilterError(
            "health_gate: quarantine.nodes must be a list of rows, got %r" % (quarantine,)
        )
    more_checks = _mapping("more_checks", more_checks)
    if not all(isinstance(value, dict) for value in more_checks.values()):
        raise AnsibleFilterError("health_gate: more_checks must map nodes to {outcome, check, reason}")
    affinity = _mapping("affinity", affinity)
    problems = pod_scheduling.node_affinity_problems(affinity, "affinity")
    if problems:
        raise AnsibleFilterError("health_gate: " + "; ".join(problems))
    try:
        decision = gate.decide(order, items, list(classes), needed, quarantine, more_checks)
    except HealthFleetError as error:
        raise AnsibleFilterError("health_gate: %s" % error) from error
    decision["node_affinity"] = gate.avoiding_affinity(affinity, decision["avoid"])
    return decision


def health_gate_candidates(nodes, settings):
    if not isinstance(nodes, list) or not all(isinstance(node, dict) for node in nodes):
        raise AnsibleFilterError(
            "health_gate_candidates: nodes must be a list of Node objects, got %r" % (nodes,)
        )
    if not isinstance(settings, dict):
        raise AnsibleFilterError(
            "health_gate_candidates: settings must be the run's settings, got %r" % (settings,)
        )
    tolerations = settings.get("tolerations") or []
    selector = settings.get("node_selector") or {}
    if not isinstance(tolerations, list) or not all(isinstance(item, dict) for item in tolerations):
        raise AnsibleFilterError(
            "health_gate_candidates: tolerations must be a list of tolerations, got %r" % (tolerations,)
        )
    if not isinstance(selector, dict):
        raise AnsibleFilterError(
            "health_gate_candidates: node_selector must be a mapping of labels, got %r" % (selector,)
        )
    try:
        candidates, excluded = gate.candidate_nodes(nodes, pod_scheduling.tolerations(settings), selector)
    except (AttributeError, TypeError, ValueError) as error:
        raise AnsibleFilterError("health_gate_candidates: the nodes cannot be read: %s" % error) from error
    return {"candidates": candidates, "excluded": excluded}


class FilterModule:
    def filters(self):
        return {"health_gate": health_gate, "health_gate_candidates": health_gate_candidates}

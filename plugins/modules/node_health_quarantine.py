#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_health_quarantine
short_description: Taint the Kubernetes nodes a health pass found unhealthy, within a cap, and release the healthy ones
description:
  - Takes each node's node_health_info result (as P(gpuops.training.node_health_jobs#module) returns them) and
    reads the nodes. A node with a finding of O(classes) is tainted C(gpuops.training/unhealthy=<check>:NoSchedule)
    (the check of its worst finding) and annotated C(gpuops.training/unhealthy) with the findings (class, check,
    device, reason) and C(gpuops.training/unhealthy-run) with O(run_id). A node quarantined earlier whose result
    is complete (every check ran) with no finding of O(classes) is released - its taint and both annotations
    removed. Other taints and annotations are never touched.
  - The cap - after the pass, the nodes quarantined (those staying and the new ones) may be at most O(max_percent)
    of the nodes checked, rounded down. When more would be, B(none) is quarantined in this pass, and RV(message)
    names each node left and why - so many at once more often means a broken check or a fleet-wide event (a
    driver update, a switch) than bad hardware, and quarantining the first few would be an arbitrary choice.
    Releases are never held back.
  - A node without a result, or with a check that did not run, is never released and never quarantined on the
    strength of that pass alone.
  - Each node is patched at the resourceVersion read (a merge patch of its taints and the two annotations); a
    node changed meanwhile is read again and judged again, never overwritten.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.kubernetes
attributes:
  check_mode:
    support: full
    description: Reads the nodes and reports what would change (RV(message) says "would be"); patches nothing.
  diff_mode:
    support: none
    description: RV(nodes) says what changes on each node.
options:
  nodes:
    description:
      - The nodes of the pass, each C(node) (its name), C(result) (node_health_info's result, or null) and
        C(error) (why there is none).
    type: list
    elements: dict
    required: true
  classes:
    description: The finding classes that quarantine a node.
    type: list
    elements: str
    choices: [isolate, reboot, monitor]
    default: [isolate]
  max_percent:
    description: The most nodes quarantined after the pass, as a percentage (0 to 100) of the nodes checked; V(0) quarantines none.
    type: float
    default: 10
  run_id:
    description: The health pass, written to the annotation C(gpuops.training/unhealthy-run) of each node it quarantines.
    type: str
    required: true
requirements:
  - kubernetes (the Python client)
notes:
  - The controller's account needs get and patch on nodes.
seealso:
  - module: gpuops.training.node_health_jobs
  - module: gpuops.training.node_health_report
"""

EXAMPLES = r"""
- name: Quarantine the nodes with an isolate finding, at most 10 % of them
  gpuops.training.node_health_quarantine:
    nodes: "{{ health.nodes }}"
    run_id: health-20261201T060000Z
    max_percent: 10
  register: quarantine

- name: Say what the quarantine did
  ansible.builtin.debug:
    msg: "{{ quarantine.message }}"
"""

RETURN = r"""
nodes:
  description:
    - One entry per node - C(node), C(action) (V(quarantine), V(update) - still quarantined for another check,
      V(keep), V(release), V(hold) - quarantined earlier and not released for want of a complete result,
      V(left) - not quarantined because of the cap, V(missing) - no such node, V(none)), C(check), C(reason)
      and C(was) (the taint's value before).
  returned: always
  type: list
  elements: dict
quarantined:
  description: The nodes tainted in this pass (in check mode, those that would be).
  returned: always
  type: list
  elements: str
released:
  description: The nodes released in this pass (in check mode, those that would be).
  returned: always
  type: list
  elements: str
still_quarantined:
  description: The nodes that stay quarantined.
  returned: always
  type: list
  elements: str
left:
  description: The nodes that would have been quarantined but for the cap.
  returned: always
  type: list
  elements: str
checked:
  description: The nodes of the pass.
  returned: always
  type: int
allowed:
  description: The most nodes the cap allows quarantined after the pass.
  returned: always
  type: int
over_cap:
  description: Whether the cap kept every new quarantine back.
  returned: always
  type: bool
message:
  description: What the pass did and why, naming the nodes.
  returned: always
  type: str
  sample: "Quarantine: quarantined (tainted gpuops.training/unhealthy=<check>:NoSchedule): gpu-07 (xid_48); released (healthy, every check ran): gpu-03."
"""

from ansible_collections.gpuops.training.plugins.module_utils.health.quarantine import run_module
from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    build_kubernetes_module,
    connect,
)


def main():
    module = build_kubernetes_module(
        {
            "nodes": {"type": "list", "elements": "dict", "required": True},
            "classes": {
                "type": "list",
                "elements": "str",
                "choices": ["isolate", "reboot", "monitor"],
                "default": ["isolate"],
            },
            "max_percent": {"type": "float", "default": 10},
            "run_id": {"type": "str", "required": True},
        }
    )
    run_module(module, connect)


if __name__ == "__main__":
    main()

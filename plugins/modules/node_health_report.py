#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_health_report
short_description: Write a health pass's summary, its report and the list of unhealthy hosts
description:
  - Judges each node of a health pass from its node_health_info result - over SSH the registered results, on
    Kubernetes P(gpuops.training.node_health_jobs#module)'s - and writes into O(dest) - C(summary.json)
    (schema C(gpuops.health-summary/v1) - per node its verdict, findings with device, check, class, reason and
    remedy, the checks not run, and the quarantine), C(report.md) (the nodes needing action first, each finding
    with its remedy, then the quarantine and every node), C(unhealthy-hosts.txt) (the nodes with a finding of
    O(fenced_classes), one a line, for C(ansible-playbook --limit @unhealthy-hosts.txt)) and
    C(nodes/<node>.json) (everything node_health_info returned for the node).
  - A node without a usable result is C(unchecked); a node needs action when its verdict is one of
    O(fail_classes), it is unchecked, or a check did not run on it (a check that did not run never counts as
    passed). RV(verdict) is V(passed) when no node needs action.
  - Files are written only when their content changes, so a second run reports no change.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Reports which files would change and writes nothing.
  diff_mode:
    support: none
    description: Only the names of the files are reported.
options:
  run_id:
    description: The health pass, named in the summary and the report.
    type: str
    required: true
  platform:
    description: Where the nodes were checked.
    type: str
    choices: [ssh, kubernetes]
    required: true
  dest:
    description: Directory to write into, C(<runs dir>/<run id>); created when missing.
    type: path
    required: true
  nodes:
    description: The nodes of the pass, each C(node), C(result) (node_health_info's result, registered or read) and C(error).
    type: list
    elements: dict
    required: true
  fail_classes:
    description: The classes of a node's verdict that make it need action (and RV(verdict) V(failed)).
    type: list
    elements: str
    choices: [isolate, reboot, monitor]
    default: [isolate, reboot]
  fenced_classes:
    description: The finding classes that put a node in C(unhealthy-hosts.txt) (those that quarantine it on Kubernetes).
    type: list
    elements: str
    choices: [isolate, reboot, monitor]
    default: [isolate]
  quarantine:
    description: P(gpuops.training.node_health_quarantine#module)'s result, when the pass quarantined; empty otherwise.
    type: dict
    default: {}
seealso:
  - module: gpuops.training.node_health_info
  - module: gpuops.training.node_health_jobs
  - module: gpuops.training.node_health_quarantine
"""

EXAMPLES = r"""
- name: Check the GPU nodes of the cluster
  gpuops.training.node_health_jobs:
    run_id: health-20261201T060000Z
    namespace: gpuops-node-health
    image: registry.example.com/ml/gpuops-training-ee:0.1.0
  register: health

- name: Write the pass's report
  gpuops.training.node_health_report:
    run_id: health-20261201T060000Z
    platform: kubernetes
    dest: /var/tmp/gpuops-runs/health-20261201T060000Z
    nodes: "{{ health.nodes }}"
  register: report

- name: Show the verdict
  ansible.builtin.debug:
    msg: "{{ report.lines }}"
"""

RETURN = r"""
verdict:
  description: V(passed) when no node needs action, else V(failed).
  returned: always
  type: str
headline:
  description: One line with the verdict and how many nodes need action.
  returned: always
  type: str
  sample: "Node health health-20261201T060000Z: FAILED (2 of 64 nodes need action)"
lines:
  description: The headline, one line per node needing action (its worst finding, the checks not run), the quarantine and the unhealthy hosts.
  returned: always
  type: list
  elements: str
needs_action:
  description: The nodes needing action, worst first.
  returned: always
  type: list
  elements: str
unhealthy_hosts:
  description: The nodes written to C(unhealthy-hosts.txt).
  returned: always
  type: list
  elements: str
counts:
  description: Nodes per verdict (isolate, reboot, unchecked, monitor, healthy) and C(incomplete) (a check not run).
  returned: always
  type: dict
files:
  description: The paths of C(summary.json), C(report.md) and C(unhealthy-hosts.txt), as C(summary), C(markdown) and C(hosts).
  returned: always
  type: dict
changed_files:
  description: The files written (or, in check mode, that would be) because they were missing or different.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gpuops.training.plugins.module_utils.health.report import run_module
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module


def main():
    module = build_module(
        argument_spec={
            "run_id": {"type": "str", "required": True},
            "platform": {"type": "str", "choices": ["ssh", "kubernetes"], "required": True},
            "dest": {"type": "path", "required": True},
            "nodes": {"type": "list", "elements": "dict", "required": True},
            "fail_classes": {
                "type": "list",
                "elements": "str",
                "choices": ["isolate", "reboot", "monitor"],
                "default": ["isolate", "reboot"],
            },
            "fenced_classes": {
                "type": "list",
                "elements": "str",
                "choices": ["isolate", "reboot", "monitor"],
                "default": ["isolate"],
            },
            "quarantine": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()

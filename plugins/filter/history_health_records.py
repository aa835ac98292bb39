# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: history_health_records
short_description: The records a node health pass adds to each node's history
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - From a health pass's nodes (each C(node) with node_health_info's C(result), or the C(error) that kept it from
    running), the records for P(gpuops.training.node_history#module) - one per node, source C(node_health), metric
    C(health_pass), without a figure (a pass is kept, not judged against a median).
  - Each record's C(details) hold the node's verdict (a class, C(healthy) or C(unchecked)), whether every check
    ran, whether it needs action, its findings (device, check, class, reason; the first 20, and how many in all),
    the checks that did not run and the error of an unchecked node. The key names the checks of the pass.
options:
  _input:
    description: The pass's nodes, each a mapping with C(node) and C(result) or C(error).
    type: list
    elements: dict
    required: true
  run_id:
    description: The health pass the records come from.
    type: str
    default: ""
  checks:
    description: The checks the pass ran, part of each record's key.
    type: list
    elements: str
    default: []
  fail_classes:
    description: The classes that make a node need action.
    type: list
    elements: str
    default: [isolate, reboot]
"""

EXAMPLES = r"""
- name: Keep each node's health pass in its history
  gpuops.training.node_history:
    dir: /var/tmp/gpuops-runs/history
    records: "{{ health_nodes | gpuops.training.history_health_records(run_id='health-1', checks=['nvidia_smi']) }}"
"""

RETURN = r"""
_value:
  description: One record per node of the pass, with C(value) null and the pass's verdict in C(details).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.health.fleet import HealthFleetError, entries_of
from ansible_collections.gpuops.training.plugins.module_utils.health.history import (
    HistoryError,
    health_records,
)


def history_health_records(nodes, run_id="", checks=None, fail_classes=("isolate", "reboot")):
    if checks is not None and not isinstance(checks, list):
        raise AnsibleFilterError("history_health_records: checks must be a list of names, got %r" % (checks,))
    if not isinstance(fail_classes, (list, tuple)):
        raise AnsibleFilterError(
            "history_health_records: fail_classes must be a list of classes, got %r" % (fail_classes,)
        )
    try:
        entries = entries_of(nodes, tuple(fail_classes))
        return health_records(entries, str(run_id or ""), checks or [])
    except (HealthFleetError, HistoryError) as error:
        raise AnsibleFilterError("history_health_records: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"history_health_records": history_health_records}

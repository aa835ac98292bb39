# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: history_isolate_records
short_description: The records an nccl-tests isolate run adds to each node's history
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - From an isolate run's summary (C(isolate.json), the C(summary) that gpuops.training.nccl_tests_isolate returns),
    the records for P(gpuops.training.node_history#module) - per node, its bus bandwidth alone (key
    C(<collective> alone x <gpus> GPUs)) and with each partner it was paired with (key C(<collective> with
    <partner>), the link's own history). Tests of more than two nodes (halves) are left out - their nodes differ
    from run to run, so their figures are not a node's own.
options:
  _input:
    description: The isolate run's summary, with its C(tests) (each C(id), C(nodes) and C(busbw) in GB/s).
    type: dict
    required: true
  collective:
    description: The collective the isolate run measured, such as V(all_reduce).
    type: str
    required: true
  run_id:
    description: The run the records come from.
    type: str
    default: ""
  gpus_per_node:
    description: GPUs per node, part of a single node's key (0 leaves it out).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Judge every node's bus bandwidth against its own history, and keep it
  gpuops.training.node_history:
    dir: /var/tmp/gpuops-runs/history
    records: "{{ isolate.summary | gpuops.training.history_isolate_records('all_reduce', run_id='nccl-1', gpus_per_node=8) }}"
"""

RETURN = r"""
_value:
  description: One record per node of each single-node and two-node test with a bus bandwidth.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.health.history import (
    HistoryError,
    isolate_records,
)


def history_isolate_records(summary, collective, run_id="", gpus_per_node=0):
    try:
        return isolate_records(summary, str(collective), str(run_id or ""), gpus_per_node or None)
    except HistoryError as error:
        raise AnsibleFilterError("history_isolate_records: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"history_isolate_records": history_isolate_records}

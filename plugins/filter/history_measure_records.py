# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: history_measure_records
short_description: The records an nccl-tests measure run of one node or a pair adds to each node's history
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - From a measure run's summary (C(nccl_tests.json)), the records for P(gpuops.training.node_history#module) - each
    collective that passed, its peak bus bandwidth, per node - when the run was one node alone (key
    C(<collective> alone x <gpus> GPUs)) or a pair (key C(<collective> with <partner>)), the same keys as
    P(gpuops.training.history_isolate_records#filter) gives an isolate run's singles and pairs, so both kinds of
    run build one history.
  - A run of more than two nodes adds nothing - its figure belongs to the set of nodes, not to one of them.
options:
  _input:
    description: The measure run's summary, with its C(collectives) (each C(collective), C(ok), C(peak_busbw_gbyte_s)).
    type: dict
    required: true
  nodes:
    description: The nodes the run measured.
    type: list
    elements: str
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
- name: Judge the node's bus bandwidth against its own history, and keep it
  gpuops.training.node_history:
    dir: /var/tmp/gpuops-runs/history
    records: "{{ summary | gpuops.training.history_measure_records(['gpu-a'], run_id='nccl-2', gpus_per_node=8) }}"
"""

RETURN = r"""
_value:
  description: One record per node and collective that passed, for a run of one or two nodes; none otherwise.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.health.history import (
    HistoryError,
    measure_records,
)


def history_measure_records(summary, nodes, run_id="", gpus_per_node=0):
    if not isinstance(gpus_per_node, int) or isinstance(gpus_per_node, bool) or gpus_per_node < 0:
        raise AnsibleFilterError(
            "history_measure_records: gpus_per_node must be a count of GPUs (0: none), got %r"
            % (gpus_per_node,)
        )
    try:
        return measure_records(summary, nodes, str(run_id or ""), gpus_per_node or None)
    except HistoryError as error:
        raise AnsibleFilterError("history_measure_records: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"history_measure_records": history_measure_records}

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: history_training_records
short_description: The records a training run adds to each node's history
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - From what P(gpuops.training.training_log_info#module) read in a run's logs, the records for
    P(gpuops.training.node_history#module) - per node, each GPU's compute throughput (images per second of
    the rank's own computing, the figure stragglers are judged by), on device C(GPU <local rank>).
  - The key is the run's workload (model, images per optimizer step, input size, precision, device type), so a
    GPU is compared only with itself training the same.
  - Ranks that did not end with status C(ok), or whose records name no node or local rank, are left out, and so
    is every rank when no C(run_start) record says what the workload was.
options:
  _input:
    description: The registered result of P(gpuops.training.training_log_info#module), with its C(ranks).
    type: dict
    required: true
  run_id:
    description: The run the records come from.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Judge each GPU's throughput against its own history, and keep it
  gpuops.training.node_history:
    dir: /var/tmp/gpuops-runs/history
    records: "{{ training_metrics | gpuops.training.history_training_records(run_id='train-1') }}"
"""

RETURN = r"""
_value:
  description: One record per GPU of a rank that ended well, with its node, C(GPU <local rank>) and images/s.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.health.history import (
    HistoryError,
    training_records,
)


def history_training_records(metrics, run_id=""):
    try:
        return training_records(metrics, str(run_id or ""))
    except HistoryError as error:
        raise AnsibleFilterError("history_training_records: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"history_training_records": history_training_records}

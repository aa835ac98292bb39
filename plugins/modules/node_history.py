#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_history
short_description: Keep each node's health passes and measured figures, and judge a figure against the node's own median
description:
  - Keeps every record given in O(records) - a health pass, an nccl-tests bus bandwidth, a GPU's training
    throughput - in the node's own history, C(<dir>/<node>.jsonl) (JSON lines, schema C(gpuops.node-history/v1)),
    appended under a lock and trimmed to the newest O(keep) records. A record of a C(run_id) the node's history
    already holds for the same kind is not kept twice (a run verified again), and is not judged against itself.
  - Before keeping them, judges each record with a number against the same node's earlier records of the same
    kind (the same C(source), C(metric), C(key) and C(device)) - the median of the newest O(window) of them, once
    there are O(min_samples). A figure more than O(drop_percent) below that median is flagged (class
    C(monitor)), even when it is above the fixed floor the caller checks - a node that is getting worse, or a
    fleet that degrades together, stays above a floor judged against its peers.
  - The history lives on the controller (the runs directory), so the module runs there.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Judges the records and keeps none.
  diff_mode:
    support: none
    description: Records are only appended.
options:
  dir:
    description: The history directory, one file per node; created when missing.
    type: path
    required: true
  records:
    description:
      - What to judge and keep. Each has C(node), C(source) (V(node_health), V(nccl_tests) or V(training)),
        C(metric) (such as V(busbw_gbps) or V(images_per_s)), C(value) (a number, or null for a record kept
        without a figure, such as a health pass) and optionally C(key) (what makes two figures comparable - the
        test, its size, the nodes it ran on), C(device) (a GPU), C(run_id), C(time) (seconds since the epoch;
        now by default) and C(details).
    type: list
    elements: dict
    required: true
  drop_percent:
    description: How far below the node's own median, in percent (above 0 and below 100), a figure is flagged.
    type: float
    default: 15
  window:
    description: How many of the node's newest earlier figures of the same kind the median is taken over.
    type: int
    default: 10
  min_samples:
    description: How many earlier figures of the same kind a node needs before its figures are judged.
    type: int
    default: 3
  keep:
    description: How many records each node's file keeps (the newest).
    type: int
    default: 1000
  record:
    description: Keep the records after judging them; V(false) only judges.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Judge this pass's bus bandwidth per node against each node's history, and keep it
  gpuops.training.node_history:
    dir: "{{ playbook_dir }}/../runs/history"
    records:
      - node: gpu-node-3
        source: nccl_tests
        metric: busbw_gbps
        key: all_reduce_perf 1 node x 8 GPUs
        value: 182.4
        run_id: nccl-20261129T101500Z
  register: history

- name: Warn about the nodes below their own median
  ansible.builtin.debug:
    msg: "{{ history.flagged | map(attribute='reason') | list }}"
  when: history.flagged | length > 0
"""

RETURN = r"""
judged:
  description: One judgement per record with a number, in order.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node.
      type: str
    source:
      description: What measured it.
      type: str
    metric:
      description: What was measured.
      type: str
    key:
      description: What makes figures comparable.
      type: str
    device:
      description: The GPU, or empty.
      type: str
    value:
      description: The figure.
      type: float
    samples:
      description: How many earlier figures of the same kind the median was taken over.
      type: int
    median:
      description: Their median; null below O(min_samples).
      type: float
    below_median_percent:
      description: How far below the median the figure is (negative above it).
      type: float
    flagged:
      description: Whether it is more than O(drop_percent) below.
      type: bool
flagged:
  description: The flagged judgements, each also with C(class) (V(monitor)), C(check) (V(history)), C(reason) and C(remedy).
  returned: always
  type: list
  elements: dict
  sample:
    - node: gpu-node-3
      metric: busbw_gbps
      value: 150.2
      median: 196.0
      below_median_percent: 23.4
      class: monitor
      check: history
      reason: "gpu-node-3: bus bandwidth 150 GB/s (all_reduce_perf 1 node x 8 GPUs) is 23.4 % below this node's median
        of 196 GB/s over its last 8 results (more than 15 %)"
appended:
  description: How many records were kept (0 in check mode, with O(record=false), or for a run already kept).
  returned: always
  type: int
files:
  description: The node files appended to.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gpuops.training.plugins.module_utils.health.history import HistoryError, run
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module


def main():
    module = build_module(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "records": {"type": "list", "elements": "dict", "required": True},
            "drop_percent": {"type": "float", "default": 15.0},
            "window": {"type": "int", "default": 10},
            "min_samples": {"type": "int", "default": 3},
            "keep": {"type": "int", "default": 1000},
            "record": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = run(
            params["dir"],
            params["records"],
            drop_percent=params["drop_percent"],
            window=params["window"],
            min_samples=params["min_samples"],
            keep=params["keep"],
            record=params["record"],
            check_mode=module.check_mode,
        )
    except (HistoryError, OSError) as error:
        module.fail_json(msg="node_history: %s" % error)
    module.exit_json(changed=result["appended"] > 0, **result)


if __name__ == "__main__":
    main()

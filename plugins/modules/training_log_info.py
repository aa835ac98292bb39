#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: training_log_info
short_description: Read a training run's metrics from every rank's logs and judge the run
description:
  - Reads the JSON-lines metrics (schema C(gpuops.metrics/v1)) that the collection's trainer
    prints on every rank, wherever they are (per-rank files written by torchrun, a launcher's
    console log, or pod logs).
  - Reports per-rank progress and status, the loss per epoch averaged over ranks, throughput,
    checkpoints, resumes and restarts, and which rank failed first according to torchrun.
  - With O(expect), turns unmet expectations (a rank that never reported or did not finish,
    a loss that did not fall, no checkpoint, a locked-memory limit where RDMA needs none) into
    a failure whose message names the rank and shows its last lines.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
  - gpuops.training.log_sources
options:
  expect:
    description:
      - Expectations the run must meet; each one left out is not checked.
    type: dict
    default: {}
    suboptions:
      world_size:
        description:
          - Number of ranks that must have reported. Also turns on O(expect.all_ranks_finished).
        type: int
      all_ranks_finished:
        description:
          - Every rank that reported must have ended with status C(ok).
          - Defaults to V(true) when O(expect.world_size) is set.
        type: bool
      min_epochs:
        description:
          - Epochs every rank must have completed.
        type: int
      loss_decreases:
        description:
          - The loss averaged over ranks must be lower in the last epoch than in the first.
        type: bool
        default: false
      checkpoint:
        description:
          - At least one checkpoint must have been written.
        type: bool
        default: false
      memlock_unlimited:
        description:
          - Every rank must report an unlimited locked-memory limit (RLIMIT_MEMLOCK) in its C(run_start)
            record, as RDMA memory registration needs. The process's own limit is what counts - the node's
            configuration file or C(IPC_LOCK) alone do not say what a container gets.
          - A rank with a limit is named with it and the remedy.
        type: bool
        default: false
      memlock_min_bytes:
        description:
          - Every rank must report a locked-memory limit of at least this many bytes, or unlimited - for
            hosts that cannot give unlimited (a runtime without CAP_SYS_RESOURCE stops at the host's
            hard limit). Ignored when O(expect.memlock_unlimited) is set.
          - A rank below it is named with its limit and the remedy.
        type: int
  tail_lines:
    description:
      - How many of each rank's last non-metrics lines to keep, to show with a failure.
    type: int
    default: 20
"""

EXAMPLES = r"""
- name: Check that both ranks finished, the loss fell and a checkpoint was written
  gpuops.training.training_log_info:
    paths:
      - "{{ run_dir }}/logs/**/*.log"
    expect:
      world_size: 2
      loss_decreases: true
      checkpoint: true
  register: training

- name: Read the metrics of a PyTorchJob's pods
  gpuops.training.training_log_info:
    pod_logs: "{{ pod_logs.results | map(attribute='log') | list }}"

- name: Show the loss per epoch
  ansible.builtin.debug:
    msg: "{{ training.epochs | map(attribute='loss') | list }}"
"""

RETURN = r"""
ok:
  description: Whether every expectation in O(expect) held.
  returned: always
  type: bool
failures:
  description: One message per unmet expectation; a failed rank's message ends with its last lines.
  returned: always
  type: list
  elements: str
world_size:
  description: World size the ranks reported in their C(run_start) records.
  returned: always
  type: int
  sample: 2
ranks_reporting:
  description: Ranks that printed at least one metrics record.
  returned: always
  type: list
  elements: int
  sample: [0, 1]
ranks:
  description: One entry per rank.
  returned: always
  type: list
  elements: dict
  contains:
    rank: {description: The global rank., type: int, returned: always}
    host: {description: Host name the rank ran on (a pod's name on Kubernetes)., type: str, returned: always}
    node:
      description:
        - The machine the rank ran on, from its records - the Kubernetes node of its pod, or the host;
          null for records of trainers that predate it.
      type: str
      returned: always
    status:
      description:
        - C(ok) or C(error) from the rank's C(run_end) record, C(incomplete) when the rank
          started but never ended, C(unknown) when it never started.
      type: str
      returned: always
    error: {description: The error the rank reported., type: str, returned: always}
    attempt: {description: Highest torchrun restart attempt seen., type: int, returned: always}
    epochs_completed: {description: Epoch records seen., type: int, returned: always}
    last_step: {description: Global step of the last step record., type: int, returned: always}
    first_epoch_loss: {description: Mean loss of the first epoch., type: float, returned: always}
    last_epoch_loss: {description: Mean loss of the last epoch., type: float, returned: always}
    images_per_s: {description: Throughput of the last epoch on this rank., type: float, returned: always}
    uid: {description: User id the rank ran as (null when not reported)., type: int, returned: always}
    memlock_bytes:
      description: The rank's soft RLIMIT_MEMLOCK in bytes, C(-1) for unlimited, null when not reported.
      type: int
      returned: always
    last_lines: {description: Last non-metrics lines the rank printed., type: list, elements: str, returned: always}
epochs:
  description: Per epoch, the loss averaged over ranks and the throughput summed over ranks.
  returned: always
  type: list
  elements: dict
  sample: [{"epoch": 0, "ranks": 2, "loss": 1.62, "images_per_s": 7.9}]
steps:
  description:
    - The loss and throughput curves, one point per global step the ranks recorded (every
      C(--print-freq) steps and each epoch's last), averaged over the ranks that recorded it.
    - At most 2048 points; a longer run is thinned to every 2nd, 4th, ... step.
  returned: always
  type: list
  elements: dict
  sample: [{"step": 20, "ranks": 2, "loss": 1.71, "images_per_s_per_rank": 3.9}]
loss:
  description: First and last epoch loss, whether it fell, and the change in percent.
  returned: always
  type: dict
  sample: {"first": 1.62, "last": 0.91, "fell": true, "change_pct": -43.8, "finite": true}
memlock:
  description:
    - The locked-memory limits the ranks ran with - C(ranks_reporting), C(limited_ranks) (a limit other
      than unlimited), C(min_bytes) (the smallest such limit, null when none) and C(unlimited) (every rank
      reported unlimited).
  returned: always
  type: dict
  sample: {"ranks_reporting": [0, 1], "limited_ranks": [0, 1], "min_bytes": 8388608, "unlimited": false}
throughput:
  description: Images per second of the last epoch, summed over ranks.
  returned: always
  type: dict
  sample: {"images_per_s": 7.9, "ranks_counted": 2}
backend:
  description: Distributed backend the run used (C(nccl) or C(gloo)).
  returned: always
  type: str
  sample: gloo
checkpoints:
  description: Checkpoints written, in order.
  returned: always
  type: list
  elements: dict
resumes:
  description: Resumes from a checkpoint, one per rank and restart.
  returned: always
  type: list
  elements: dict
restarts:
  description: Highest torchrun restart attempt any rank reported.
  returned: always
  type: int
launcher_failures:
  description: Failures torchrun reported (rank, exitcode, host, and which was the root cause).
  returned: always
  type: list
  elements: dict
parse_warnings:
  description: Lines that looked like metrics but could not be read.
  returned: always
  type: list
  elements: str
"""


from ansible_collections.gpuops.training.plugins.module_utils.log_module import build_log_module, judge_logs
from ansible_collections.gpuops.training.plugins.module_utils.training_log import (
    check_expectations,
    parse_training_logs,
)

# Lines kept per rank to show with a failure: far more than a message can show.
MAX_TAIL_LINES = 100000


def main():
    module = build_log_module(
        {
            "expect": {
                "type": "dict",
                "default": {},
                "options": {
                    "world_size": {"type": "int"},
                    "all_ranks_finished": {"type": "bool"},
                    "min_epochs": {"type": "int"},
                    "loss_decreases": {"type": "bool", "default": False},
                    "checkpoint": {"type": "bool", "default": False},
                    "memlock_unlimited": {"type": "bool", "default": False},
                    "memlock_min_bytes": {"type": "int"},
                },
            },
            "tail_lines": {"type": "int", "default": 20},
        }
    )
    expect = {key: value for key, value in module.params["expect"].items() if value is not None}
    tail_lines = module.params["tail_lines"]
    if not 0 <= tail_lines <= MAX_TAIL_LINES:
        module.fail_json(msg="tail_lines must be between 0 and %d, got %d" % (MAX_TAIL_LINES, tail_lines))
    judge_logs(
        module,
        lambda sources: parse_training_logs(sources, tail_lines=tail_lines),
        lambda facts: check_expectations(facts, expect),
        "training run",
    )


if __name__ == "__main__":
    main()

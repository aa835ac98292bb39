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
  - Reports per rank the median and the peak of each memory quantity the trainer sampled (host
    resident set, the memory cgroup's usage and working set, the CUDA allocator's allocated and
    reserved bytes, the GPU device's used bytes as the driver sees them), where the peak happened
    (phase, epoch, step), and each epoch's minimum; on a CUDA run also the device's total memory.
  - Reports suspected memory leaks - a rank whose per-epoch minimum host resident set (RSS) or
    CUDA allocated memory grows faster than O(memory_leak_tolerance_mib) MiB per epoch - naming
    the rank, host or GPU memory, and the rate.
  - Reports per rank its step time split - the median over its C(step) records of the mean seconds per
    optimizer step spent in the whole step, waiting for data, computing and waiting in DDP's collectives
    (the C(timing) the trainer records) - and its compute throughput, images per optimizer step over the
    median compute time.
  - Names stragglers - ranks whose compute throughput is more than O(straggler_percent) below the median
    of all ranks' - with the log their records came from (C(logs/POD.log) names the pod). In synchronous
    DDP every rank's wall-clock step is the same, since the fast ranks wait in the collectives for the
    slow one, so only compute time tells a straggler apart.
  - With O(expect), turns unmet expectations (a rank that never reported or did not finish,
    a loss that did not fall, no checkpoint, a locked-memory limit where RDMA needs none, a
    suspected memory leak) into a failure whose message names the rank and shows its last lines.
  - A rank that torchrun reports killed by a signal (exit code C(-9)) is named as killed by SIGKILL, which the
    kernel's OOM killer sends when memory runs out, with the last memory sample its log holds and its phase;
    so are the ranks of the pods in O(container_kills) (exit code 137, C(OOMKilled)), with the pod.
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
      no_memory_leak:
        description:
          - No rank may show a suspected memory leak (see RV(memory_leaks)); each one is named with the
            rank, host or GPU memory, and its rate in MiB per epoch.
        type: bool
        default: false
  container_kills:
    description:
      - The containers a cluster launcher saw killed - the C(kills) of each pod M(gpuops.training.training_job_wait)
        returns in C(pods), which the training_job role keeps in
        C(training_job_result.container_kills) - each with C(pod), C(container), C(exit_code), C(reason),
        C(oom_killed), C(previous) (killed before a restart) and C(memory_limit).
      - The ranks whose records are in a killed pod's log (C(POD.log), C(POD.previous.log) for the container
        before a restart) or whose host is the pod are the first failure, each named with the pod, the kill and
        the last memory sample of that container's log and its phase; a kill no rank's log speaks for is named on
        its own. Used by O(expect.all_ranks_finished).
    type: list
    elements: dict
    default: []
  memory_leak_tolerance_mib:
    description:
      - Growth of a rank's per-epoch minimum host RSS or CUDA allocated memory, in MiB per epoch, above
        which it is reported as a suspected leak.
      - The growth is the least-squares slope of the per-epoch minima over the epochs after the first
        (which warms up the allocator and autograd buffers); it needs at least 3 of them, so a run of
        fewer than 4 epochs reports no leak.
      - A healthy run's per-epoch minimum moves by a few MiB from one epoch to the next (what the
        allocator keeps or gives back), well below the default.
    type: float
    default: 16
  straggler_percent:
    description:
      - A rank whose compute throughput (RV(ranks[].compute_images_per_s)) is more than this many percent
        below the median of all ranks' (itself included) is a straggler, reported in RV(stragglers).
      - V(0) turns the check off; otherwise it must be above 0 and below 100.
      - It needs at least 2 ranks whose step records carry C(timing); ranks without it (trainers that
        predate it) are left out, never flagged.
    type: float
    default: 20
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

- name: Read a run's memory and fail on a leak growing faster than 32 MiB per epoch
  gpuops.training.training_log_info:
    paths:
      - "{{ run_dir }}/logs/**/*.log"
    memory_leak_tolerance_mib: 32
    expect:
      no_memory_leak: true
  register: training_memory

- name: Show each rank's median and peak resident set, and the phase of the peak
  ansible.builtin.debug:
    msg: >-
      rank {{ item.rank }}: median {{ item.memory.quantities.host_rss.median_bytes | human_readable }},
      peak {{ item.memory.quantities.host_rss.peak_bytes | human_readable }}
      ({{ item.memory.quantities.host_rss.peak_phase }})
  loop: "{{ training_memory.ranks }}"
  when: item.memory.quantities.host_rss is defined

- name: Name the ranks that compute more than 15 percent slower than the others
  gpuops.training.training_log_info:
    paths:
      - "{{ run_dir }}/logs/*.log"
    straggler_percent: 15
  register: training_timing

- name: Show each straggler and the pod whose log it came from
  ansible.builtin.debug:
    msg: >-
      rank {{ item.rank }} ({{ item.source | basename | regex_replace('\\.log$', '') }}):
      {{ item.compute_images_per_s }} images/s of compute, {{ item.percent_below }} % below the median
      {{ item.peer_median }}
  loop: "{{ training_timing.stragglers }}"

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
    local_rank:
      description: The rank on its node (its GPU's index there), from its records; null when they carry none.
      type: int
      returned: always
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
    last_memory:
      description:
        - The rank's newest memory sample (by its record's time) - C(phase), C(epoch), C(step), C(time),
          C(attempt), C(source) (the log it came from) and C(memory) (the sample's keys, bytes or null); null
          when the rank recorded none. A failure message names it for a killed rank.
      type: dict
      returned: always
      sample:
        phase: checkpoint_write_before
        epoch: 1
        step: 16
        time: 1795322809.02
        attempt: 0
        source: /var/tmp/gpuops-runs/retinanet-20261122T050000Z/logs/retinanet-3f9a1c-0-x7k2p.log
        memory: {"rss_bytes": 1436549120, "rss_peak_bytes": 1502658560, "cgroup_usage_bytes": 4194304000,
                 "cgroup_working_set_bytes": 4089446400, "cgroup_limit_bytes": 4294967296,
                 "cuda_allocated_bytes": null, "cuda_reserved_bytes": null, "cuda_max_allocated_bytes": null,
                 "cuda_max_reserved_bytes": null, "device_used_bytes": null, "device_used_peak_bytes": null,
                 "device_total_bytes": null}
    last_memory_by_source:
      description: The newest memory sample of each log the rank's records came from (a pod's log and its previous one).
      type: dict
      returned: always
    memory:
      description:
        - The rank's memory, from the C(memory) samples of its C(step) records (phase C(train)) and its
          C(memory) events (phases C(start), C(loader_start), C(epoch_end), C(checkpoint_write_before),
          C(checkpoint_write_after), C(eval_after)); empty C(quantities) for a trainer that records none.
      type: dict
      returned: always
      contains:
        samples: {description: Samples read., type: int, returned: always}
        cgroup_limit_bytes:
          description: The smallest memory cgroup limit the samples reported, null for none (no cgroup, or no limit).
          type: int
          returned: always
        device_total_bytes:
          description:
            - The GPU's total memory as CUDA can allocate it (the trainer's C(device_total_bytes), C(cudaMemGetInfo)),
              the smallest the samples reported (a restart on a smaller GPU counts).
          type: int
          returned: when the rank's samples report it (a CUDA run of a trainer that records the device)
        quantities:
          description:
            - Per quantity the rank reported - C(host_rss) (the process's resident set; its peak also counts
              the high-water mark C(VmHWM)), C(cgroup_usage), C(cgroup_working_set) (usage less the inactive
              file cache, what a container limit has to hold), C(cuda_allocated) and C(cuda_reserved) (their
              peaks also count the allocator's own peaks, reset each epoch and evaluation), C(device_used) (the
              GPU as the driver sees it - the allocator's bytes, the CUDA context, NCCL's buffers and other
              processes on it; its peak also counts the trainer's C(device_used_peak_bytes)) - a dict with
              C(samples), C(median_bytes), C(peak_bytes), C(peak_phase), C(peak_epoch), C(peak_step) (where the
              peak was first seen; a high-water mark shows a spike at the first sample after it),
              C(epoch_min_bytes) (a list of C(epoch) and C(bytes), the C(start) sample left out) and
              C(growth_mib_per_epoch) (the slope leaks are judged on; null with fewer than 3 epochs after the
              first).
            - The cgroup's figures count every process in the container (other ranks and DataLoader workers
              included), and the device's every process on the GPU, so they are never judged as one rank's leak.
          type: dict
          returned: always
          sample:
            host_rss:
              samples: 42
              median_bytes: 1258291200
              peak_bytes: 1992294400
              peak_phase: checkpoint_write_after
              peak_epoch: 2
              peak_step: 12
              epoch_min_bytes: [{"epoch": 0, "bytes": 1216348160}, {"epoch": 1, "bytes": 1256194048}]
              growth_mib_per_epoch: 0.4
    timing:
      description:
        - The rank's step time split, the median over its C(step) records of each - C(step_s) (the whole
          optimizer step), C(data_s) (waiting for the DataLoader), C(compute_s) (forward, loss, backward and
          the optimizer step, without the waits in collectives), C(collective_s) (waiting in DDP's collectives,
          the gradient all-reduce and the buffer broadcast before forward) - in seconds, and C(records), how many step
          records had it.
        - Null for a rank whose records carry no timing (a trainer that predates it).
      type: dict
      returned: always
      sample: {"step_s": 0.412, "data_s": 0.003, "compute_s": 0.301, "collective_s": 0.104, "records": 40}
    images_per_step:
      description:
        - Images one optimizer step of the rank trains - the median of its step records' images/s times
          their step time, else batch size times gradient accumulation steps from its C(run_start) record.
      type: float
      returned: always
    compute_images_per_s:
      description:
        - The rank's compute throughput - RV(ranks[].images_per_step) over the median C(compute_s) - which
          stragglers are judged on; null without timing.
      type: float
      returned: always
    timing_source:
      description: The log of the rank's newest step record with timing; null without timing.
      type: str
      returned: always
    last_lines: {description: Last non-metrics lines the rank printed., type: list, elements: str, returned: always}
stragglers:
  description:
    - Ranks whose compute throughput is more than O(straggler_percent) below the median of all ranks', slowest
      first - C(rank), C(compute_images_per_s), C(peer_median) (the median of every rank's compute throughput,
      itself included), C(percent_below) and C(source) (the log the rank's timing came from; a Kubernetes
      launcher keeps each pod's log as C(logs/POD.log)).
    - Empty when O(straggler_percent) is 0 or fewer than 2 ranks recorded timing.
  returned: always
  type: list
  elements: dict
  sample: [{"rank": 5, "compute_images_per_s": 20.1, "peer_median": 31.4, "percent_below": 36.0,
            "source": "/var/tmp/gpuops-runs/retinanet-20261122T050000Z/logs/retinanet-3f9a1c-worker-1.log"}]
straggler_percent:
  description: The percentage the stragglers were judged with, O(straggler_percent).
  returned: always
  type: float
  sample: 20
memory_leaks:
  description:
    - Suspected memory leaks, one per rank and quantity - C(kind) (C(host) or C(gpu)), C(quantity) (C(host_rss)
      or C(cuda_allocated)), C(rate_mib_per_epoch), the C(epochs) fitted (first and last) and the per-epoch
      minimum at each (C(from_bytes), C(to_bytes)).
  returned: always
  type: list
  elements: dict
  sample: [{"rank": 1, "host": "node-a", "kind": "host", "quantity": "host_rss", "rate_mib_per_epoch": 64.2,
            "epochs": [1, 5], "from_bytes": 1300234240, "to_bytes": 1568669696}]
memory_leak_tolerance_mib:
  description: The tolerance the leaks were judged with, O(memory_leak_tolerance_mib).
  returned: always
  type: float
  sample: 16
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
workload:
  description:
    - What makes two runs' per-GPU throughput comparable, from the first C(run_start) record - the model, the images
      each rank trains per optimizer step, the input size, the precision and the device type; null without a
      C(run_start) record.
  returned: always
  type: str
  sample: retinanet_resnet50_fpn, 2 images x 4, 800-1333 px, amp bf16, cuda
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

import math

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
                    "no_memory_leak": {"type": "bool", "default": False},
                },
            },
            "container_kills": {"type": "list", "elements": "dict", "default": []},
            "memory_leak_tolerance_mib": {"type": "float", "default": 16},
            "straggler_percent": {"type": "float", "default": 20},
            "tail_lines": {"type": "int", "default": 20},
        }
    )
    kills = module.params["container_kills"]
    for index, kill in enumerate(kills):
        if not isinstance(kill.get("pod"), str) or not kill["pod"].strip():
            module.fail_json(
                msg="container_kills[%d] must name its pod (pod, container, exit_code, reason: the kills of "
                "training_job_wait's pods), got %r" % (index, kill)
            )
    expect = {key: value for key, value in module.params["expect"].items() if value is not None}
    tail_lines = module.params["tail_lines"]
    if not 0 <= tail_lines <= MAX_TAIL_LINES:
        module.fail_json(msg="tail_lines must be between 0 and %d, got %d" % (MAX_TAIL_LINES, tail_lines))
    tolerance = module.params["memory_leak_tolerance_mib"]
    if not (math.isfinite(tolerance) and tolerance >= 0):
        module.fail_json(
            msg="memory_leak_tolerance_mib must be a number of MiB per epoch of at least 0, got %s"
            % tolerance
        )
    straggler_percent = module.params["straggler_percent"]
    if not (straggler_percent == 0 or 0 < straggler_percent < 100):
        module.fail_json(
            msg="straggler_percent must be a number of percent above 0 and below 100, or 0 to turn the check "
            "off, got %s" % straggler_percent
        )
    judge_logs(
        module,
        lambda sources: parse_training_logs(
            sources, tail_lines=tail_lines, leak_tolerance_mib=tolerance, straggler_percent=straggler_percent
        ),
        lambda facts: check_expectations(facts, expect, kills),
        "training run",
    )


if __name__ == "__main__":
    main()

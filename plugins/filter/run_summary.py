# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: run_summary
short_description: Put a launched run and its log checks together into one summary
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Combines the record a launcher leaves (C(training_job_result)) with the registered results
    of M(gpuops.training.training_log_info) and M(gpuops.training.nccl_log_info) into the
    summary written to C(summary.json).
  - The C(verdict) is C(passed) only when no check failed and the launcher exited with 0.
  - Its C(memory) section has each rank's memory (median, peak and the phase of the peak), the memory
    request and limit for one container of the next run (request the median, limit the peak plus
    O(memory.buffer_percent)), and warnings - a rank whose peak came within O(memory.limit_margin_percent)
    of its cgroup limit (naming the phase), each suspected leak - which also appear in C(warnings); with
    O(memory.leak_fails) a suspected leak is a failure instead.
  - On a CUDA run whose trainer records the device's memory as the driver sees it (C(device_used_bytes),
    C(device_used_peak_bytes), C(device_total_bytes) - the CUDA context, NCCL's buffers and other processes on the
    GPU included), each rank's row has its GPU device peak, the device's total and the headroom between them
    (bytes and percent of the total), and a rank whose device peak came within O(memory.gpu_margin_percent) of the
    device's total is a warning naming the rank, its pod and node, the phase of the peak and how much of it
    PyTorch's allocator held; a failure instead with O(memory.gpu_margin_fails). Past 8 such ranks, one warning
    names them by node and the rank with the least headroom.
  - With O(memory.node_allocatable) the recommendation also states the pod's share of the node's RAM next to its
    share of the node's GPUs, and warns when the RAM share is the larger (the pod would strand GPUs).
  - Its C(stragglers) are the ranks M(gpuops.training.training_log_info) names as stragglers (compute throughput more
    than its C(straggler_percent) below the median of all ranks'), each placed with its C(pod) (from the name of the
    log its records came from, C(logs/POD.log), on a cluster launcher) and its C(node) (from the run record's
    C(pod_nodes), a mapping of pod names to node names, when present; else the node the rank recorded; on a local or
    SSH launch the rank's host). Each is a warning with the remedy, or a failure with O(stragglers_fail).
  - The recommendation is for the busiest host or pod; on a cluster launcher it comes from the pod's
    memory cgroup working set when the ranks report it, else from the ranks' resident sets summed plus
    C(/dev/shm) for the DataLoader workers (sized as the P(gpuops.training.shm_size#filter) filter does).
options:
  _input:
    description: The launcher's run record (run_id, run_dir, world_size, rc, timed_out, log_paths).
    type: dict
    required: true
  training:
    description: Registered result of M(gpuops.training.training_log_info).
    type: dict
    required: true
  nccl:
    description: Registered result of M(gpuops.training.nccl_log_info).
    type: dict
    required: true
  memory:
    description: How the memory section sizes the next run and what it warns about.
    type: dict
    default: {}
    suboptions:
      buffer_percent:
        description: Percent added to the peak for the recommended limit.
        type: float
        default: 10
      limit_margin_percent:
        description: Warn when a rank's peak came within this percent of its memory cgroup's limit.
        type: float
        default: 10
      leak_fails:
        description: A suspected memory leak fails the verdict instead of being a warning.
        type: bool
        default: false
      gpu_margin_percent:
        description:
          - Warn when a rank's GPU device peak came within this percent of the device's total memory (0 to below
            100; V(0) warns only for a device that was full).
        type: float
        default: 5
      gpu_margin_fails:
        description:
          - A GPU device peak within O(memory.gpu_margin_percent) of the device's total fails the verdict instead of
            being a warning.
        type: bool
        default: false
      loader:
        description:
          - The run's DataLoader, for the C(/dev/shm) part of a recommendation made from resident sets -
            C(workers) (per rank), C(batch_size) and C(sample_bytes) (one decoded sample). Left out, no
            C(/dev/shm) is added.
        type: dict
      node_allocatable:
        description:
          - The allocatable resources of the node the pod runs on, as its Node object writes them
            (C(memory) and C(nvidia.com/gpu), such as V(1056Gi) and V(8)), or a mapping of node names to them (the node of the
            recommended pod's ranks is taken).
          - The recommendation then states the pod's share of the node's memory (its recommended limit) next to its
            share of the node's GPUs (one per rank on a CUDA run, none on a CPU run), and a warning says how many GPUs
            pods of that size would strand when the RAM share is the larger.
        type: dict
      gpu_resource:
        description: The node's resource name of the GPUs.
        type: str
        default: nvidia.com/gpu
  stragglers_fail:
    description: A straggler fails the verdict instead of being a warning.
    type: bool
    default: false
  history:
    description:
      - The registered result of P(gpuops.training.node_history#module) for the run's GPUs (see
        P(gpuops.training.history_training_records#filter)). Each GPU it flagged is a warning naming the GPU, its
        node and how far below its own median it ran, and leads the report among what differs.
      - Empty or omitted, the summary's C(history) is null.
    type: dict
"""

EXAMPLES = r"""
- name: Build the summary of a verified run
  ansible.builtin.set_fact:
    summary: "{{ training_job_result | gpuops.training.run_summary(training, nccl) }}"

- name: The same, with a 20 percent memory buffer, leaks failing, and the loader's /dev/shm
  ansible.builtin.set_fact:
    summary: >-
      {{ training_job_result | gpuops.training.run_summary(training, nccl, memory={
           'buffer_percent': 20, 'leak_fails': true,
           'loader': {'workers': 4, 'batch_size': 2, 'sample_bytes': 7680000}}) }}

- name: The same, a straggler failing the verdict
  ansible.builtin.set_fact:
    summary: "{{ training_job_result | gpuops.training.run_summary(training, nccl, stragglers_fail=true) }}"

- name: The same, with each GPU judged against its own history
  ansible.builtin.set_fact:
    summary: "{{ training_job_result | gpuops.training.run_summary(training, nccl, history=gpu_history) }}"

- name: Show the recommendation
  ansible.builtin.debug:
    msg: "{{ summary.memory.recommendation.statement }}"
"""

RETURN = r"""
_value:
  description:
    - The summary (schema C(gpuops.run-summary/v1)) with C(verdict), C(failures), C(warnings), per-rank rows,
      loss, throughput, checkpoints, an NCCL statement and C(memory).
    - C(memory) has C(ranks) (per rank C(rss_median_bytes), C(rss_peak_bytes), C(rss_peak_phase),
      C(rss_peak_epoch), C(rss_peak_step), the cgroup working set's and the GPU allocator's figures, the GPU
      device's - C(device_used_median_bytes), C(device_peak_bytes), C(device_peak_phase), C(device_peak_epoch),
      C(device_peak_step), C(device_total_bytes), C(device_headroom_bytes) (the total less the peak) and
      C(device_headroom_percent) (of the total), null on a CPU run - its C(pod) and C(node), and the C(request)
      and C(limit) its own resident set asks for), C(gpu_within_margin) (the ranks whose GPU device peak came
      within C(gpu_margin_percent) of the device's total), C(recommendation) (C(basis), C(host), C(ranks),
      C(median_bytes), C(peak_bytes), C(shm_bytes), C(request), C(limit), C(qos), C(resources), with
      O(memory.node_allocatable) C(node) and C(node_share) (C(memory_share), C(gpu_share), C(fair_memory),
      C(pods_per_node), C(stranded_gpus), C(strands_gpus), C(statement)), and a C(statement); null when no
      rank reported memory), C(leaks) and C(warnings).
    - C(stragglers) has per straggler C(rank), C(compute_images_per_s), C(peer_median), C(percent_below), C(source)
      (its log), C(pod), C(node), C(host) and a C(statement); C(straggler_percent) is the threshold it was judged
      with, C(stragglers_fail) whether it fails the verdict, C(straggler_remedy) what to check on its node. Each rank
      row has its C(timing) (median seconds per step - C(step_s), C(data_s), C(compute_s), C(collective_s)) and
      C(compute_images_per_s).
    - C(history) (null without O(history)) has C(gpus_judged), C(gpus_with_history) (those with enough earlier
      results to be judged), C(files) (the nodes' history files written) and C(flagged), per GPU C(node),
      C(device), C(key) (the workload), C(value) (images/s), C(median), C(below_median_percent), C(samples),
      C(reason), C(remedy) and the C(rank) that ran on it.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.quantities import QuantityError, parse_quantity
from ansible_collections.gpuops.training.plugins.module_utils.run_report import build_run_summary


def run_summary(run, training, nccl, memory=None, stragglers_fail=False, history=None):
    for name, value in (
        ("the input", run),
        ("training", training),
        ("nccl", nccl),
        ("memory", memory or {}),
        ("history", history or {}),
    ):
        if not isinstance(value, dict):
            raise AnsibleFilterError("run_summary: %s must be a dict, got %s" % (name, type(value).__name__))
    memory = _memory_options(memory or {})
    fail = _bool_option("stragglers_fail", stragglers_fail)
    try:
        return build_run_summary(
            run, training, nccl, memory, stragglers_fail=bool(fail), history=history or None
        )
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as error:
        # A field of another type than the launcher's record or the modules' results have.
        raise AnsibleFilterError(
            "run_summary: the input, training and nccl must be the launcher's run record and the "
            "registered results of training_log_info and nccl_log_info; a field has another shape: %s: %s"
            % (type(error).__name__, error)
        ) from error


def _memory_options(memory):
    """The memory options, checked: each message names the option and what it takes."""
    unknown = sorted(set(memory) - set(MEMORY_OPTIONS))
    if unknown:
        raise AnsibleFilterError(
            "run_summary: memory takes %s, got %s" % (", ".join(MEMORY_OPTIONS), ", ".join(map(str, unknown)))
        )
    options = {}
    for name in ("buffer_percent", "limit_margin_percent", "gpu_margin_percent"):
        value = memory.get(name)
        if value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int past any float
            number = float("nan")
        if isinstance(value, bool) or not (0 <= number < 100 or (name == "buffer_percent" and number >= 0)):
            raise AnsibleFilterError(
                "run_summary: memory.%s must be a number of percent%s, got %r"
                % (name, " of at least 0" if name == "buffer_percent" else " from 0 to below 100", value)
            )
        options[name] = number
    for name in ("leak_fails", "gpu_margin_fails"):
        value = _bool_option("memory.%s" % name, memory.get(name))
        if value is not None:
            options[name] = value
    loader = memory.get("loader")
    if loader is not None:
        if not isinstance(loader, dict):
            raise AnsibleFilterError(
                "run_summary: memory.loader must be a dict with workers, batch_size and sample_bytes, got %r"
                % (loader,)
            )
        options["loader"] = loader
    gpu_resource = memory.get("gpu_resource")
    if gpu_resource is not None:
        if not isinstance(gpu_resource, str) or not gpu_resource.strip():
            raise AnsibleFilterError(
                "run_summary: memory.gpu_resource must be a resource name such as nvidia.com/gpu, got %r"
                % (gpu_resource,)
            )
        options["gpu_resource"] = gpu_resource.strip()
    allocatable = memory.get("node_allocatable")
    if allocatable:
        options["node_allocatable"] = _node_allocatable(
            allocatable, options.get("gpu_resource") or "nvidia.com/gpu"
        )
    return options


def _bool_option(name, value):
    """True, false (booleans or their usual spellings), or None for None."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text not in ("true", "false", "yes", "no", "1", "0"):
        raise AnsibleFilterError("run_summary: %s must be true or false, got %r" % (name, value))
    return text in ("true", "yes", "1")


def _node_allocatable(allocatable, gpu_resource):
    """The node's allocatable resources, or a mapping of node names to them, checked."""
    expected = (
        "a node's allocatable resources such as {'memory': '1056Gi', '%s': 8}, or a mapping of node names to them"
        % gpu_resource
    )
    if not isinstance(allocatable, dict):
        raise AnsibleFilterError(
            "run_summary: memory.node_allocatable must be %s, got %r" % (expected, allocatable)
        )
    nodes = {None: allocatable} if "memory" in allocatable else allocatable
    for node, resources in nodes.items():
        what = "memory.node_allocatable" + ("" if node is None else "[%r]" % (node,))
        if not isinstance(resources, dict) or "memory" not in resources:
            raise AnsibleFilterError("run_summary: %s must be %s, got %r" % (what, expected, resources))
        try:
            parse_quantity(resources["memory"], what + ".memory")
        except QuantityError as error:
            raise AnsibleFilterError("run_summary: %s" % error) from error
        count = resources.get(gpu_resource, 0)
        if isinstance(count, bool) or not (
            (isinstance(count, int) and count >= 0) or (isinstance(count, str) and count.strip().isdigit())
        ):
            raise AnsibleFilterError(
                "run_summary: %s[%r] must be a whole number of GPUs, got %r" % (what, gpu_resource, count)
            )
    return allocatable


MEMORY_OPTIONS = (
    "buffer_percent",
    "limit_margin_percent",
    "leak_fails",
    "loader",
    "node_allocatable",
    "gpu_resource",
    "gpu_margin_percent",
    "gpu_margin_fails",
)


class FilterModule:
    def filters(self):
        return {"run_summary": run_summary}

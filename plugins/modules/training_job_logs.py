#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: training_job_logs
short_description: Stream every pod's log of a training run to files, never through Ansible variables
description:
  - Lists the pods O(pod_selector) finds in one call and streams each one's log to C(<dest>/<pod>.log), with at
    most O(parallel) reads at once. A restarted pod's log of the container before its last restart goes to
    C(<dest>/<pod>.previous.log). The result carries paths, sizes and a status per pod, never the text, so a
    fleet of 10 MB logs costs the controller a buffer per read rather than the logs in memory.
  - With O(mode=early), while the run goes, each started pod's new lines are appended to
    C(<dest>/early/<pod>.log); a read asks only for the lines since the last one saved, so a window costs what
    the ranks printed since the last window. RV(all_past_init) says when every expected pod's copy shows the
    trainer's first step, after which the copies hold every rank's NCCL init.
  - With O(mode=final) the log read now is joined, as it streams, to the pod's early copy (the node may have
    rotated the head away on a run of days); the early copy goes in front without the lines both hold, or with
    a line saying what was rotated away between them. A pod deleted by now keeps its early copy.
  - A pod whose log cannot be read (deleted, refused by the API server, no answer within O(timeout)) is named in
    RV(unreadable) with the reason; the other pods are still collected.
  - The nodes the pods ran on are read in one list call, for their allocatable resources.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.kubernetes
attributes:
  check_mode:
    support: full
    description: In check mode the pods and nodes are read and nothing is written.
  diff_mode:
    support: none
    description: Logs are not shown as a diff.
options:
  namespace:
    description: Namespace of the pods.
    type: str
    required: true
  pod_selector:
    description: Label selector of the run's pods, for example V(gpuops.training/run-id=retinanet-20261122T050000Z).
    type: str
    required: true
  dest:
    description: The run's log directory, C(<run dir>/logs); created when missing.
    type: path
    required: true
  mode:
    description: V(final) reads every log whole and joins it to its early copy; V(early) appends new lines to the early copies.
    type: str
    choices: [early, final]
    default: final
  parallel:
    description: Logs read at once. Each read holds one buffer of 1 MiB and one connection to the API server.
    type: int
    default: 8
  timeout:
    description: Seconds one read may wait for the API server to answer (connect and each chunk).
    type: int
    default: 120
  container:
    description: The container whose log is read; each pod's first container when left out.
    type: str
  expected_pods:
    description: With O(mode=early), the pods the run should have; RV(all_past_init) needs that many copies.
    type: int
    default: 0
requirements:
  - kubernetes (the Python client)
seealso:
  - module: gpuops.training.training_job_wait
  - module: gpuops.training.training_log_info
  - module: gpuops.training.nccl_log_info
"""

EXAMPLES = r"""
- name: Copy the first minutes of every rank's log while the run goes
  gpuops.training.training_job_logs:
    namespace: training
    pod_selector: gpuops.training/run-id=retinanet-20261122T050000Z
    dest: "{{ run_dir }}/logs"
    mode: early
    expected_pods: 16
  register: early

- name: Read every pod's log into the run directory, joined to its early copy
  gpuops.training.training_job_logs:
    namespace: training
    pod_selector: gpuops.training/run-id=retinanet-20261122T050000Z
    dest: "{{ run_dir }}/logs"
    parallel: 16
  register: logs

- name: Name the pods whose logs could not be read
  ansible.builtin.debug:
    msg: "{{ logs.unreadable | map(attribute='pod') | list }}"
"""

RETURN = r"""
pods:
  description:
    - One entry per pod (and per early copy of a pod gone by now) - C(name), C(node), C(phase), C(container),
      C(log) (the file written, or null), C(bytes), C(source) (V(final), V(early), V(early+final) or
      V(early+gap+final)), C(previous_log) and C(previous_bytes), C(status) (V(ok), V(partial) - part of what
      the pod had could not be read, see C(reason) - or V(unreadable)), C(reason) and C(changed).
    - With O(mode=early), C(name), C(node), C(log), C(bytes), C(appended), C(past_init), C(status) and C(reason)
      of each started pod.
  returned: always
  type: list
  elements: dict
unreadable:
  description:
    - The pods whose log (or part of it) could not be read, each with C(pod), C(node), C(status) (V(unreadable), or
      V(partial) when some of it was kept) and C(reason).
  returned: always
  type: list
  elements: dict
  sample: [{pod: retinanet-worker-3, node: gpu-07, status: unreadable, reason: "the pod or its log is gone (404 Not Found)"}]
pod_nodes:
  description: The node of every pod, by pod name.
  returned: always
  type: dict
node_allocatable:
  description: C(status.allocatable) of every node the pods ran on, by node name; empty without the right to list nodes.
  returned: always
  type: dict
bytes:
  description: Bytes in the files this call wrote or appended.
  returned: always
  type: int
all_past_init:
  description: With O(mode=early), whether O(expected_pods) copies (at least one) all show the trainer's first step.
  returned: always
  type: bool
seconds:
  description: Seconds the call took.
  returned: always
  type: float
"""

from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    build_kubernetes_module,
    connect,
)
from ansible_collections.gpuops.training.plugins.module_utils.pod_log_collect import run_collection


def main():
    module = build_kubernetes_module(
        {
            "namespace": {"type": "str", "required": True},
            "pod_selector": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "mode": {"type": "str", "choices": ["early", "final"], "default": "final"},
            "parallel": {"type": "int", "default": 8},
            "timeout": {"type": "int", "default": 120},
            "container": {"type": "str"},
            "expected_pods": {"type": "int", "default": 0},
        }
    )
    run_collection(module, connect)


if __name__ == "__main__":
    main()

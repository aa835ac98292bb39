#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_health_jobs
short_description: Run node_health_info on Kubernetes nodes, one privileged Job per node, and read each result
description:
  - Creates in O(namespace) one Job per node to check - the nodes named in O(nodes), else those O(node_selector)
    finds - waits for them at most O(timeout) seconds, reads each pod's log and deletes the Jobs and their pods.
  - Each Job's pod is bound to its node with C(nodeName) (no scheduler, so no request has to fit) and tolerates
    every taint, so a cordoned or quarantined node is checked too. It runs privileged, in the host's PID
    namespace, with the host's C(/dev) read-only (the GPUs' device nodes, C(/dev/kmsg) for C(dmesg)) and, where
    the checks need them, the host's C(/sys) read-only at C(/host/sys) (O(checks) C(infiniband)) and C(/var/log)
    and C(/etc/machine-id) read-only (C(kernel_log) - C(journalctl -k -b) reads the host's persistent journal,
    else C(dmesg) the kernel's ring). It sets C(NVIDIA_VISIBLE_DEVICES=all) and
    C(NVIDIA_DRIVER_CAPABILITIES=utility), so the NVIDIA container runtime mounts C(nvidia-smi) and the driver's
    libraries into it (name the runtime with O(runtime_class_name) where it is not the default).
  - The container runs the collection's own module, C(python3 -m
    ansible_collections.gpuops.training.plugins.modules.node_health_info '<arguments as JSON>'), with
    C(PYTHONPATH=)O(collections_path), from O(image) - an image with Python, ansible-core and this collection,
    such as the execution environment C(execution-environment.yml) builds. Its one JSON line on stdout, the pod's
    log, is the node's P(gpuops.training.node_health_info#module) result.
  - A node without a result says why in its C(error) - not Ready (no Job is created there), the API server
    refused its Job, the pod did not start or end within O(timeout) (with its phase and waiting reason, such as
    C(ImagePullBackOff)), node_health_info failed, or the log holds no result. It is never a healthy node.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.kubernetes
attributes:
  check_mode:
    support: full
    description:
      - The Jobs run in check mode too - they only read the nodes and are deleted once read - so that check mode
        can say what the results would lead to. The module reports no change.
  diff_mode:
    support: none
    description: The Jobs are removed afterwards; there is nothing to show.
options:
  run_id:
    description:
      - The health pass; its Jobs and pods carry the label C(gpuops.training/health-run=<run_id>), so a label value
        (at most 63 letters, digits, C(-), C(_) or C(.)).
    type: str
    required: true
  namespace:
    description:
      - Namespace of the Jobs; it must exist and admit privileged pods with host paths (Pod Security level
        C(privileged); on OpenShift the C(privileged) SCC for O(service_account)).
    type: str
    required: true
  image:
    description: Image with Python, ansible-core and this collection (the collection's module runtime).
    type: str
    required: true
  image_pull_policy:
    description: When the nodes pull O(image).
    type: str
    choices: [Always, IfNotPresent, Never]
    default: IfNotPresent
  image_pull_secrets:
    description: Names of C(kubernetes.io/dockerconfigjson) Secrets in O(namespace) to pull O(image) with.
    type: list
    elements: str
    default: []
  nodes:
    description: The nodes to check, by name; each must exist. When empty, O(node_selector) chooses.
    type: list
    elements: str
    default: []
  node_selector:
    description: Label selector of the nodes to check when O(nodes) is empty; empty checks every node.
    type: str
    default: ""
  checks:
    description: node_health_info's checks to run on each node.
    type: list
    elements: str
    choices: [nvidia_smi, kernel_log, infiniband]
    default: [nvidia_smi, kernel_log, infiniband]
  expected_gpus:
    description: GPUs every node has (node_health_info's O(gpuops.training.node_health_info#module:expected_gpus)); V(0) does not check the count.
    type: int
    default: 0
  expected_ib_rate_gbps:
    description: Rate in Gb/s every InfiniBand or RoCE port should run at; V(0) does not check it.
    type: float
    default: 0
  python:
    description: The Python of O(image) that has ansible-core.
    type: str
    default: python3
  collections_path:
    description: Where O(image) holds C(ansible_collections/gpuops/training) (the execution environment's default).
    type: str
    default: /usr/share/ansible/collections
  service_account:
    description: ServiceAccount of the pods; empty for the namespace's default. The pods get no API token.
    type: str
    default: ""
  runtime_class_name:
    description: RuntimeClass of the pods, such as V(nvidia) where the NVIDIA runtime is not the default one.
    type: str
    default: ""
  cpu:
    description: CPU each pod requests.
    type: str
    default: 100m
  memory:
    description: Memory each pod requests, and its limit.
    type: str
    default: 512Mi
  pod_annotations:
    description: Annotations of every pod.
    type: dict
    default: {}
  timeout:
    description:
      - Seconds to wait for every Job to end; a Job still going then is reported with its pod's state. Also each
        Job's C(activeDeadlineSeconds).
    type: int
    default: 600
  poll_interval:
    description: Seconds between two looks at the Jobs.
    type: int
    default: 2
  keep_jobs:
    description: Keep the Jobs and their pods (for their logs and events) instead of deleting them; the module then reports a change.
    type: bool
    default: false
requirements:
  - kubernetes (the Python client)
notes:
  - The controller's account needs to list or get nodes, get the namespace, and create, list and delete Jobs,
    list pods and read their logs in O(namespace).
seealso:
  - module: gpuops.training.node_health_info
  - module: gpuops.training.node_health_quarantine
  - module: gpuops.training.node_health_report
"""

EXAMPLES = r"""
- name: Check every GPU node of the cluster
  gpuops.training.node_health_jobs:
    run_id: health-20261201T060000Z
    namespace: gpuops-node-health
    image: registry.example.com/ml/gpuops-training-ee:0.1.0
    node_selector: nvidia.com/gpu.present=true
    expected_gpus: 8
    expected_ib_rate_gbps: 400
  register: health

- name: Name the nodes that could not be checked
  ansible.builtin.debug:
    msg: "{{ health.nodes | selectattr('result', 'none') | map(attribute='error') | list }}"
"""

RETURN = r"""
nodes:
  description:
    - One entry per node, by name - C(node), C(result) (node_health_info's result, or null), C(error) (why there
      is no result, or null), C(job) and C(pod).
  returned: always
  type: list
  elements: dict
  sample:
    - node: gpu-07
      result: {verdict: reboot, summary: "reboot: 1 reboot; checked nvidia_smi, kernel_log, infiniband", findings: []}
      error: null
      job: health-gpu-07-1a2b3c4d
      pod: health-gpu-07-1a2b3c4d-x7k2p
unchecked:
  description: The nodes without a result.
  returned: always
  type: list
  elements: str
jobs:
  description: The Jobs created (deleted again unless O(keep_jobs)).
  returned: always
  type: list
  elements: str
msg:
  description: How many nodes were checked, and each node without a result with why.
  returned: always
  type: str
"""

from ansible_collections.gpuops.training.plugins.module_utils.health.probe import run_module
from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    build_kubernetes_module,
    connect,
)


def main():
    module = build_kubernetes_module(
        {
            "run_id": {"type": "str", "required": True},
            "namespace": {"type": "str", "required": True},
            "image": {"type": "str", "required": True},
            "image_pull_policy": {
                "type": "str",
                "choices": ["Always", "IfNotPresent", "Never"],
                "default": "IfNotPresent",
            },
            # Names of Secrets, never their contents.
            "image_pull_secrets": {"type": "list", "elements": "str", "default": [], "no_log": False},
            "nodes": {"type": "list", "elements": "str", "default": []},
            "node_selector": {"type": "str", "default": ""},
            "checks": {
                "type": "list",
                "elements": "str",
                "choices": ["nvidia_smi", "kernel_log", "infiniband"],
                "default": ["nvidia_smi", "kernel_log", "infiniband"],
            },
            "expected_gpus": {"type": "int", "default": 0},
            "expected_ib_rate_gbps": {"type": "float", "default": 0},
            "python": {"type": "str", "default": "python3"},
            "collections_path": {"type": "str", "default": "/usr/share/ansible/collections"},
            "service_account": {"type": "str", "default": ""},
            "runtime_class_name": {"type": "str", "default": ""},
            "cpu": {"type": "str", "default": "100m"},
            "memory": {"type": "str", "default": "512Mi"},
            "pod_annotations": {"type": "dict", "default": {}},
            "timeout": {"type": "int", "default": 600},
            "poll_interval": {"type": "int", "default": 2},
            "keep_jobs": {"type": "bool", "default": False},
        }
    )
    run_module(module, connect)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_health_info
short_description: Judge a GPU node's health from nvidia-smi, the kernel log and its InfiniBand ports
description:
  - Reads, without changing anything, the signals that say whether a GPU node should keep
    running training jobs, and classes each problem found as C(isolate) (take the node or GPU
    out of scheduling; it needs a person or an RMA), C(reboot) (a GPU reset or node reboot is
    expected to clear it) or C(monitor) (keep it in service and watch).
  - C(nvidia_smi) check, from C(nvidia-smi -q -x) - uncorrectable ECC errors, row remapping
    pending or failed, retired pages pending, a PCIe link narrower than it can be (or at a lower
    generation while busy), hardware clock slowdowns, and fewer GPUs than O(expected_gpus).
    Every report format from the r510 to the r595 driver branch is read. nvidia-smi runs under
    C(timeout 120) when C(timeout) is installed; one that hangs (a GPU the driver is stuck on) is a
    C(reboot) finding, one that fails (no driver) an C(isolate) finding.
  - C(kernel_log) check, from C(journalctl -k -b) (else C(dmesg)) - NVIDIA Xid and NVSwitch SXid
    events, each code classed per NVIDIA's Xid catalogue.
  - C(infiniband) check, from C(<sysfs_root>/class/infiniband/*/ports/*) - a port not C(ACTIVE) or
    not C(LinkUp), a rate below O(expected_ib_rate_gbps), and link error counters
    (C(link_downed), C(link_error_recovery), C(symbol_error) and others) above their thresholds.
  - With O(paths), saved outputs are judged instead of the node - the kind of each file is read
    from its text, whatever its name, so the reports and logs collected from a failed node can be
    judged anywhere. The ports are read live only, so C(infiniband) does not run then.
  - A check that could not run (its tool not installed, a log not readable, no saved file of its
    kind) is listed in RV(not_run) with the reason; it is never counted as a pass.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
options:
  paths:
    description:
      - Saved outputs to judge instead of the node - C(nvidia-smi -q -x) reports and kernel logs
        (C(dmesg) in any time format, C(journalctl -k), syslog). A directory means every file
        directly in it.
      - Files of another kind are listed in RV(sources) with kind C(unknown) and not judged.
    type: list
    elements: path
  expected_gpus:
    description:
      - GPUs the node has; fewer seen by the driver is an C(isolate) finding. Not checked when left out.
    type: int
  expected_ib_rate_gbps:
    description:
      - Rate in Gb/s every InfiniBand or RoCE port should run at (for example C(400) for NDR).
        A lower rate is a C(monitor) finding, below half of it an C(isolate) one; no port at all
        is an C(isolate) finding. Not checked when left out.
    type: float
  sysfs_root:
    description:
      - Where sysfs is mounted; the ports are read under C(class/infiniband) in it.
    type: path
    default: /sys
  checks:
    description:
      - The checks to run.
    type: list
    elements: str
    choices: [nvidia_smi, kernel_log, infiniband]
    default: [nvidia_smi, kernel_log, infiniband]
notes:
  - The module never changes anything; it reports C(changed=false).
  - Reading the kernel log may need root (C(kernel.dmesg_restrict)); run with C(become) or the
    check is listed in RV(not_run).
seealso:
  - module: gpuops.training.node_preflight_info
"""

EXAMPLES = r"""
- name: Judge this node against its expected GPUs and NDR links
  gpuops.training.node_health_info:
    expected_gpus: 8
    expected_ib_rate_gbps: 400
  become: true
  register: health

- name: Cordon the node when it must be isolated
  kubernetes.core.k8s_drain:
    name: "{{ inventory_hostname }}"
    state: cordon
  delegate_to: localhost
  when: health.verdict == 'isolate'

- name: Judge the reports and logs collected from a failed node
  gpuops.training.node_health_info:
    paths:
      - "{{ collected_dir }}/gpu-node-17"
    expected_gpus: 8
  delegate_to: localhost
  register: saved

- name: Say what to do
  ansible.builtin.debug:
    msg: "{{ saved.summary }}: {{ saved.findings | map(attribute='remedy') | list }}"
"""

RETURN = r"""
verdict:
  description: >-
    C(healthy) when nothing was found, else the worst class found - C(isolate), then C(reboot),
    then C(monitor). Read it with RV(not_run) - checks that did not run found nothing.
  returned: always
  type: str
  sample: reboot
summary:
  description: One line with the verdict, the number of findings per class, the checks run and those not run.
  returned: always
  type: str
  sample: "reboot: 1 reboot; checked nvidia_smi, kernel_log, infiniband"
complete:
  description: Whether every check asked for ran (RV(not_run) is empty).
  returned: always
  type: bool
findings:
  description: >-
    One per problem - device (the GPU, port, switch or C(node)), check, class (C(isolate),
    C(reboot) or C(monitor)), reason and remedy.
  returned: always
  type: list
  elements: dict
not_run:
  description: The checks that did not run, each with check and reason.
  returned: always
  type: list
  elements: dict
gpus:
  description: >-
    The GPUs of the nvidia-smi reports - index, PCI address, product name, uuid, driver, ECC
    counters, retired pages, remapped rows, PCIe link, clock reasons - with the source read.
  returned: always
  type: list
  elements: dict
ib_ports:
  description: >-
    The InfiniBand and RoCE ports - device, port, link_layer, state, phys_state, rate, rate_gbps
    and counters (None where sysfs gives no value, as on a device without a PMA).
  returned: always
  type: list
  elements: dict
xid_events:
  description: The Xid and SXid lines of the kernel logs - line, kind, device, code, text and source.
  returned: always
  type: list
  elements: dict
sources:
  description: What was read - path (or command) and kind (C(nvidia_smi_xml), C(kernel_log), C(sysfs), C(unknown)).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.gpuops.training.plugins.module_utils.health.node import HealthInputError, judge_node
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module


def main():
    module = build_module(
        argument_spec={
            "paths": {"type": "list", "elements": "path"},
            "expected_gpus": {"type": "int"},
            "expected_ib_rate_gbps": {"type": "float"},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "checks": {
                "type": "list",
                "elements": "str",
                "choices": ["nvidia_smi", "kernel_log", "infiniband"],
                "default": ["nvidia_smi", "kernel_log", "infiniband"],
            },
        },
        supports_check_mode=True,
    )
    try:
        result = judge_node(module.params, module.get_bin_path, module.run_command)
    except HealthInputError as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

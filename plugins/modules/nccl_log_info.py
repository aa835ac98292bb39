#!/usr/bin/python
# Copyright: gpuops.training contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_log_info
short_description: Read NCCL debug output from every rank and report how the ranks connected
description:
  - Reads logs written with C(NCCL_DEBUG=INFO) and reports the NCCL and CUDA versions, every
    communicator's rank, size, device and whether it reached C(Init COMPLETE), the network
    transport (C(IB), C(Socket) or a net C(Plugin) such as aws-ofi-nccl), the InfiniBand or
    RoCE devices, GPUDirect RDMA, the intra-node paths, and every WARN line.
  - On a run that did not use NCCL (for example gloo on CPU) it says so plainly with
    RV(nccl_used=false) instead of reporting success.
  - With O(expect), unmet expectations (a rank that never initialised, a TCP fallback when
    InfiniBand was expected, no GPUDirect RDMA) become a failure with a clear message.
version_added: 0.1.0
author:
  - gpuops.training contributors
extends_documentation_fragment:
  - gpuops.training.log_sources
options:
  expect:
    description:
      - Expectations the NCCL output must meet; each one left out is not checked.
    type: dict
    default: {}
    suboptions:
      nccl_used:
        description:
          - NCCL output must be present at all.
        type: bool
        default: false
      nranks:
        description:
          - Size of the largest communicator, and every rank below it must reach C(Init COMPLETE).
        type: int
      transport:
        description:
          - Network transport the ranks must have used.
        type: str
        choices: [IB, Socket, Plugin]
      gdr:
        description:
          - GPUDirect RDMA must appear on the network channel lines.
        type: bool
        default: false
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Check that all 16 ranks initialised over InfiniBand with GPUDirect RDMA
  gpuops.training.nccl_log_info:
    paths:
      - "{{ run_dir }}/logs/**/*.log"
    expect:
      nccl_used: true
      nranks: 16
      transport: IB
      gdr: true
  register: nccl

- name: Say which transport a pod used
  gpuops.training.nccl_log_info:
    pod_logs: "{{ master_log }}"
  register: nccl
"""

RETURN = r"""
ok:
  description: Whether every expectation in O(expect) held.
  returned: always
  type: bool
failures:
  description: One message per unmet expectation.
  returned: always
  type: list
  elements: str
nccl_used:
  description: Whether any NCCL line was found.
  returned: always
  type: bool
nccl_version:
  description: NCCL version from the C(NCCL version) line.
  returned: always
  type: str
  sample: 2.21.5
cuda_version:
  description: CUDA version NCCL was built for (the C(+cudaX.Y) suffix).
  returned: always
  type: str
  sample: "12.5"
nranks:
  description: Size of the largest communicator seen.
  returned: always
  type: int
init_complete_ranks:
  description: Ranks of the largest communicator that reached C(Init COMPLETE).
  returned: always
  type: list
  elements: int
missing_ranks:
  description: Ranks of the largest communicator that did not reach C(Init COMPLETE).
  returned: always
  type: list
  elements: int
communicators:
  description: Every communicator seen, with host, pid, rank, nranks, cuda_dev, bus_id and init_complete.
  returned: always
  type: list
  elements: dict
transport:
  description: C(IB), C(Socket), C(Plugin), C(mixed), or null when no network was reported.
  returned: always
  type: str
networks:
  description: Network names from C(Using network) lines.
  returned: always
  type: list
  elements: str
ib_devices:
  description: InfiniBand or RoCE devices NCCL used, with their link layer.
  returned: always
  type: list
  elements: dict
socket_ifaces:
  description: Interfaces the socket transport used.
  returned: always
  type: list
  elements: str
gdr:
  description: Whether GPUDirect RDMA was used; null when the log does not say.
  returned: always
  type: bool
p2p_types:
  description: Intra-node and network paths seen on channel lines (for example C(P2P/IPC), C(SHM)).
  returned: always
  type: list
  elements: str
warnings:
  description: NCCL WARN lines (host, pid, message), the first 200.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    SOURCE_ARGUMENT_SPEC,
    LogSourceError,
    sources_from_params,
)
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import (
    check_expectations,
    parse_nccl_logs,
)


def main():
    argument_spec = dict(
        SOURCE_ARGUMENT_SPEC,
        expect={
            "type": "dict",
            "default": {},
            "options": {
                "nccl_used": {"type": "bool", "default": False},
                "nranks": {"type": "int"},
                "transport": {"type": "str", "choices": ["IB", "Socket", "Plugin"]},
                "gdr": {"type": "bool", "default": False},
            },
        },
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    expect = {key: value for key, value in module.params["expect"].items() if value is not None}
    try:
        result = parse_nccl_logs(sources_from_params(module.params))
    except (LogSourceError, OSError) as exc:
        module.fail_json(msg=str(exc))
    failures = check_expectations(result, expect)
    result.update(changed=False, ok=not failures, failures=failures)
    if failures:
        module.fail_json(msg="NCCL check failed:\n- " + "\n- ".join(failures), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_log_info
short_description: Read NCCL debug output from every rank and report how the ranks connected
description:
  - Reads logs written with C(NCCL_DEBUG=INFO) (NCCL 2.4 to 2.2x) and reports the NCCL and CUDA
    versions, every communicator's rank, size, device and whether it reached C(Init COMPLETE),
    the network transport (C(IB) with its InfiniBand or RoCE devices, C(Socket) with its
    interfaces, or a net C(Plugin) such as aws-ofi-nccl with its provider), GPUDirect RDMA, the
    intra-node paths (P2P/IPC, P2P/CUMEM, SHM, NVLS, CollNet), channel counts and every WARN line.
  - Classifies the failures it recognises (memory registration and memlock, duplicate GPUs,
    collective timeouts, socket connect failures, a peer that exited, CUDA out of memory,
    /dev/shm, aborted communicators, unhandled system or CUDA errors, NCCL internal errors,
    invalid usage, nccl-tests failures) and names the remedy for each in RV(errors). The failures
    PyTorch reports about NCCL (the ProcessGroupNCCL watchdog and heartbeat timeouts,
    C(NCCL error ...) with NCCL's error string, as torch prints it before C(ncclSystemError),
    C(ncclInternalError), C(ncclRemoteError) or C(ncclInvalidUsage)) are classified the same way,
    also in a log without any NCCL INFO line. The C(Last error:) line torch prints a few lines
    after such an error, and the line after it (which often names the plugin or device that
    failed), are part of its evidence in RV(errors) and named in its message.
  - An NCCL message that starts in the middle of another process's line is read, with its host.
  - On a run that did not use NCCL (for example gloo on CPU) it says so plainly with
    RV(nccl_used=false) instead of reporting success. When no init line survived (the tail of a
    crashed run), the job size and the ranks present are read from the C(comm ... rank R nranks N
    ... Abort COMPLETE) and C(Destroy COMPLETE) lines; when NCCL printed nothing but nccl-tests'
    C(# Rank N ... on host) lines are there, from those.
  - With O(expect), unmet expectations (a rank that never initialised, a TCP fallback when
    InfiniBand was expected, no GPUDirect RDMA, a classified error) become a failure whose message
    names the field, what was expected, what was found and the remedy. Ranks listed in
    RV(missing_ranks) fail the module whatever is expected.
  - A communicator announced twice, once in a piece of a line that another process's output cut
    short (a piece without a prefix of its own), is one communicator, not a second one.
  - Logs of any size are read in constant memory; lines without C(NCCL) are skipped by a search
    that runs in C over large chunks of each file.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
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
          - When C(IB) or C(Plugin) is expected and NCCL fell back to C(Socket), the message says
            how to point NCCL at the RDMA network.
        type: str
        choices: [IB, Socket, Plugin]
      gdr:
        description:
          - GPUDirect RDMA must appear on the network channel lines.
        type: bool
        default: false
      no_errors:
        description:
          - No failure may be classified in RV(errors); each one found becomes a message with its remedy.
        type: bool
        default: false
      debug:
        description:
          - The run's C(NCCL_DEBUG) (an empty string when it was not set); left out when not known.
          - Below C(INFO) NCCL prints no INFO lines, so O(expect.nccl_used), O(expect.nranks),
            O(expect.transport) and O(expect.gdr) are not checked; RV(unverifiable) says so.
            O(expect.no_errors) is still checked (NCCL's WARN lines and PyTorch's messages).
        type: str
      debug_subsys:
        description:
          - The run's C(NCCL_DEBUG_SUBSYS); a list without C(INIT) (or one that excludes it with C(^))
            leaves the same expectations unverifiable.
        type: str
notes:
  - The module never changes anything; it reports C(changed=false).
seealso:
  - module: gpuops.training.nccl_tests_info
"""

EXAMPLES = r"""
- name: Check that all 16 ranks initialised over InfiniBand with GPUDirect RDMA and no errors
  gpuops.training.nccl_log_info:
    paths:
      - "{{ run_dir }}/logs/**/*.log"
    expect:
      nccl_used: true
      nranks: 16
      transport: IB
      gdr: true
      no_errors: true
  register: nccl

- name: Read the logs of every worker pod
  kubernetes.core.k8s_log:
    namespace: training
    name: "{{ item }}"
  loop: "{{ worker_pods }}"
  register: worker_logs

- name: Say which transport the pods used, and why they failed if they did
  gpuops.training.nccl_log_info:
    pod_logs: "{{ worker_logs.results }}"
  register: nccl

- name: Show the remedies
  ansible.builtin.debug:
    msg: "{{ nccl.errors | map(attribute='remedy') | list }}"
"""

RETURN = r"""
ok:
  description: Whether every expectation in O(expect) held and RV(missing_ranks) is empty.
  returned: always
  type: bool
failures:
  description: One message per unmet expectation, naming the field, what was expected and what was found.
  returned: always
  type: list
  elements: str
nccl_used:
  description: Whether any NCCL output was found (NCCL lines, the C(NCCL version) line or nccl-tests rank lines).
  returned: always
  type: bool
lines:
  description: Number of lines read from every source.
  returned: always
  type: int
nccl_lines:
  description: Number of NCCL INFO, WARN and TRACE lines (pieces of lines glued by interleaved writes count apart).
  returned: always
  type: int
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
hosts:
  description: Host names seen in NCCL's line prefixes and nccl-tests' rank lines.
  returned: always
  type: list
  elements: str
nranks:
  description: >-
    Size of the largest communicator seen; without an init line, the largest size the
    C(Abort COMPLETE) and C(Destroy COMPLETE) lines name, else the number of ranks in
    nccl-tests' rank lines.
  returned: always
  type: int
nranks_source:
  description: >-
    Where RV(nranks) came from: C(communicators) (init lines), C(teardown) (only Abort or
    Destroy COMPLETE lines) or C(nccl-tests); null when unknown.
  returned: always
  type: str
init_complete_ranks:
  description: Ranks of the largest communicator size whose every communicator reached C(Init COMPLETE).
  returned: always
  type: list
  elements: int
seen_ranks:
  description: >-
    Ranks below RV(nranks) that a communicator line of that size names (init, Abort or Destroy
    COMPLETE), or nccl-tests' rank lines when RV(nranks_source=nccl-tests) (the first 65536).
  returned: always
  type: list
  elements: int
missing_ranks:
  description: >-
    Ranks below RV(nranks) that did not reach C(Init COMPLETE) (the first 65536); with
    RV(nranks_source=teardown), the ranks no line names (the log cannot say whether the others
    completed init); empty when no NCCL communicator line tells (RV(nranks_source=nccl-tests)).
    Any rank listed here is also a failure in RV(failures).
  returned: always
  type: list
  elements: int
communicators:
  description: >-
    The communicators seen (the first 4096, ordered by size and rank), with host, pid, comm
    (address), comm_id, rank, nranks, cuda_dev, bus_id, nnodes and init_complete.
  returned: always
  type: list
  elements: dict
communicator_count:
  description: Number of communicators seen (up to 65536 are tracked; more are counted in RV(parse_warnings)).
  returned: always
  type: int
transport:
  description: C(IB), C(Socket), C(Plugin), C(mixed), or null when no network was reported.
  returned: always
  type: str
networks:
  description: Network names from C(Using network) lines and C(via NET/...) paths (for example C(IB), C(AWS Libfabric)).
  returned: always
  type: list
  elements: str
net_paths:
  description: Distinct network paths of the channel lines (for example C(NET/IB/0/GDRDMA)).
  returned: always
  type: list
  elements: str
plugin:
  description: >-
    The net plugin when one was loaded: name, library (for example C(aws-ofi-nccl)), version,
    provider (for example C(efa), C(cxi)) and coll_plugin (for example C(SHARP)); C(loaded=false)
    when NCCL found none; null when the log does not say.
  returned: always
  type: dict
ib_devices:
  description: InfiniBand or RoCE devices NCCL used, with name, port and link (C(IB) or C(RoCE)).
  returned: always
  type: list
  elements: dict
ib_no_device:
  description: Whether NCCL printed C(NET/IB No device found).
  returned: always
  type: bool
socket_ifaces:
  description: Interfaces the socket transport used.
  returned: always
  type: list
  elements: str
bootstrap_ifaces:
  description: Interfaces NCCL's bootstrap used.
  returned: always
  type: list
  elements: str
gdr:
  description: Whether GPUDirect RDMA was used; null when the log does not say.
  returned: always
  type: bool
p2p_types:
  description: Intra-node paths, normalised (C(P2P/IPC), C(P2P/CUMEM), C(SHM), C(NVLS), C(CollNet)).
  returned: always
  type: list
  elements: str
channels:
  description: Highest channel counts seen (coll, collnet, nvls, p2p, p2p_per_peer).
  returned: always
  type: dict
nccl_warnings:
  description: >-
    NCCL WARN lines (host, pid, message, line), the first 200. Not named C(warnings), which
    Ansible keeps for the module's own warnings.
  returned: always
  type: list
  elements: dict
warning_count:
  description: Number of NCCL WARN lines.
  returned: always
  type: int
errors:
  description: >-
    Classified failures, one per kind: kind, message (with what NCCL's C(Last error:) said, when
    torch printed it after the error), remedy, lines (the first 5 lines of the kind as
    C(source:line: text), each PyTorch NCCL error followed by its C(Last error:) line and the
    line after it), count, and ranks (the ranks that reported it, sorted, as a collector
    prefix such as C([rank3]:) or C(srun --label) named them, else as the message did, such as
    torch's C([Rank 3]); empty when neither says). C(nccl_error) is PyTorch's NCCL error that no
    other kind matches.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: memory_registration
      message: NCCL could not register buffers with the network device (ibv_reg_mr / Unable to register memory)
      remedy: Raise the locked-memory limit (RLIMIT_MEMLOCK) the containers get ...
      lines: ["logs/rank3.log:3025: NET/OFI Unable to register memory (type = 2) for device 3."]
      count: 16
      ranks: [3]
unverifiable:
  description:
    - The expectations of O(expect) that the run's NCCL settings (O(expect.debug), O(expect.debug_subsys))
      left unverifiable, in one statement that names them and why; empty when every expectation was checked.
  returned: always
  type: list
  elements: str
  sample:
    - "not verifiable: nccl_used, nranks, transport (the NCCL transport, GPUDirect RDMA and every rank's NCCL init): NCCL_DEBUG=WARN prints no INFO lines. ..."
parse_warnings:
  description: What could not be read (lines with invalid UTF-8, unreadable communicator lines), at most 50 and a count.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gpuops.training.plugins.module_utils.log_module import build_log_module, judge_logs
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import (
    check_expectations,
    parse_nccl_logs,
    unverifiable,
)


def main():
    module = build_log_module(
        {
            "expect": {
                "type": "dict",
                "default": {},
                "options": {
                    "nccl_used": {"type": "bool", "default": False},
                    "nranks": {"type": "int"},
                    "transport": {"type": "str", "choices": ["IB", "Socket", "Plugin"]},
                    "gdr": {"type": "bool", "default": False},
                    "no_errors": {"type": "bool", "default": False},
                    "debug": {"type": "str"},
                    "debug_subsys": {"type": "str"},
                },
            },
        }
    )
    expect = {key: value for key, value in (module.params["expect"] or {}).items() if value is not None}

    def parse(sources):
        return dict(parse_nccl_logs(sources), unverifiable=unverifiable(expect))

    judge_logs(module, parse, lambda facts: check_expectations(facts, expect), "NCCL")


if __name__ == "__main__":
    main()

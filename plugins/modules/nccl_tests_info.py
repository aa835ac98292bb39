#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_tests_info
short_description: Read nccl-tests results and judge the bus bandwidth against the links
description:
  - Reads the output of nccl-tests (C(all_reduce_perf), C(all_gather_perf), C(reduce_scatter_perf),
    C(alltoall_perf), C(sendrecv_perf) and the others), from files, inline text or pod logs,
    whatever prefixes the collectors added (C(kubectl logs --prefix), Open MPI C([1,N]<stdout>:)
    tags, C(srun --label), SkyPilot, timestamps) and with NCCL INFO lines between the rows.
  - A size row cut by other processes' output (Open MPI tags each piece of output it receives,
    on lines of their own or with the tag, such as C([1,0]<stdout>:), in the middle of the row,
    and another rank's line can start in the middle of a row) is joined back from its pieces
    when exactly one join reads as a row of the table's columns; pieces of a tagged row only
    join pieces with the same tag. A row that cannot be joined is named, with its lines, in
    RV(parse_warnings).
  - Reports every table in the log apart, as a log may hold several tests, with the test name
    when it can be read, nThread, nGpus, minBytes, maxBytes, the ranks and hosts from the
    C(# Rank N ... on host device N) lines, every size row (out-of-place and in-place time,
    algbw, busbw and C(#wrong)), the out-of-bounds count and C(# Avg bus bandwidth).
  - Judges bandwidth on the large-message rows only (O(large_message_bytes) and up; the largest
    size present when none is that large), taking their peak busbw as a share of what the links
    carry (O(line_rate)). C(# Avg bus bandwidth) averages over every size, small ones included, so it
    is reported in RV(avg_busbw) but never judged.
  - Any C(#wrong) above O(expect.max_wrong), out-of-bounds values, or a C(Test NCCL failure) is a
    failure whatever the bandwidth; the message names what was expected, what was found and the
    remedy.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
  - gpuops.training.log_sources
options:
  large_message_bytes:
    description:
      - Rows of at least this many bytes are the ones whose bus bandwidth is judged.
    type: int
    default: 1073741824
  line_rate:
    description:
      - What the links of one node can carry, to judge the bus bandwidth against.
      - Give O(line_rate.gbit_per_nic) and O(line_rate.nic_count) (8 x 400 Gb/s NDR is 400 GB/s),
        or O(line_rate.gbyte_per_s) directly.
    type: dict
    suboptions:
      gbit_per_nic:
        description:
          - Line rate of one NIC in Gb/s (for example C(200) for HDR, C(400) for NDR).
        type: float
      nic_count:
        description:
          - Number of NICs (rails) per node that carry the traffic.
        type: int
        default: 1
      gbyte_per_s:
        description:
          - Total link capacity in GB/s; overrides O(line_rate.gbit_per_nic).
        type: float
  expect:
    description:
      - Expectations the results must meet. C(max_wrong) and C(no_errors) are checked unless set to
        null or false.
    type: dict
    default: {}
    suboptions:
      nranks:
        description:
          - Number of ranks the C(# Rank) lines must list.
        type: int
      max_wrong:
        description:
          - Highest total of C(#wrong) results allowed over every row of every table.
        type: int
        default: 0
      min_busbw_share:
        description:
          - Lowest share (0 to 1) of O(line_rate) that each table's peak large-message busbw must reach,
            for example C(0.8). Needs O(line_rate).
        type: float
      no_errors:
        description:
          - No C(Test NCCL failure) or other classified error may be in the log.
        type: bool
        default: true
notes:
  - The module never changes anything; it reports C(changed=false).
  - With two nodes NCCL may pick Tree or NVLS and report a busbw above the network's limit; to
    measure the network, run the test with C(NCCL_ALGO=Ring).
seealso:
  - module: gpuops.training.nccl_log_info
"""

EXAMPLES = r"""
- name: All-reduce across 2 nodes must reach 80% of 8 x 400 Gb/s, with no wrong results
  gpuops.training.nccl_tests_info:
    paths:
      - "{{ run_dir }}/all_reduce_perf.log"
    line_rate:
      gbit_per_nic: 400
      nic_count: 8
    expect:
      nranks: 16
      min_busbw_share: 0.8
  register: allreduce

- name: Judge the launcher pod's log of an MPIJob
  gpuops.training.nccl_tests_info:
    pod_logs:
      - name: nccl-tests-launcher
        log: "{{ launcher_log.log }}"
    line_rate:
      gbyte_per_s: 100
    expect:
      min_busbw_share: 0.9

- name: Report the tables without judging the bandwidth
  gpuops.training.nccl_tests_info:
    content: "{{ nccl_tests_run.stdout }}"
  register: tables
"""

RETURN = r"""
ok:
  description: Whether every expectation held.
  returned: always
  type: bool
failures:
  description: One message per unmet expectation, naming what was expected, what was found and the remedy.
  returned: always
  type: list
  elements: str
nccl_tests_found:
  description: Whether any nccl-tests table was found.
  returned: always
  type: bool
lines:
  description: Number of lines read.
  returned: always
  type: int
tables:
  description: >-
    One entry per test run, in log order: test, nccl_tests_version, nthread, ngpus, min_bytes,
    max_bytes, nranks, hosts, ranks (rank, host, device, bus_id, gpu), wrong_column (whether the
    table has C(#wrong) rather than the old float C(error)), rows (size, count, type, redop, root,
    out_of_place and in_place each with time_us, algbw, busbw, wrong, error), row_count,
    avg_busbw, out_of_bounds, out_of_bounds_ok, wrong_total, complete, failed, judged_on,
    peak_busbw, peak_busbw_size and busbw_share.
  returned: always
  type: list
  elements: dict
table_count:
  description: Number of tables.
  returned: always
  type: int
rows:
  description: Number of size rows over every table.
  returned: always
  type: int
nranks:
  description: Largest number of ranks a table listed.
  returned: always
  type: int
hosts:
  description: Hosts from the C(# Rank) lines, in order of appearance.
  returned: always
  type: list
  elements: str
avg_busbw:
  description: The first C(# Avg bus bandwidth) of the log in GB/s; reported, never judged.
  returned: always
  type: float
peak_busbw:
  description: Highest large-message busbw in GB/s over every table.
  returned: always
  type: float
link_capacity_gbyte_s:
  description: What O(line_rate) carries in GB/s; null without O(line_rate).
  returned: always
  type: float
busbw_share:
  description: Lowest share of RV(link_capacity_gbyte_s) reached by a table's peak large-message busbw.
  returned: always
  type: float
wrong_total:
  description: Sum of C(#wrong) over every row of every table.
  returned: always
  type: int
errors:
  description: >-
    Classified failures (kind, message, remedy, lines, count, ranks), as
    M(gpuops.training.nccl_log_info) returns them.
  returned: always
  type: list
  elements: dict
parse_warnings:
  description: >-
    What could not be read (a size row that could not be read or joined back from its pieces,
    named with its lines), at most 50 and a count.
  returned: always
  type: list
  elements: str
"""


from ansible_collections.gpuops.training.plugins.module_utils.log_module import build_log_module, judge_logs
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import (
    LARGE_MESSAGE_BYTES,
    check_expectations,
    link_capacity_gbyte_s,
    parse_nccl_tests,
)


def main():
    module = build_log_module(
        {
            "large_message_bytes": {"type": "int", "default": LARGE_MESSAGE_BYTES},
            "line_rate": {
                "type": "dict",
                "options": {
                    "gbit_per_nic": {"type": "float"},
                    "nic_count": {"type": "int", "default": 1},
                    "gbyte_per_s": {"type": "float"},
                },
                "required_one_of": [["gbit_per_nic", "gbyte_per_s"]],
            },
            "expect": {
                "type": "dict",
                "default": {},
                "options": {
                    "nranks": {"type": "int"},
                    "max_wrong": {"type": "int", "default": 0},
                    "min_busbw_share": {"type": "float"},
                    "no_errors": {"type": "bool", "default": True},
                },
            },
        }
    )
    capacity = link_capacity_gbyte_s(**(module.params["line_rate"] or {}))
    judge_logs(
        module,
        lambda sources: parse_nccl_tests(sources, module.params["large_message_bytes"], capacity),
        lambda facts: check_expectations(facts, module.params["expect"] or {}, capacity),
        "nccl-tests",
    )


if __name__ == "__main__":
    main()

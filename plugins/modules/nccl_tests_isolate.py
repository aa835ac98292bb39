#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_tests_isolate
short_description: Plan the next round of an nccl-tests isolate run, or name the slow nodes and links
description:
  - Reads the nccl-tests log of every test of an isolate run so far (O(tests)) and says what to run
    next (RV(round)), or, once nothing more can tell the nodes apart, the verdict - which nodes are
    suspect, which node pairs only have a slow link between them, what stays undetermined - with
    the tests and their large-message rows that show each.
  - The rounds are every node alone (its GPUs over NVLink or PCIe), then disjoint pairs of the other
    nodes, then the halves of each slow pair, each beside a node proven good; every test of a round
    runs at the same time. A node slow alone is named at once and left out of the pairs.
  - A test is slow when its peak large-message bus bandwidth is below 1 - O(tolerance) of the
    fleet's own median (of the singles, or of the first pairing round), or of the expected figure
    (O(expected_busbw_gbyte_s), else the one O(fabric_profile) gives) unless most of the fleet is
    below that too (more than half of three tests or more - a finding of its own, the nodes then
    told apart by the median). A test without a result, or with wrong results, is slow.
  - A run takes at most about 2 log2(N) network rounds beyond the singles (RV(round_budget)); one
    slow node is named in two (three when it waited out the first pairing round). With two nodes a
    slow network test cannot say which node is at fault, and says so.
  - The module only reads; the M(gpuops.training.nccl_tests) role runs the rounds it plans.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
options:
  nodes:
    description:
      - The nodes to tell apart, at least two, in the order the first pairing round pairs them
        (consecutive nodes together).
    type: list
    elements: str
    required: true
  tests:
    description:
      - Every test run so far, as the rounds of RV(round) named them, each with C(log) (the path of
        its nccl-tests output on the host the module runs on) and C(rc) (the launcher's exit code).
    type: list
    elements: dict
    default: []
    suboptions:
      id:
        description: The test's id from RV(round).
        type: str
        required: true
      round:
        description: The round's index.
        type: int
        required: true
      kind:
        description: V(single) (one node alone) or V(pair) (two nodes).
        type: str
        choices: [single, pair]
        required: true
      nodes:
        description: The nodes of the test.
        type: list
        elements: str
        required: true
      log:
        description: Path of the test's nccl-tests output.
        type: path
        required: true
      rc:
        description: The launcher's exit code, when known.
        type: int
  tolerance:
    description: How far below the median or the expectation (a share, 0 to 1) a test may fall and not be slow.
    type: float
    default: 0.15
  fabric_profile:
    description:
      - The fabric profile (an entry of the role's C(vars/fabric_profiles.yml) with its C(name)), for the
        expected bus bandwidth of two nodes and the report.
    type: dict
  nics_per_node:
    description: NICs per node that carry the traffic; 0 takes the profile's.
    type: int
    default: 0
  expected_busbw_gbyte_s:
    description: Expected all_reduce bus bandwidth (GB/s) of two healthy nodes; 0 takes the profile's figure.
    type: float
    default: 0
  single_busbw_gbyte_s:
    description: Expected all_reduce bus bandwidth (GB/s) of one healthy node alone; 0 judges the singles by their median only.
    type: float
    default: 0
  large_message_bytes:
    description: Rows of at least this many bytes are the ones whose bus bandwidth is judged.
    type: int
    default: 1073741824
notes:
  - The module never changes anything; it reports C(changed=false).
  - Run the tests with C(NCCL_ALGO=Ring), as the role does, because on two nodes Tree and NVLS can
    report a bus bandwidth above what the network carries.
seealso:
  - module: gpuops.training.nccl_tests_info
"""

EXAMPLES = r"""
- name: Plan the first round (every node alone)
  gpuops.training.nccl_tests_isolate:
    nodes: [gpu-01, gpu-02, gpu-03, gpu-04]
  register: plan

- name: Judge what ran so far against InfiniBand NDR and plan the next round
  gpuops.training.nccl_tests_isolate:
    nodes: [gpu-01, gpu-02, gpu-03, gpu-04]
    tests:
      - {id: r0-00, round: 0, kind: single, nodes: [gpu-01], log: /var/tmp/runs/isolate/r0-00.log, rc: 0}
      - {id: r0-01, round: 0, kind: single, nodes: [gpu-02], log: /var/tmp/runs/isolate/r0-01.log, rc: 0}
      - {id: r0-02, round: 0, kind: single, nodes: [gpu-03], log: /var/tmp/runs/isolate/r0-02.log, rc: 0}
      - {id: r0-03, round: 0, kind: single, nodes: [gpu-04], log: /var/tmp/runs/isolate/r0-03.log, rc: 0}
    expected_busbw_gbyte_s: 384
  register: plan
"""

RETURN = r"""
done:
  description: Whether the run is over (nothing more can tell the nodes apart, or the round budget is spent).
  returned: always
  type: bool
round:
  description: The next round when not RV(done) - C(index), C(kind) (V(single) or V(pair)) and C(tests), each C(id) and C(nodes).
  returned: always
  type: dict
  sample: {index: 1, kind: pair, tests: [{id: r1-00, nodes: [gpu-01, gpu-02]}, {id: r1-01, nodes: [gpu-03, gpu-04]}]}
round_budget:
  description: The most network rounds the run may take, about 2 log2(N).
  returned: always
  type: int
verdict:
  description: V(passed) without any finding, V(failed) otherwise; V(running) while not RV(done).
  returned: always
  type: str
findings:
  description: One line per suspect node, slow link, undetermined node and fleet-wide shortfall.
  returned: always
  type: list
  elements: str
summary:
  description:
    - When RV(done), what C(isolate.json) holds (schema C(gpuops.nccl-isolate/v1)) - the verdict, C(suspects) (each C(node),
      C(where), C(reason) and the C(evidence) tests with their large-message C(rows)), C(slow_links), C(undetermined),
      C(fleet), the medians and expectations, and every test judged.
  returned: always
  type: dict
report:
  description: When RV(done), C(isolate.md) - the findings with their evidence, then every test.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.training.plugins.module_utils.fabric import isolate, profiles, report, results
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import LARGE_MESSAGE_BYTES


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "str", "required": True},
            "tests": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "id": {"type": "str", "required": True},
                    "round": {"type": "int", "required": True},
                    "kind": {"type": "str", "choices": [isolate.SINGLE, isolate.PAIR], "required": True},
                    "nodes": {"type": "list", "elements": "str", "required": True},
                    "log": {"type": "path", "required": True},
                    "rc": {"type": "int"},
                },
            },
            "tolerance": {"type": "float", "default": isolate.DEFAULT_TOLERANCE},
            "fabric_profile": {"type": "dict"},
            "nics_per_node": {"type": "int", "default": 0},
            "expected_busbw_gbyte_s": {"type": "float", "default": 0},
            "single_busbw_gbyte_s": {"type": "float", "default": 0},
            "large_message_bytes": {"type": "int", "default": LARGE_MESSAGE_BYTES},
        },
        supports_check_mode=True,
    )
    params = module.params
    profile = params["fabric_profile"] or None
    if profile is not None:
        problems = profiles.profile_problems(profile.get("name") or "the profile", profile)
        if problems:
            module.fail_json(msg="fabric_profile: " + "; ".join(problems))
    if params["nics_per_node"] < 0:
        module.fail_json(msg="nics_per_node must not be negative, got %d" % params["nics_per_node"])
    expected_pair = params["expected_busbw_gbyte_s"] or profiles.expected_pair_busbw(
        profile, params["nics_per_node"]
    )
    try:
        isolate.check_tests(params["nodes"], params["tests"])
        measured = [results.measure(test, params["large_message_bytes"]) for test in params["tests"]]
        state = isolate.plan(
            params["nodes"],
            measured,
            params["tolerance"],
            expected_pair=expected_pair,
            expected_single=params["single_busbw_gbyte_s"] or None,
        )
    except isolate.IsolateError as error:
        module.fail_json(msg=str(error))
    outcome = {
        "changed": False,
        "done": state["done"],
        "round": state["round"],
        "round_budget": state["round_budget"],
    }
    if not state["done"]:
        module.exit_json(verdict="running", findings=[], summary={}, report="", **outcome)
    findings = isolate.verdict(state)
    lines = isolate.summary_lines(state, findings)
    if profile:
        profile = dict(profile, expected_pair_gbyte_s=expected_pair)
        profile["line_rate_gbyte_s"] = profiles.line_rate_gbyte_s(profile, params["nics_per_node"])
    summary = report.build_summary(state, findings, profile, lines)
    module.exit_json(
        verdict=findings["verdict"],
        findings=lines,
        summary=summary,
        report=report.render_markdown(summary),
        **outcome,
    )


if __name__ == "__main__":
    main()

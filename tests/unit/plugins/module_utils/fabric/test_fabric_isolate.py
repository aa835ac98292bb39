"""The isolate planner and its judge (plugins/module_utils/fabric/isolate.py), on a simulated
fleet: every test's bus bandwidth is what its nodes would measure with one chosen fault, so a
whole run - singles, pairs, halves - is played without a cluster, for N = 2 to 64 nodes."""

from __future__ import annotations

import math

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.fabric import isolate

# A healthy node alone over NVLink (H100, Ring), a healthy pair over 8 x 400 Gb/s NDR.
ALONE, PAIR = 370.0, 380.0
EXPECTED_PAIR = 384.0  # 8 x 400 Gb/s / 8 x 0.96


def fleet(count):
    return ["gpu-%02d" % index for index in range(count)]


class Fleet:
    """What each test measures: a node slow alone (its GPUs), a node slow on the network (its
    NICs: every network test with it), a link slow between two nodes (only their test)."""

    def __init__(self, slow_alone=(), slow_network=(), slow_links=(), factor=0.5):
        self.slow_alone = set(slow_alone)
        self.slow_network = set(slow_network) | self.slow_alone
        self.slow_links = {frozenset(link) for link in slow_links}
        self.factor = factor
        self.rounds = []

    def busbw(self, kind, nodes):
        if kind == isolate.SINGLE:
            return ALONE * (self.factor if set(nodes) & self.slow_alone else 1.0)
        slow = set(nodes) & self.slow_network or frozenset(nodes) in self.slow_links
        return PAIR * (self.factor if slow else 1.0)

    def run(self, nodes, expected_pair=EXPECTED_PAIR, tolerance=0.15):
        tests = []
        while True:
            state = isolate.plan(nodes, tests, tolerance, expected_pair=expected_pair)
            if state["done"]:
                return state, isolate.verdict(state), tests
            planned = state["round"]
            self.rounds.append(planned)
            # Each round's tests are disjoint: no node in two tests at once.
            members = [node for test in planned["tests"] for node in test["nodes"]]
            assert len(members) == len(set(members)), planned
            for test in planned["tests"]:
                tests.append(
                    dict(test, round=planned["index"], kind=planned["kind"],
                         busbw=self.busbw(planned["kind"], test["nodes"]))
                )  # fmt: skip


def network_rounds(simulated):
    return [planned for planned in simulated.rounds if planned["kind"] == isolate.PAIR]


def named(findings):
    return (
        [suspect["node"] for suspect in findings["suspects"]],
        [link["nodes"] for link in findings["slow_links"]],
        [entry["node"] for entry in findings["undetermined"]],
    )


@pytest.mark.parametrize("count", range(2, 65))
def test_a_node_slow_alone_is_named_exactly_from_its_single_for_every_fleet_size(count):
    nodes = fleet(count)
    bad = nodes[count * 3 // 5]
    simulated = Fleet(slow_alone=[bad])
    state, findings, _tests = simulated.run(nodes)
    assert named(findings) == ([bad], [], []), findings
    (suspect,) = findings["suspects"]
    assert suspect["where"] == "alone (NVLink/PCIe)"
    assert suspect["evidence"][0]["busbw"] == ALONE / 2 and suspect["evidence"][0]["slow"]
    # Left out of the network rounds, which find nothing else.
    assert all(bad not in test["nodes"] for planned in network_rounds(simulated) for test in planned["tests"])
    assert len(network_rounds(simulated)) <= 2 * math.log2(count)
    assert findings["verdict"] == "failed"
    assert state["single_median"] == (ALONE * 0.75 if count == 2 else ALONE)
    # With two nodes, one slow alone leaves the other without a partner on the network.
    assert findings["not_measured"] == ([node for node in nodes if node != bad] if count == 2 else [])


@pytest.mark.parametrize("count", range(3, 65))
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_node_slow_on_the_network_is_named_exactly_within_2_log2_n_rounds(count, where):
    nodes = fleet(count)
    bad = {"first": nodes[0], "middle": nodes[count // 2], "last": nodes[-1]}[where]
    simulated = Fleet(slow_network=[bad])
    state, findings, _tests = simulated.run(nodes)
    assert named(findings) == ([bad], [], []), (findings, simulated.rounds)
    rounds = len(network_rounds(simulated))
    assert rounds <= 2 * math.log2(count), (rounds, simulated.rounds)
    assert rounds <= 3 and state["network_rounds"] == rounds
    (suspect,) = findings["suspects"]
    assert suspect["where"] == "network"
    # Its evidence: every network test it was in, each slow, against the fleet's median.
    assert suspect["evidence"] and all(test["slow"] for test in suspect["evidence"])
    assert all(bad in test["nodes"] for test in suspect["evidence"])
    assert "below" in suspect["evidence"][0]["why"]


@pytest.mark.parametrize("count", [3, 4, 5, 8, 9, 16, 33, 64])
def test_a_node_slow_on_the_network_is_named_by_the_median_alone_without_a_profile(count):
    nodes = fleet(count)
    bad = nodes[1]
    simulated = Fleet(slow_network=[bad])
    _state, findings, _tests = simulated.run(nodes, expected_pair=None)
    if count == 3:
        # One pair in the first round: its median is its own; without an expectation
        # nothing is slow, and nothing is named.
        assert named(findings) == ([], [], []) and findings["verdict"] == "passed"
    else:
        assert named(findings) == ([bad], [], []), findings


@pytest.mark.parametrize("count", range(3, 65))
def test_a_slow_link_between_two_healthy_nodes_is_named_as_a_link_not_a_node(count):
    nodes = fleet(count)
    # The first pairing round pairs consecutive nodes: this link is measured.
    pair_start = 2 * ((count // 2 - 1) // 2) if count >= 4 else 0
    link = nodes[pair_start : pair_start + 2]
    simulated = Fleet(slow_links=[link])
    _state, findings, _tests = simulated.run(nodes)
    assert named(findings) == ([], [link], []), findings
    assert len(network_rounds(simulated)) <= max(2, 2 * math.log2(count))
    (found,) = findings["slow_links"]
    slow, *fast = found["evidence"]
    assert slow["nodes"] == link and slow["slow"] and not any(test["slow"] for test in fast)
    assert {node for test in fast for node in test["nodes"]} >= set(link)


def test_two_nodes_cannot_tell_a_slow_node_from_their_link_and_say_so():
    nodes = fleet(2)
    simulated = Fleet(slow_network=[nodes[0]])
    state, findings, _tests = simulated.run(nodes)
    assert named(findings) == ([], [], nodes)
    assert "no partner proven good" in findings["undetermined"][0]["reason"]
    assert len(network_rounds(simulated)) == 1 and findings["verdict"] == "failed"
    assert state["pair_median"] == PAIR / 2


def test_two_slow_nodes_in_different_pairs_are_both_named():
    nodes = fleet(8)
    simulated = Fleet(slow_network=[nodes[0], nodes[5]])
    _state, findings, _tests = simulated.run(nodes)
    assert named(findings) == ([nodes[0], nodes[5]], [], [])
    assert len(network_rounds(simulated)) == 2


def test_two_slow_nodes_paired_together_are_both_named():
    nodes = fleet(8)
    simulated = Fleet(slow_network=nodes[2:4])
    _state, findings, _tests = simulated.run(nodes)
    assert named(findings) == (nodes[2:4], [], [])


def test_a_healthy_fleet_passes_in_one_pairing_round():
    nodes = fleet(16)
    simulated = Fleet()
    state, findings, tests = simulated.run(nodes)
    assert findings == {
        "verdict": "passed",
        "suspects": [],
        "slow_links": [],
        "undetermined": [],
        "fleet": [],
        "not_measured": [],
    }
    assert [planned["kind"] for planned in simulated.rounds] == ["single", "pair"]
    assert len(tests) == 16 + 8 and state["good"] == nodes
    assert [test["nodes"] for test in simulated.rounds[1]["tests"]][:2] == [nodes[0:2], nodes[2:4]]


def test_an_odd_fleet_measures_the_node_that_waited_beside_a_good_one():
    nodes = fleet(5)
    simulated = Fleet()
    _state, findings, _tests = simulated.run(nodes)
    assert findings["verdict"] == "passed"
    assert [test["nodes"] for test in simulated.rounds[2]["tests"]] == [[nodes[4], nodes[0]]]


def test_a_fleet_slow_as_a_whole_is_a_finding_of_its_own_and_nodes_are_told_apart_by_the_median():
    nodes = fleet(8)
    simulated = Fleet(slow_network=[nodes[3]])
    _state, findings, _tests = simulated.run(nodes, expected_pair=2 * EXPECTED_PAIR)
    assert named(findings) == ([nodes[3]], [], [])
    (line,) = findings["fleet"]
    assert "median bus bandwidth in pairs, 380.00 GB/s, is below 85 % of the expected 768.00 GB/s" in line


def test_a_test_without_a_result_or_with_wrong_results_counts_as_slow():
    judged = isolate.judge_tests(
        [
            {
                "id": "a",
                "nodes": ["x"],
                "busbw": None,
                "error": "3 wrong results (#wrong): data was corrupted",
            },
            {"id": "b", "nodes": ["y"], "busbw": None},
            {"id": "c", "nodes": ["z"], "busbw": 100.0},
        ],
        [100.0],
        None,
        0.15,
    )
    assert [test["slow"] for test in judged] == [True, True, False]
    assert judged[0]["why"] == "no usable result: 3 wrong results (#wrong): data was corrupted"
    assert judged[2]["limit"] == 85.0 and judged[2]["share_of_median"] == 1.0


def test_the_round_budget_is_about_2_log2_n():
    assert [isolate.network_round_budget(count) for count in (2, 3, 4, 8, 9, 64, 512)] == [
        2,
        4,
        4,
        6,
        7,
        12,
        18,
    ]


def test_the_budget_ends_a_run_whose_faults_leave_too_few_good_nodes():
    nodes = fleet(4)
    simulated = Fleet(slow_network=nodes[:3])
    state, findings, _tests = simulated.run(nodes)
    assert len(network_rounds(simulated)) <= state["round_budget"] == 4
    assert findings["verdict"] == "failed"
    # Nothing good is claimed of a node with only slow tests.
    assert set(state["good"]) <= {nodes[3]}


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (
            ["only-one"],
            "nodes: an isolate run needs at least two nodes (every node alone, then pairs), got 1: only-one",
        ),
        ([], "nodes: an isolate run needs at least two nodes"),
        (["a", "b", "a"], "nodes names a more than once"),
        ("a,b", "nodes must be a list of node names"),
        (["a", ""], "nodes must be a list of node names"),
    ],
)
def test_bad_node_lists_are_refused_naming_the_option(nodes, message):
    with pytest.raises(isolate.IsolateError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        isolate.plan(nodes, [])


@pytest.mark.parametrize("tolerance", [0, 1, -0.1, 1.5, "much"])
def test_a_tolerance_outside_0_to_1_is_refused(tolerance):
    with pytest.raises(isolate.IsolateError, match="^tolerance must be"):
        isolate.plan(["a", "b"], [], tolerance)


@pytest.mark.parametrize("count", [8, 9, 16, 64])
def test_a_slow_node_and_a_slow_link_in_two_pairs_are_told_apart_in_one_run(count):
    nodes = fleet(count)
    simulated = Fleet(slow_network=[nodes[5]], slow_links=[nodes[2:4]])
    _state, findings, _tests = simulated.run(nodes)
    # Half the pairs of a small fleet slow is not a slow fleet.
    assert named(findings) == ([nodes[5]], [nodes[2:4]], []) and findings["fleet"] == []
    # Two; three when the node that waited found every good node busy in the second.
    assert len(network_rounds(simulated)) == (3 if count == 9 else 2)

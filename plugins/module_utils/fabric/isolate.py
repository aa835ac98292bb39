# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan and judge an isolate run: which node, or which link between two nodes, is slow.

The run goes in rounds; every test of a round runs at the same time, on nodes no other test of
the round uses:

1. **Singles** (round 0): every node alone, its GPUs over NVLink or PCIe. A node whose single
   is slow is named at once and left out of the network rounds (it would slow every pair).
2. **Pairs** (round 1): the other nodes in disjoint pairs, in the order given (consecutive
   nodes together: put the nodes of one rack or leaf next to each other). With an odd count
   the last node waits for the next round.
3. **Halves** (rounds 2 and on): a slow pair is split into its halves, each run beside a node
   proven good (one that was in a test that was not slow), a partner it has not met yet.
   A node that waited is run the same way.

Judging, for each kind of test apart (singles, network tests): a test is slow when its peak
large-message bus bandwidth is below ``(1 - tolerance)`` of the fleet's own median (singles:
the median of the singles; network tests: the median of the first pairing round, where each
node appears once), or below ``(1 - tolerance)`` of the expected figure (the fabric profile's)
unless the fleet itself is not: a fleet slow as a whole (more than half of three tests or more
below the expectation) is a finding of its own, and its nodes are then told apart by the median
alone. A test with no result, or with wrong results, is slow.

What the network tests say, with one fault explaining what is seen:

- a node in a test that was not slow is good (its links ran at speed);
- a node that is not good, slow beside two different partners of which one is good, is a
  suspect node;
- a slow test between two good nodes is a slow link;
- a node left without either (no good partner left to meet, or the round budget of
  ``ceil(2 log2 N)`` network rounds spent) is undetermined, with the tests that leave it so.

One slow node is named in two network rounds (three when it waited in the first pairing
round); with two nodes, a slow network test cannot say which of them is at fault.

Everything here is a pure function of the node list and the measurements
(:mod:`.results` makes them from the logs), so the run can be planned and judged again from
its logs alone.
"""

from __future__ import annotations

import math

SINGLE = "single"
PAIR = "pair"
DEFAULT_TOLERANCE = 0.15
# Fewer tests than this make no fleet to set against the expectation: one slow pair of two is
# not a slow fleet.
MIN_FLEET_SAMPLE = 3


class IsolateError(ValueError):
    """An argument that cannot be used; the message starts with its name."""


def check_nodes(nodes, option="nodes"):
    """The node names, checked: at least two, each a non-empty string, none twice."""
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(node, str) and node for node in nodes):
        raise IsolateError("%s must be a list of node names, got %r" % (option, nodes))
    repeated = sorted({node for node in nodes if list(nodes).count(node) > 1})
    if repeated:
        raise IsolateError("%s names %s more than once" % (option, ", ".join(repeated)))
    if len(nodes) < 2:
        raise IsolateError(
            "%s: an isolate run needs at least two nodes (every node alone, then pairs), got %d: %s"
            % (option, len(nodes), ", ".join(nodes) or "none")
        )
    return list(nodes)


def check_tolerance(tolerance, option="tolerance"):
    try:
        value = float(tolerance)
    except (TypeError, ValueError):
        raise IsolateError("%s must be a number between 0 and 1, got %r" % (option, tolerance)) from None
    if not 0 < value < 1:
        raise IsolateError("%s must be between 0 and 1 (exclusive), got %r" % (option, tolerance))
    return value


def check_tests(nodes, tests, option="tests"):
    """Each test names nodes of ``nodes``: one for a single, two for a pair."""
    for test in tests:
        members = test.get("nodes")
        size = {SINGLE: 1, PAIR: 2}.get(test.get("kind"))
        if size is None or not isinstance(members, (list, tuple)) or len(members) != size:
            raise IsolateError(
                "%s: test %s must be a single of one node or a pair of two, got kind %r with nodes %r"
                % (option, test.get("id"), test.get("kind"), members)
            )
        strangers = [node for node in members if node not in nodes]
        if strangers or len(set(members)) != len(members):
            raise IsolateError(
                "%s: test %s names nodes that are not among the nodes, or one twice: %s"
                % (option, test.get("id"), ", ".join(map(str, members)))
            )
    return tests


def check_expectation(value, option):
    """An expected bus bandwidth: None, or a finite number of GB/s above 0 (0 means none)."""
    if value in (None, 0):
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise IsolateError("%s must be a bus bandwidth in GB/s (0 for none), got %r" % (option, value))
    return float(value)


def network_round_budget(node_count):
    """The most network rounds (beyond the singles) a run may take: about 2 log2(N)."""
    return max(2, int(math.ceil(2 * math.log2(max(node_count, 2)))))


def median(values):
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def test_id(round_index, index):
    return "r%d-%02d" % (round_index, index)


# --------------------------------------------------------------------------------------
# judging
# --------------------------------------------------------------------------------------


def slow_limit(values, expected, tolerance):
    """``(limit, basis, fleet_below_expected)``: the bus bandwidth under which a test is slow,
    what it comes from, and whether the fleet is itself below the expectation: more than half
    of ``values`` (the fleet's sample, at least MIN_FLEET_SAMPLE of them) below it."""
    share = 1.0 - tolerance
    fleet_median = median(values)
    candidates = []
    if fleet_median:
        candidates.append(
            (share * fleet_median, "%.0f %% of the fleet's median %.2f GB/s" % (share * 100, fleet_median))
        )
    below = (
        bool(expected)
        and len(values) >= MIN_FLEET_SAMPLE
        and sum(1 for value in values if value < share * expected) * 2 > len(values)
    )
    if expected and not below:
        candidates.append((share * expected, "%.0f %% of the expected %.2f GB/s" % (share * 100, expected)))
    if not candidates:
        return None, None, below
    limit, basis = max(candidates)
    return limit, basis, below


def judge_tests(tests, values, expected, tolerance):
    """Each test with ``slow`` and ``why`` (and ``limit``), against the median of ``values`` (the
    fleet's sample) and the expectation."""
    limit, basis, _below = slow_limit(values, expected, tolerance)
    fleet_median = median(values)
    judged = []
    for test in tests:
        entry = dict(test)
        busbw = test.get("busbw")
        if test.get("error"):
            entry.update(slow=True, why="no usable result: %s" % test["error"])
        elif busbw is None:
            entry.update(slow=True, why="no bus bandwidth in its log")
        elif limit is not None and busbw < limit:
            entry.update(slow=True, why="%.2f GB/s is below %s" % (busbw, basis))
        else:
            entry.update(
                slow=False, why="%.2f GB/s" % busbw + (" (limit %.2f GB/s)" % limit if limit else "")
            )
        entry["limit"] = round(limit, 2) if limit is not None else None
        if busbw is not None and fleet_median:
            entry["share_of_median"] = round(busbw / fleet_median, 3)
        judged.append(entry)
    return judged


def _kind(tests, kind):
    return [test for test in tests if test.get("kind") == kind]


def _values(tests):
    return [test["busbw"] for test in tests if test.get("busbw") is not None and not test.get("error")]


def assess(nodes, tests, tolerance=DEFAULT_TOLERANCE, expected_pair=None, expected_single=None):
    """Everything the measurements so far say (see the module's doc for the rules)."""
    nodes = check_nodes(nodes)
    tolerance = check_tolerance(tolerance)
    check_tests(nodes, tests)
    expected_pair = check_expectation(expected_pair, "expected_busbw_gbyte_s")
    expected_single = check_expectation(expected_single, "single_busbw_gbyte_s")
    singles_raw = _kind(tests, SINGLE)
    network_raw = _kind(tests, PAIR)
    single_values = _values(singles_raw)
    single_median = median(single_values)
    singles = judge_tests(singles_raw, single_values, expected_single, tolerance)
    slow_alone = [node for node in nodes if any(test["slow"] and node in test["nodes"] for test in singles)]
    network_nodes = [node for node in nodes if node not in slow_alone]

    first_round = min((test["round"] for test in network_raw), default=None)
    pair_values = _values([test for test in network_raw if test["round"] == first_round])
    pair_median = median(pair_values)
    network = judge_tests(network_raw, pair_values, expected_pair, tolerance)

    good = set()
    for test in network:
        if not test["slow"]:
            good.update(test["nodes"])
    slow_partners = {node: [] for node in nodes}
    tried = {node: set() for node in nodes}
    for test in network:
        for node in test["nodes"]:
            partners = [other for other in test["nodes"] if other != node]
            tried[node].update(partners)
            if test["slow"]:
                slow_partners[node].extend(partners)
    suspects = [
        node
        for node in network_nodes
        if node not in good
        and len(set(slow_partners[node])) >= 2
        and any(partner in good for partner in slow_partners[node])
    ]
    links = [
        test
        for test in network
        if test["slow"] and len(test["nodes"]) == 2 and all(n in good for n in test["nodes"])
    ]
    undecided = [node for node in network_nodes if node not in good and node not in suspects]
    return {
        "nodes": nodes,
        "tolerance": tolerance,
        "singles": singles,
        "network": network,
        "single_median": single_median,
        "single_values": single_values,
        "pair_median": pair_median,
        "pair_values": pair_values,
        "expected_single": expected_single or None,
        "expected_pair": expected_pair or None,
        "slow_alone": slow_alone,
        "network_nodes": network_nodes,
        "good": [node for node in nodes if node in good],
        "suspects": suspects,
        "links": links,
        "undecided": undecided,
        "tried": tried,
        "first_pair_round": first_round,
        "network_rounds": len({test["round"] for test in network_raw}),
    }


# --------------------------------------------------------------------------------------
# planning
# --------------------------------------------------------------------------------------


def _check_round(state):
    """The next round of halves: each undecided node beside a good node it has not met, each
    node in one test at most; without good nodes, beside another undecided node it has not met."""
    good = state["good"]
    undecided = state["undecided"]
    tried = state["tried"]
    used = set()
    groups = []
    for node in undecided:
        if node in used:
            continue
        partners = [other for other in good if other not in used and other not in tried[node]]
        if not partners and not any(other not in tried[node] for other in good):
            # Every good node met already (or none yet): an undecided one it has not met.
            partners = [
                other
                for other in undecided
                if other != node and other not in used and other not in tried[node]
            ]
        if partners:
            groups.append([node, partners[0]])
            used.update((node, partners[0]))
    return groups


def plan(nodes, tests, tolerance=DEFAULT_TOLERANCE, expected_pair=None, expected_single=None):
    """The next round to run (``round``: its index, ``kind`` and ``groups``), or ``done``, with
    the assessment of the measurements so far."""
    state = assess(nodes, tests, tolerance, expected_pair, expected_single)
    budget = network_round_budget(len(state["nodes"]))
    next_index = max((test["round"] for test in tests), default=-1) + 1
    groups, kind = [], None
    if not _kind(tests, SINGLE):
        groups, kind = [[node] for node in state["nodes"]], SINGLE
    elif state["first_pair_round"] is None:
        candidates = state["network_nodes"]
        groups = [candidates[index : index + 2] for index in range(0, len(candidates) - 1, 2)]
        kind = PAIR
    elif state["undecided"] and state["network_rounds"] < budget:
        groups, kind = _check_round(state), PAIR
    state["round_budget"] = budget
    if not groups:
        state["done"], state["round"] = True, None
        return state
    state["done"] = False
    state["round"] = {
        "index": next_index,
        "kind": kind,
        "tests": [{"id": test_id(next_index, index), "nodes": group} for index, group in enumerate(groups)],
    }
    return state


# --------------------------------------------------------------------------------------
# the verdict
# --------------------------------------------------------------------------------------


def _evidence(tests):
    keys = ("id", "round", "kind", "nodes", "busbw", "limit", "share_of_median", "slow", "why", "rows", "log")
    return [{key: test.get(key) for key in keys if key in test} for test in tests]


def _tests_of(tests, node):
    return [test for test in tests if node in test["nodes"]]


def verdict(state):
    """The findings once the run is done: suspect nodes, slow links, what stays undetermined,
    and the fleet against its expectations; ``verdict`` is ``passed`` only without any."""
    singles, network = state["singles"], state["network"]
    suspects = []
    for node in state["slow_alone"]:
        (single,) = _tests_of(singles, node)[:1]
        suspects.append(
            {
                "node": node,
                "where": "alone (NVLink/PCIe)",
                "reason": "slow alone: %s" % single["why"],
                "evidence": _evidence(_tests_of(singles, node)),
            }
        )
    for node in state["suspects"]:
        slow = [test for test in _tests_of(network, node) if test["slow"]]
        partners = sorted({other for test in slow for other in test["nodes"] if other != node})
        suspects.append(
            {
                "node": node,
                "where": "network",
                "reason": "slow beside %d partners (%s), %s proven good by tests that were not slow"
                % (
                    len(partners),
                    ", ".join(partners),
                    ", ".join(partner for partner in partners if partner in state["good"]),
                ),
                "evidence": _evidence(_tests_of(network, node)),
            }
        )
    links = []
    for test in state["links"]:
        fast = [
            next(other for other in network if not other["slow"] and node in other["nodes"])
            for node in test["nodes"]
        ]
        links.append(
            {
                "nodes": list(test["nodes"]),
                "reason": "%s slow together (%s) while each is at speed beside another node"
                % (" and ".join(test["nodes"]), test["why"]),
                "evidence": _evidence([test] + fast),
            }
        )
    undetermined, not_measured = [], []
    for node in state["undecided"]:
        mine = _tests_of(network, node)
        if state["first_pair_round"] is None:
            # The singles left fewer than two nodes for the network: nothing to judge it by.
            not_measured.append(node)
            continue
        if not mine:
            reason = (
                "never measured beside another node (no partner left, or the round budget of %d spent)"
                % (state["round_budget"])
            )
        else:
            reason = "slow beside %s, but no partner proven good tells the node from the link" % ", ".join(
                sorted({other for test in mine for other in test["nodes"] if other != node})
            )
        undetermined.append({"node": node, "reason": reason, "evidence": _evidence(mine)})
    fleet = []
    for kind, fleet_median, expected, values in (
        ("alone", state["single_median"], state["expected_single"], state["single_values"]),
        ("in pairs", state["pair_median"], state["expected_pair"], state["pair_values"]),
    ):
        _limit, _basis, below = slow_limit(values, expected, state["tolerance"])
        if below:
            fleet.append(
                "The fleet's median bus bandwidth %s, %.2f GB/s, is below %.0f %% of the expected %.2f GB/s: "
                "the fabric or its settings as a whole, not one node (nodes were told apart by the median)."
                % (kind, fleet_median, (1 - state["tolerance"]) * 100, expected)
            )
    failed = bool(suspects or links or undetermined or fleet)
    return {
        "verdict": "failed" if failed else "passed",
        "suspects": suspects,
        "slow_links": links,
        "undetermined": undetermined,
        "fleet": fleet,
        "not_measured": not_measured,
    }


def summary_lines(state, findings):
    """One line per finding, for the play's output and its failure message."""
    lines = []
    for suspect in findings["suspects"]:
        lines.append("suspect node %s (%s): %s" % (suspect["node"], suspect["where"], suspect["reason"]))
    for link in findings["slow_links"]:
        lines.append("slow link %s: %s" % (" <-> ".join(link["nodes"]), link["reason"]))
    for entry in findings["undetermined"]:
        lines.append("undetermined %s: %s" % (entry["node"], entry["reason"]))
    lines.extend(findings["fleet"])
    if findings["not_measured"]:
        lines.append(
            "not measured on the network (fewer than two nodes were left for it): %s"
            % ", ".join(findings["not_measured"])
        )
    return lines

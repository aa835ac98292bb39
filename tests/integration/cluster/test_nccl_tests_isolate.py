"""playbooks/nccl_tests.yml -e nccl_tests_mode=isolate with the mpijob launcher, on the harness's
real API server, scheduler and Training Operator: every test of a round is a real MPIJob pinned to
its nodes (eight kwok GPU nodes of this module, tainted so that nothing else lands there).

kwok runs the pods; each launcher's log is the all_reduce_perf output its nodes would print
(tests/harness/nccl_tests_output.py, the layout of a real 16-rank run) with two faults in two
pairs of the first round: a node whose NICs are slow (every network test with it at half speed;
alone it is fine), and a slow link between two healthy nodes (only their test at half speed).
Healthy: 370 GB/s alone, 380 GB/s in pairs, against the ib_ndr profile's 384 GB/s.

One playbook run (CPU is what the CI lacks), shared by the assertions: the slow node is named
exactly, the slow link is named as a link and not as a node, in two network rounds beyond the
singles (at most 2 log2(8) = 6), each with the rows that show it.
"""

from __future__ import annotations

import json
import math
import secrets

import pytest
from fleet import FleetLogServer
from k8s_harness import fenced_gpu_nodes
from nccl_tests_output import all_reduce_output, mpijob_settings
from playbook_runner import DEV_COLLECTIONS, ansible_playbook

NODES = 8
TEST_KEY = "gpuops.test/isolate"
NODES_ANNOTATION = "gpuops.training/isolate-nodes"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
ALONE, PAIR = 370.0, 380.0


class GeneratedLogs:
    """The log of each launcher, by the nodes its test runs on (written when first asked)."""

    def __init__(self, directory, slow_node, slow_link):
        self.directory = directory
        self.slow_node = slow_node
        self.slow_link = set(slow_link or ())

    def busbw(self, nodes):
        if len(nodes) == 1:
            return ALONE
        slow = self.slow_node in nodes or set(nodes) == self.slow_link
        return PAIR / 2 if slow else PAIR

    def __contains__(self, key):
        return key is not None

    def __getitem__(self, key):
        nodes = key.split(",")
        path = self.directory / (key.replace(",", "+") + ".log")
        if not path.exists():
            path.write_text(all_reduce_output(nodes, self.busbw(nodes)))
        return path


@pytest.fixture(scope="module")
def isolate_fleet(k8s_cluster, tmp_path_factory):
    """Eight kwok GPU nodes that only this module's pods tolerate and select."""
    suffix = secrets.token_hex(3)
    nodes = ["iso-%s-%d" % (suffix, index) for index in range(NODES)]
    k8s_cluster.harness.create_nodes(fenced_gpu_nodes(nodes, TEST_KEY, suffix))
    yield {"cluster": k8s_cluster, "nodes": nodes, "suffix": suffix}
    k8s_cluster.kubectl("delete", "node", *nodes, "--wait=false", check=False)


def run_isolate(isolate_fleet, tmp_path_factory, name, **faults):
    cluster, nodes, suffix = isolate_fleet["cluster"], isolate_fleet["nodes"], isolate_fleet["suffix"]
    namespace = "iso-%s-%s" % (name, suffix)
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("wait", "--for=create", "--timeout=30s", "-n", namespace, "serviceaccount/default")
    logs = GeneratedLogs(tmp_path_factory.mktemp("logs-" + name), **faults)
    placements = set()

    def launcher_nodes(pod):
        """The key of a launcher's log: its test's nodes; workers' placements are kept."""
        annotations = pod["metadata"].get("annotations") or {}
        role = (pod["metadata"].get("labels") or {}).get(REPLICA_TYPE)
        if role == "worker" and pod["spec"].get("nodeName"):
            placements.add((annotations.get(NODES_ANNOTATION), pod["spec"]["nodeName"]))
        return annotations.get(NODES_ANNOTATION) if role == "launcher" else None

    server = FleetLogServer(
        cluster.api_client(), cluster.harness.state_dir, namespace, logs, key=launcher_nodes, interval=0.3
    )
    runs_dir = tmp_path_factory.mktemp("runs-" + name)
    variables = mpijob_settings(
        cluster,
        namespace,
        runs_dir,
        nccl_tests_mode="isolate",
        nccl_tests_isolate_nodes=nodes,
        nccl_tests_fabric_profile="ib_ndr",
        nccl_tests_tolerations=[{"key": TEST_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        # The launchers run long enough for their logs to be served.
        nccl_tests_pod_annotations={"gpuops.test/run-duration": "2s"},
    )
    server.start()
    try:
        run = ansible_playbook(
            "-i", "localhost,", "-c", "local", "-e", json.dumps(variables), "playbooks/nccl_tests.yml",
            collections_path=DEV_COLLECTIONS, timeout=900,
        )  # fmt: skip
    finally:
        server.stop()
    assert not server.errors, server.errors
    left = json.loads(cluster.kubectl("get", "mpijobs", "-n", namespace, "-o", "json").stdout)["items"]
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    # The run's directory, and beside it each node's history (nccl_tests_history_dir's default).
    (run_dir,) = [path for path in runs_dir.iterdir() if path.name != "history"]
    return {
        "run": run,
        "run_dir": run_dir,
        "history_dir": runs_dir / "history",
        "summary": json.loads((run_dir / "isolate.json").read_text())
        if (run_dir / "isolate.json").exists()
        else None,
        "placements": placements,
        "left": left,
        "nodes": nodes,
    }


@pytest.fixture(scope="module")
def isolated(isolate_fleet, tmp_path_factory):
    nodes = isolate_fleet["nodes"]
    return run_isolate(isolate_fleet, tmp_path_factory, "run", slow_node=nodes[5], slow_link=nodes[2:4])


def said(run):
    return " ".join(run.output.split())


def test_the_slow_node_is_named_exactly_and_the_play_fails_naming_it(isolated):
    run, summary, nodes = isolated["run"], isolated["summary"], isolated["nodes"]
    assert run.rc == 2, run
    assert summary is not None, run
    # Exactly that node (the link's two nodes are no suspects: next test).
    assert [suspect["node"] for suspect in summary["suspects"]] == [nodes[5]], summary["findings"]
    assert (summary["undetermined"], summary["fleet"]) == ([], [])
    assert summary["verdict"] == "failed"
    assert "suspect node %s (network): slow beside 2 partners" % nodes[5] in said(run)


def test_it_takes_two_network_rounds_beyond_the_singles_each_test_on_its_own_nodes(isolated):
    summary, nodes = isolated["summary"], isolated["nodes"]
    assert summary["network_rounds"] == 2 <= 2 * math.log2(NODES) and summary["rounds"] == 3
    by_round = {}
    for test in summary["tests"]:
        by_round.setdefault(test["round"], []).append(test["nodes"])
    assert by_round[0] == [[node] for node in nodes]
    assert by_round[1] == [nodes[0:2], nodes[2:4], nodes[4:6], nodes[6:8]]
    # The slow pairs' halves, each beside a node proven good.
    assert [pair[0] for pair in by_round[2]] == nodes[2:6]
    assert sorted(pair[1] for pair in by_round[2]) == sorted(nodes[:2] + nodes[6:])
    # Every worker ran on a node of its test (pinned by nodeAffinity), and no MPIJob is left.
    assert isolated["placements"], "no worker was seen placed"
    assert all(node in test_nodes.split(",") for test_nodes, node in isolated["placements"])
    assert isolated["left"] == []


def test_every_nodes_figures_go_to_its_own_history_on_the_controller(isolated):
    summary, run_dir, nodes = isolated["summary"], isolated["run_dir"], isolated["nodes"]
    # The first run of these nodes: kept, nothing to judge them against yet.
    assert summary["history"]["kept"] is True and summary["history"]["flagged"] == []
    assert all(verdict["samples"] == 0 for verdict in summary["history"]["judged"])
    for node in nodes:
        path = isolated["history_dir"] / (node + ".jsonl")
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert {record["run_id"] for record in records} == {run_dir.name}
        alone = [record for record in records if record["key"] == "all_reduce alone x 8 GPUs"]
        (single,) = [test for test in summary["tests"] if test["nodes"] == [node]]
        assert [record["value"] for record in alone] == [single["busbw"]]
        pairs = [test for test in summary["tests"] if len(test["nodes"]) == 2 and node in test["nodes"]]
        assert len(records) == 1 + len(pairs)


def test_the_suspect_comes_with_the_rows_that_show_it(isolated):
    summary, run_dir, nodes = isolated["summary"], isolated["run_dir"], isolated["nodes"]
    (suspect,) = summary["suspects"]
    evidence = suspect["evidence"]
    assert [test["round"] for test in evidence] == [1, 2] and all(test["slow"] for test in evidence)
    assert all(nodes[5] in test["nodes"] for test in evidence)
    assert (
        evidence[0]["busbw"] == PAIR / 2
        # The higher of the two limits: 85 % of the profile's 384 GB/s, above 85 % of the median.
        and evidence[0]["why"] == "190.00 GB/s is below 85 % of the expected 384.00 GB/s"
    )
    largest = evidence[0]["rows"][-1]
    assert (largest["size"], largest["busbw_out_of_place"], largest["busbw_in_place"]) == (
        8 << 30,
        190.0,
        190.0,
    )
    # all_reduce over 16 ranks: busbw = algbw x 2 x 15 / 16.
    assert largest["algbw_out_of_place"] == pytest.approx(190.0 / 1.875, abs=0.01)
    # Two of the four first pairs are slow: their median is between (half is not most of the fleet).
    assert (summary["pair_median_gbyte_s"], summary["expected_pair_gbyte_s"]) == (0.75 * PAIR, 384.0)
    assert (
        summary["fabric_profile"]["name"] == "ib_ndr"
        and summary["fabric_profile"]["line_rate_gbyte_s"] == 400.0
    )
    report = (run_dir / "isolate.md").read_text()
    assert report.startswith("# Isolate run: FAILED\n")
    assert "### Suspect node %s (network)" % nodes[5] in report
    assert "8589934592 B  busbw 190.00 GB/s out-of-place" in report
    # Each test's log is kept beside the report.
    assert (run_dir / "isolate" / "r1").is_dir() and len(list((run_dir / "isolate").glob("r*/*.log"))) == 16


def test_a_slow_link_between_two_healthy_nodes_is_named_as_a_link_not_a_node(isolated):
    run, summary, nodes = isolated["run"], isolated["summary"], isolated["nodes"]
    (link,) = summary["slow_links"]
    assert link["nodes"] == nodes[2:4]
    slow, *fast = link["evidence"]
    assert slow["nodes"] == nodes[2:4] and slow["busbw"] == PAIR / 2 and slow["rows"]
    assert [test["slow"] for test in fast] == [False, False]
    assert "slow link %s <-> %s" % tuple(nodes[2:4]) in said(run)
    assert "suspect node %s" % nodes[2] not in said(run) and "suspect node %s" % nodes[3] not in said(run)

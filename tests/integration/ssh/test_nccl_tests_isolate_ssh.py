"""playbooks/nccl_tests.yml -e nccl_tests_mode=isolate with the ssh launcher: every test of a
round is its own mpirun from the first host, started at once, each over its test's hosts.

Five inventory hosts (run locally; the node with address 10.0.0.13 has slow NICs). There is no
MPI or GPU here, so mpirun is a stand-in that records its command line and prints the
all_reduce_perf output its hosts would (tests/harness/nccl_tests_output.py). One playbook run.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
HOSTS = {
    "gpu-a": "10.0.0.11",
    "gpu-b": "10.0.0.12",
    "gpu-c": "10.0.0.13",
    "gpu-d": "10.0.0.14",
    "gpu-e": "10.0.0.15",
}
STAND_IN_MPIRUN = """#!%(python)s
import sys
sys.path.insert(0, %(harness)r)
from nccl_tests_output import all_reduce_output
argv = sys.argv[1:]
hosts = [entry.split(":")[0] for entry in argv[argv.index("-H") + 1].split(",")]
with open(%(calls)r, "a") as calls:
    calls.write(" ".join(argv) + "\\n")
busbw = 370.0 if len(hosts) == 1 else (150.0 if "10.0.0.13" in hosts else 380.0)
print(all_reduce_output(hosts, busbw))
"""


# gpu-a's history: three earlier single-node runs at about 450 GB/s. This run measures it alone
# at 370 GB/s, the fleet's median and the profile's expectation alike: the isolate run passes it,
# its own history flags it.
EARLIER_SINGLES_OF_GPU_A = [452.0, 449.5, 450.8]
SINGLE_KEY = "all_reduce alone x 8 GPUs"


def seed_history(history_dir):
    history_dir.mkdir()
    now = time.time()
    records = [
        {"schema": "gpuops.node-history/v1", "time": now - 86400 * (3 - index), "node": "gpu-a",
         "source": "nccl_tests", "metric": "busbw_gbps", "key": SINGLE_KEY, "device": "", "value": value,
         "run_id": "nccl-tests-earlier-%d" % index}
        for index, value in enumerate(EARLIER_SINGLES_OF_GPU_A)
    ]  # fmt: skip
    (history_dir / "gpu-a.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


@pytest.fixture(scope="module")
def isolate_ssh(run_playbook, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("isolate-ssh")
    seed_history(tmp_path / "history")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "all_reduce_perf").write_text("#!/bin/sh\nexit 99  # started by mpirun only\n")
    (tmp_path / "build" / "all_reduce_perf").chmod(0o755)
    mpirun = tmp_path / "mpirun"
    mpirun.write_text(
        STAND_IN_MPIRUN
        % {
            "python": sys.executable,
            "harness": str(REPO_ROOT / "tests" / "harness"),
            "calls": str(tmp_path / "calls"),
        }
    )
    mpirun.chmod(0o755)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "nccl_test_nodes": {
                            "hosts": {name: {"ansible_host": address} for name, address in HOSTS.items()},
                            "vars": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable,
                                "nccl_tests_launcher": "ssh",
                                "nccl_tests_binaries_dir": str(tmp_path / "build"),
                                "nccl_tests_runs_dir": str(tmp_path / "runs"),
                                "nccl_tests_history_dir": str(tmp_path / "history"),
                                "nccl_tests_mpirun": str(mpirun),
                                "nccl_tests_gpus_per_process": 1,
                            },
                        }
                    }
                }
            }
        )
    )
    run = run_playbook(
        "playbooks/nccl_tests.yml",
        str(inventory),
        {
            "nccl_tests_mode": "isolate",
            "nccl_tests_fabric_profile": "ib_ndr",
            "nccl_tests_env": {"NCCL_IB_HCA": "mlx5"},
        },
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run, run_dir, (tmp_path / "calls").read_text().splitlines(), tmp_path / "history"


def test_the_node_with_slow_nics_is_named_and_the_play_fails_naming_it(isolate_ssh):
    run, run_dir, _calls, _history = isolate_ssh
    assert run.rc == 2, run
    summary = json.loads((run_dir / "isolate.json").read_text())
    assert [suspect["node"] for suspect in summary["suspects"]] == ["gpu-c"]
    assert (summary["slow_links"], summary["undetermined"]) == ([], [])
    assert "suspect node gpu-c (network)" in " ".join(run.output.split())
    # Singles; the pairs a+b and c+d (e waits); the halves c and d beside a and b; e beside a good node.
    assert summary["network_rounds"] == 3
    assert [test["nodes"] for test in summary["tests"] if test["round"] == 1] == [
        ["gpu-a", "gpu-b"],
        ["gpu-c", "gpu-d"],
    ]


def test_each_test_is_one_mpirun_over_its_hosts_with_ring_and_the_users_variables(isolate_ssh):
    _run, run_dir, calls, _history = isolate_ssh
    host_lists = sorted(call.split()[call.split().index("-H") + 1] for call in calls)
    assert host_lists[:2] == ["10.0.0.11:8", "10.0.0.11:8,10.0.0.12:8"]
    assert len(calls) == 5 + 2 + 2 + 1
    assert all("-x NCCL_ALGO -x NCCL_IB_HCA" in call for call in calls)
    assert all(call.startswith("-np %d -H " % (8 * len(call.split()[3].split(",")))) for call in calls)
    # Each test's log is kept; the environment file is gone.
    assert len(list((run_dir / "isolate").glob("r*.log"))) == 10
    assert not list(run_dir.glob(".nccl-tests-environment"))


def test_a_node_that_passes_against_the_fleet_is_flagged_against_its_own_history(isolate_ssh):
    run, run_dir, _calls, history_dir = isolate_ssh
    summary = json.loads((run_dir / "isolate.json").read_text())
    # gpu-a alone: 370 GB/s like every node, so not a suspect; 450.8 is its own median.
    assert "gpu-a" not in [suspect["node"] for suspect in summary["suspects"]]
    (flagged,) = summary["history"]["flagged"]
    assert (flagged["node"], flagged["key"], flagged["value"]) == ("gpu-a", SINGLE_KEY, 370.0)
    assert (flagged["median"], flagged["samples"], flagged["class"]) == (450.8, 3, "monitor")
    assert flagged["reason"] == (
        "gpu-a: bus bandwidth 370 GB/s (all_reduce alone x 8 GPUs) is 17.9 % below this node's median of"
        " 451 GB/s over its last 3 results (more than 15 %)"
    )
    # In the play's output too (YAML doubles the apostrophe of a single-quoted string).
    assert flagged["reason"].replace("'", "''") in " ".join(run.output.split())
    report = (run_dir / "isolate.md").read_text()
    assert "## Against each node's own history" in report and "- " + flagged["reason"] in report
    # Every node's figures were kept: its single, and one record per pair it was in (the link's
    # own history, keyed by its partner); no halves.
    for node in HOSTS:
        kept = [json.loads(line) for line in (history_dir / (node + ".jsonl")).read_text().splitlines()]
        new = [record for record in kept if record["run_id"] == run_dir.name]
        partners = [
            [other for other in test["nodes"] if other != node][0]
            for test in summary["tests"]
            if len(test["nodes"]) == 2 and node in test["nodes"] and test["busbw"] is not None
        ]
        expected = [SINGLE_KEY] + ["all_reduce with " + partner for partner in partners]
        assert sorted(record["key"] for record in new) == sorted(expected), node
    assert len((history_dir / "gpu-a.jsonl").read_text().splitlines()) > len(EARLIER_SINGLES_OF_GPU_A)

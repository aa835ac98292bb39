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


@pytest.fixture(scope="module")
def isolate_ssh(run_playbook, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("isolate-ssh")
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
    return run, run_dir, (tmp_path / "calls").read_text().splitlines()


def test_the_node_with_slow_nics_is_named_and_the_play_fails_naming_it(isolate_ssh):
    run, run_dir, _calls = isolate_ssh
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
    _run, run_dir, calls = isolate_ssh
    host_lists = sorted(call.split()[call.split().index("-H") + 1] for call in calls)
    assert host_lists[:2] == ["10.0.0.11:8", "10.0.0.11:8,10.0.0.12:8"]
    assert len(calls) == 5 + 2 + 2 + 1
    assert all("-x NCCL_ALGO -x NCCL_IB_HCA" in call for call in calls)
    assert all(call.startswith("-np %d -H " % (8 * len(call.split()[3].split(",")))) for call in calls)
    # Each test's log is kept; the environment file is gone.
    assert len(list((run_dir / "isolate").glob("r*.log"))) == 10
    assert not list(run_dir.glob(".nccl-tests-environment"))

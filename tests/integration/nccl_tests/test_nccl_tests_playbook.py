"""playbooks/nccl_tests.yml on real nccl-tests output.

There is no GPU here, so the benchmark binaries are stand-ins that record the command line
they were given and print what the real binaries printed on real clusters (published logs
from tests/unit/fixtures/nccl/published): the role, the parsers and the verdict are the real ones.
"""

from __future__ import annotations

import json
import pathlib
import stat

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl" / "published"
OUTPUT_OF = {
    # 16 ranks on two A3 Mega nodes (8 x H100 each), all_reduce, peak busbw 338.82 GB/s.
    "all_reduce": FIXTURES / "gcp-a3mega-allreduce-16rank-table-only.log",
    # 2 ranks on two A100 nodes over one HDR link with GPUDirect RDMA, peak 13.81 GB/s.
    "reduce_scatter": FIXTURES / "ib-gdrdma-2node-a100-reducescatter-2165.log",
}
PLAYBOOK = "playbooks/nccl_tests.yml"


@pytest.fixture
def bench(tmp_path):
    """A directory of stand-in nccl-tests binaries, an inventory and a runs directory."""
    binaries = tmp_path / "build"
    binaries.mkdir()
    for collective, output in OUTPUT_OF.items():
        script = binaries / ("%s_perf" % collective)
        script.write_text(
            '#!/bin/sh\nprintf "%%s\\n" "$@" > "%s/%s.argv"\ncat "%s"\n' % (tmp_path, collective, output)
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "nccl_test_nodes": {
                            "hosts": {"localhost": {"ansible_connection": "local"}},
                            "vars": {
                                "ansible_python_interpreter": str(REPO_ROOT / ".venv" / "bin" / "python"),
                                "nccl_tests_binaries_dir": str(binaries),
                                "nccl_tests_runs_dir": str(tmp_path / "runs"),
                            },
                        }
                    }
                }
            }
        )
    )
    return tmp_path, str(inventory)


def summary_of(tmp_path):
    (run_dir,) = [path for path in (tmp_path / "runs").iterdir() if path.name != "history"]
    return json.loads((run_dir / "nccl_tests.json").read_text()), run_dir


def test_all_reduce_against_a_line_rate_it_clears(run_playbook, bench):
    tmp_path, inventory = bench
    # The node did 450 GB/s alone in its last three runs: 338.82 is 24.7 % below its own median.
    history = tmp_path / "runs" / "history"
    history.mkdir(parents=True)
    earlier = [
        {"schema": "gpuops.node-history/v1", "time": 1795000000.0 + index, "node": "localhost",
         "source": "nccl_tests", "metric": "busbw_gbps", "key": "all_reduce alone x 8 GPUs", "device": "",
         "value": 450.0, "run_id": "old-%d" % index}
        for index in range(3)
    ]  # fmt: skip
    (history / "localhost.jsonl").write_text("".join(json.dumps(record) + "\n" for record in earlier))
    run = run_playbook(PLAYBOOK, inventory, {
        "nccl_tests_line_rate": {"gbit_per_nic": 200, "nic_count": 8},
        "nccl_tests_min_busbw_share": 0.8,
        "nccl_tests_expect_nranks": 16,
    })  # fmt: skip
    assert run.rc == 0, run
    summary, run_dir = summary_of(tmp_path)
    assert summary["verdict"] == "passed" and summary["line_rate_gbyte_s"] == 200.0
    (row,) = summary["collectives"]
    assert row["collective"] == "all_reduce" and row["nranks"] == 16
    assert row["peak_busbw_gbyte_s"] == 338.82 and row["avg_busbw_gbyte_s"] == 70.742
    assert row["busbw_share"] > 1.6 and row["wrong_total"] == 0
    # Above the line rate, and still flagged against the node's own history, which keeps it.
    (flagged,) = summary["history"]["flagged"]
    assert (flagged["node"], flagged["value"], flagged["median"]) == ("localhost", 338.82, 450.0)
    assert flagged["below_median_percent"] == 24.7
    assert "localhost: bus bandwidth 339 GB/s (all_reduce alone x 8 GPUs) is 24.7 % below" in run.output
    assert "24.7 % below" in (run_dir / "nccl_tests.md").read_text()
    kept = [json.loads(line) for line in (history / "localhost.jsonl").read_text().splitlines()]
    assert [(record["run_id"], record["value"]) for record in kept[3:]] == [(run_dir.name, 338.82)]
    # The benchmark got the sizes, GPUs and correctness check the role promises.
    argv = (tmp_path / "all_reduce.argv").read_text().split()
    assert argv == ["-b", "8", "-e", "8G", "-f", "2", "-g", "8", "-n", "20", "-w", "5", "-c", "1"]
    assert "| all_reduce | 16 | 338.82 |" in (run_dir / "nccl_tests.md").read_text()


def test_a_collective_below_its_share_of_the_line_rate_fails_naming_it(run_playbook, bench):
    tmp_path, inventory = bench
    run = run_playbook(PLAYBOOK, inventory, {
        "nccl_tests_collectives": ["all_reduce", "reduce_scatter"],
        "nccl_tests_line_rate": {"gbit_per_nic": 200, "nic_count": 1},
        "nccl_tests_min_busbw_share": 0.8,
        "nccl_tests_expect_transport": "IB",
    })  # fmt: skip
    assert run.rc != 0
    summary, _run_dir = summary_of(tmp_path)
    assert summary["verdict"] == "failed" and summary["transport"] == "IB" and summary["gdr"] is True
    rows = {row["collective"]: row for row in summary["collectives"]}
    assert rows["all_reduce"]["ok"] is True
    assert rows["reduce_scatter"]["ok"] is False and 0.5 < rows["reduce_scatter"]["busbw_share"] < 0.6
    (failure,) = summary["failures"]
    assert failure.startswith("reduce_scatter: ") and "busbw" in failure
    assert "reduce_scatter: " in run.output


def test_an_unexpected_transport_fails(run_playbook, bench):
    tmp_path, inventory = bench
    run = run_playbook(PLAYBOOK, inventory, {
        "nccl_tests_collectives": ["reduce_scatter"], "nccl_tests_expect_transport": "Socket",
    })  # fmt: skip
    assert run.rc != 0
    summary, _run_dir = summary_of(tmp_path)
    # Failures about the NCCL log as a whole (not one collective) carry the prefix "NCCL: ".
    assert [failure.split(": ")[:2] for failure in summary["failures"]] == [["NCCL", "transport"]]
    assert "Socket" in summary["failures"][0] and "IB" in summary["failures"][0]


def test_a_missing_binary_is_reported_before_anything_runs(run_playbook, bench):
    tmp_path, inventory = bench
    run = run_playbook(PLAYBOOK, inventory, {"nccl_tests_collectives": ["all_reduce", "alltoall"]})
    assert run.rc != 0
    assert "nccl-tests binaries missing or not executable" in run.output and "alltoall_perf" in run.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "all_reduce.argv").exists()


def test_a_share_without_a_line_rate_is_refused_naming_both(run_playbook, bench):
    tmp_path, inventory = bench
    run = run_playbook(PLAYBOOK, inventory, {"nccl_tests_min_busbw_share": 0.8})
    assert run.rc != 0
    assert "nccl_tests_min_busbw_share" in run.output and "nccl_tests_line_rate" in run.output
    assert not (tmp_path / "runs").exists()


# An isolate run refuses what it cannot use before anything runs: nothing is measured, no run
# directory is made. (Its runs are tested on the harness: tests/integration/cluster.)
@pytest.mark.parametrize(
    ("settings", "named"),
    [
        # One host in the play: the ssh launcher has one node to tell apart.
        ({"nccl_tests_launcher": "ssh"}, "nccl_tests_isolate_nodes must name at least two distinct nodes"),
        (
            {"nccl_tests_launcher": "mpijob", "nccl_tests_isolate_nodes": ["gpu-01", "gpu-01"]},
            "nccl_tests_isolate_nodes must name at least two distinct nodes",
        ),
        (
            {
                "nccl_tests_launcher": "mpijob",
                "nccl_tests_isolate_nodes": ["gpu-01", "gpu-02"],
                "nccl_tests_fabric_profile": "ib_xdr",
            },
            "nccl_tests_fabric_profile: there is no fabric profile 'ib_xdr'; the profiles are: "
            "efa_p4d, efa_p5, ib_hdr, ib_ndr, roce_100g, roce_200g, roce_400g",
        ),
    ],
    ids=["one-host", "one-node-twice", "unknown-profile"],
)
def test_an_isolate_run_refuses_bad_input_before_anything_runs_naming_the_variable(
    run_playbook, bench, settings, named
):
    tmp_path, inventory = bench
    run = run_playbook(PLAYBOOK, inventory, dict(settings, nccl_tests_mode="isolate"))
    assert run.rc != 0
    assert named in " ".join(run.output.split()), run
    assert not (tmp_path / "runs").exists() and not list(tmp_path.glob("*.argv"))

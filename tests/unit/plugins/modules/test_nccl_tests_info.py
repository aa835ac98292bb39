"""nccl_tests_info as Ansible runs it: arguments in, JSON out."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.modules import nccl_tests_info

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
PUBLISHED = REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl" / "published"
TWO_TABLES = PUBLISHED / "nccltests-2287-2rank-alltoall-sendrecv-tables.log"
FAILED_THEN_OK = PUBLISHED / "nccltests-2287-alltoall-remote-exited-then-sendrecv.log"


def test_two_tables_pass_against_a_line_rate_they_reach(run_module):
    run = run_module(
        nccl_tests_info.main,
        {
            "paths": [str(TWO_TABLES)],
            "line_rate": {"gbit_per_nic": 100, "nic_count": 1},
            "expect": {"nranks": 2, "min_busbw_share": 0.9},
        },
    )
    assert run.exit_code == 0, run.result.get("msg")
    assert run.result["changed"] is False
    assert run.result["ok"] is True
    assert [table["test"] for table in run.result["tables"]] == ["alltoall_perf", "sendrecv_perf"]
    assert run.result["rows"] == 20
    assert run.result["avg_busbw"] == 13.5156
    assert run.result["link_capacity_gbyte_s"] == 12.5
    assert run.result["peak_busbw"] == 13.62
    assert run.result["hosts"] == ["cnode2-001", "cnode2-016"]


def test_a_bandwidth_below_the_share_fails_naming_expected_and_found(run_module):
    run = run_module(
        nccl_tests_info.main,
        {"paths": [str(TWO_TABLES)], "line_rate": {"gbyte_per_s": 25}, "expect": {"min_busbw_share": 0.8}},
    )
    assert run.failed
    assert run.result["msg"].startswith(
        "nccl-tests check failed:\n- min_busbw_share: expected alltoall_perf peak bus bandwidth of at "
        "least 80% of 25.0 GB/s, found 13.61 GB/s (54%) on large messages (>= 1073741824 bytes)."
    )
    assert run.result["busbw_share"] == pytest.approx(0.5444)


def test_a_failed_test_fails_by_default_and_check_mode_reads_the_same(run_module):
    run = run_module(nccl_tests_info.main, {"paths": [str(FAILED_THEN_OK)]}, check_mode=True)
    assert run.failed
    assert "no_errors: expected none, found remote_exited" in run.result["msg"]
    assert run.result["tables"][0]["failed"] is True
    assert run.result["changed"] is False
    run = run_module(nccl_tests_info.main, {"paths": [str(FAILED_THEN_OK)], "expect": {"no_errors": False}})
    assert run.exit_code == 0


def test_wrong_results_fail(run_module):
    content = (
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor)\n"
        "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] GPU\n"
        "   8   2   float   sum   -1   10.0   0.00   0.00   2   10.0   0.00   0.00   0\n"
        "# Out of bounds values : 2 FAILED\n"
        "# Avg bus bandwidth    : 0\n"
    )
    run = run_module(nccl_tests_info.main, {"content": content})
    assert run.failed
    assert "max_wrong: expected at most 0 wrong results, found 2" in run.result["msg"]
    assert run.result["wrong_total"] == 2


def test_a_bad_path_is_named(run_module, tmp_path):
    run = run_module(nccl_tests_info.main, {"paths": [str(tmp_path / "x" / "*.log")]})
    assert run.failed
    assert run.result["msg"] == "paths: the pattern %s matches no file" % (tmp_path / "x" / "*.log")

"""nccl-tests tables: headers, rows, several tests in one log, and the bandwidth verdict."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import (
    check_expectations,
    link_capacity_gbyte_s,
    parse_nccl_tests,
)

HEADER = """\
# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid 100 on node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid 200 on node-b device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#
#   out-of-place   in-place
#   size   count   type   redop   root   time   algbw   busbw  #wrong   time   algbw   busbw  #wrong
#   (B)   (elements)   (us)  (GB/s)  (GB/s)   (us)  (GB/s)  (GB/s)
"""
ROWS = """\
   1048576   262144   float   sum   -1   100.0   10.49   10.49   0   100.0   10.49   10.49   0
  1073741824   268435456   float   sum   -1  25000.0   42.95   42.95   0  24000.0   44.74   44.74   0
  2147483648   536870912   float   sum   -1  46000.0   46.68   46.68   0  47000.0   45.69   45.69   N/A
"""
FOOTER = """\
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 33.1
#
# Collective test concluded: all_reduce_perf
"""


def parse(text, **kwargs):
    return parse_nccl_tests([LogSource("log", text=text)], **kwargs)


def test_a_table_is_read_whole():
    result = parse(HEADER + ROWS + FOOTER)
    (table,) = result["tables"]
    assert table["test"] == "all_reduce_perf"
    assert (table["nthread"], table["ngpus"], table["min_bytes"], table["max_bytes"]) == (
        1,
        1,
        1048576,
        2147483648,
    )
    assert table["nranks"] == 2
    assert table["hosts"] == ["node-a", "node-b"]
    assert table["ranks"][1] == {
        "rank": 1,
        "host": "node-b",
        "device": 0,
        "bus_id": "0000:18:00",
        "gpu": "NVIDIA H100 80GB HBM3",
    }
    assert table["row_count"] == 3
    assert table["rows"][2]["in_place"] == {
        "time_us": 47000.0,
        "algbw": 45.69,
        "busbw": 45.69,
        "wrong": None,
        "error": None,
    }
    assert table["rows"][0]["redop"] == "sum" and table["rows"][0]["root"] == -1
    assert table["avg_busbw"] == 33.1
    assert table["out_of_bounds"] == 0 and table["out_of_bounds_ok"] is True
    assert table["complete"] is True
    assert result["avg_busbw"] == 33.1


def test_bandwidth_is_judged_on_large_rows_never_on_the_average():
    capacity = link_capacity_gbyte_s(gbit_per_nic=400, nic_count=1)
    assert capacity == 50.0
    result = parse(HEADER + ROWS + FOOTER, capacity_gbyte_s=capacity)
    (table,) = result["tables"]
    assert table["peak_busbw"] == 46.68
    assert table["peak_busbw_size"] == 2147483648
    assert table["busbw_share"] == pytest.approx(0.9336)
    assert table["judged_on"] == "large messages (>= 1073741824 bytes)"
    assert check_expectations(result, {"min_busbw_share": 0.9}, capacity) == []
    (failure,) = check_expectations(result, {"min_busbw_share": 0.95}, capacity)
    assert failure.startswith(
        "min_busbw_share: expected all_reduce_perf peak bus bandwidth of at least 95% of 50.0 GB/s, "
        "found 46.68 GB/s (93%)"
    )
    assert "NCCL_ALGO=Ring" in failure


def test_the_largest_size_is_judged_when_no_row_is_large():
    result = parse(
        HEADER + ROWS.splitlines()[0] + "\n" + FOOTER, capacity_gbyte_s=link_capacity_gbyte_s(gbyte_per_s=20)
    )
    (table,) = result["tables"]
    assert table["judged_on"] == "largest size present (1048576 bytes)"
    assert table["busbw_share"] == pytest.approx(0.5245)


def test_wrong_results_and_out_of_bounds_values_fail_whatever_the_bandwidth():
    rows = ROWS.replace("42.95   0  24000.0", "42.95   3  24000.0")
    result = parse(HEADER + rows + FOOTER.replace("0 OK", "3 FAILED"))
    assert result["wrong_total"] == 3
    assert {error["kind"] for error in result["errors"]} == {"wrong_results", "out_of_bounds_values"}
    failures = check_expectations(result, {})
    assert failures[0].startswith("max_wrong: expected at most 0 wrong results, found 3")
    assert failures[1].startswith("out_of_bounds: all_reduce_perf reported 3 out-of-bounds values")
    assert check_expectations(result, {"max_wrong": 5})[0].startswith("out_of_bounds:")


def test_several_tables_and_a_failed_one_are_kept_apart():
    failed = HEADER.replace("all_reduce_perf", "alltoall_perf") + (
        "node-a: Test NCCL failure common.cu:401 'remote process exited or there was a network error / '\n"
        " .. node-a pid 100: Test failure common.cu:519\n"
    )
    result = parse(failed + HEADER + ROWS + FOOTER)
    assert [table["test"] for table in result["tables"]] == ["alltoall_perf", "all_reduce_perf"]
    assert [table["row_count"] for table in result["tables"]] == [0, 3]
    assert result["tables"][0]["failed"] is True and result["tables"][0]["complete"] is False
    assert result["rows"] == 3
    assert sorted(error["kind"] for error in result["errors"]) == ["nccl_tests_failure", "remote_exited"]
    failures = check_expectations(result, {"nranks": 2})
    assert len(failures) == 2 and all(failure.startswith("no_errors:") for failure in failures)
    assert check_expectations(result, {"no_errors": False}) == []


def test_old_format_tagged_by_mpi_with_nccl_lines_between_rows():
    text = (
        "[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5\n"
        "[1,0]<stdout>:#   Rank  0 Pid     26 on worker-0 device  0 [0x10] A100-SXM4-40GB\n"
        "[1,0]<stdout>:#       size         count    type   redop     time   algbw   busbw  error"
        "     time   algbw   busbw  error\n"
        "[1,0]<stdout>:worker-0:26:26 [0] NCCL INFO Launch mode Parallel\n"
        "[1,0]<stdout>:  1073741824     268435456   float     sum    61556   17.44   32.71  5e-07"
        "    61303   17.52   32.84  5e-07\n"
        "[1,0]<stdout>:# Out of bounds values : 0 OK\n"
        "[1,0]<stdout>:# Avg bus bandwidth    : 7.80081 \n"
    )
    result = parse(text)
    (table,) = result["tables"]
    assert table["wrong_column"] is False
    assert table["rows"][0]["out_of_place"]["error"] == 5e-07
    assert table["rows"][0]["out_of_place"]["wrong"] is None
    assert table["rows"][0]["root"] is None
    assert table["peak_busbw"] == 32.84
    assert result["avg_busbw"] == 7.80081
    assert check_expectations(result, {}) == []


def test_no_table_is_a_failure_and_numbers_outside_a_table_are_ignored():
    result = parse("1 2 3 4 5 6 7 8 9 10 11 12 13\nno tables here\n")
    assert result["nccl_tests_found"] is False
    assert result["rows"] == 0
    assert check_expectations(result, {}) == [
        "nccl-tests output: expected at least one table, found none (is this the output of *_perf?)"
    ]


def test_min_busbw_share_needs_a_line_rate():
    result = parse(HEADER + ROWS + FOOTER)
    assert check_expectations(result, {"min_busbw_share": 0.8}) == [
        "min_busbw_share: needs line_rate (Gb/s per NIC and NIC count, or GB/s)"
    ]

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


# The three pieces nccl-tests prints a row in, for the 1 GiB and 2 GiB rows of ROWS.
PIECES_1G = (
    "  1073741824   268435456   float   sum   -1",
    "  25000.0   42.95   42.95   0",
    "  24000.0   44.74   44.74   0",
)
PIECES_2G = (
    "  2147483648   536870912   float   sum   -1",
    "  46000.0   46.68   46.68   0",
    "  47000.0   45.69   45.69   N/A",
)
NCCL_LINE = "node-b:200:210 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA"
FIRST_ROW = ROWS.splitlines()[0] + "\n"


def test_a_row_in_pieces_with_other_ranks_lines_between_is_joined():
    text = HEADER + FIRST_ROW
    text += PIECES_1G[0] + "\n" + NCCL_LINE + "\n[rank1]: step 1\n" + PIECES_1G[1] + "\n" + NCCL_LINE + "\n"
    text += PIECES_1G[2] + "\n" + "".join(PIECES_2G) + "\n" + FOOTER
    result = parse(text)
    assert result["parse_warnings"] == []
    assert result["rows"] == 3
    assert parse(HEADER + ROWS + FOOTER)["tables"][0]["rows"] == result["tables"][0]["rows"]


def test_an_nccl_line_spliced_into_a_row_is_cut_out_and_the_row_joined():
    text = HEADER + FIRST_ROW
    text += PIECES_1G[0] + PIECES_1G[1] + NCCL_LINE + "\n" + PIECES_1G[2] + "\n"
    # glued to the last number, and a WARN with its source location
    text += (
        PIECES_2G[0]
        + "node-b:200:210 [0] misc/socket.cc:484 NCCL WARN x\n"
        + PIECES_2G[1]
        + PIECES_2G[2]
        + "\n"
    )
    result = parse(text + FOOTER)
    assert result["parse_warnings"] == []
    assert parse(HEADER + ROWS + FOOTER)["tables"][0]["rows"] == result["tables"][0]["rows"]


def test_a_number_cut_in_two_is_joined_the_one_way_the_columns_allow():
    text = (
        HEADER + FIRST_ROW + "  1073741824   268435456   float   sum   -1  25000.0   42.9" + NCCL_LINE + "\n"
    )
    text += "5   42.95   0  24000.0   44.74   44.74   0\n" + "".join(PIECES_2G) + "\n" + FOOTER
    result = parse(text)
    assert result["parse_warnings"] == []
    assert result["tables"][0]["rows"][1]["out_of_place"]["algbw"] == 42.95


def test_pieces_join_only_pieces_with_the_same_tag():
    sources = [
        LogSource(
            "launcher",
            text="".join("[1,0]<stdout>:" + line + "\n" for line in (HEADER + FIRST_ROW).splitlines())
            + "[1,0]<stdout>:"
            + PIECES_1G[0]
            + "\n[1,1]<stdout>:  99   88   77\n"  # another rank's numbers: not the rest of the row
            + "[1,0]<stdout>:"
            + PIECES_1G[1]
            + PIECES_1G[2]
            + "\n",
        )
    ]
    result = parse_nccl_tests(sources)
    assert result["rows"] == 2
    assert result["tables"][0]["rows"][1] == parse(HEADER + ROWS)["tables"][0]["rows"][1]
    # Rank 1's numbers stay a piece of their own, named when the table ends.
    assert result["parse_warnings"] == [
        "launcher:14: a size row was cut by other output and its rest never came (or did not join into one "
        "row): 99   88   77"
    ]


def test_rows_that_cannot_be_read_keep_a_warning_naming_their_lines():
    text = HEADER + FIRST_ROW + PIECES_1G[0] + "\n" + NCCL_LINE + "\n"  # its rest never comes
    text += "".join(PIECES_2G).replace("N/A", "0  7") + "\n"
    text += FOOTER
    result = parse(text)
    assert result["rows"] == 1
    assert result["parse_warnings"] == [
        "log:13: a size row was cut by other output and its rest never came (or did not join into one row): "
        "1073741824   268435456   float   sum   -1",
        "log:15: a size row could not be read: 2147483648   536870912   float   sum   -1  46000.0   46.68   "
        "46.68   0  47000.0   45.69   45.69   0  7",
    ]
    # A row spliced with an NCCL line whose host name starts with a digit cannot be cut apart.
    spliced = HEADER + PIECES_1G[0] + "  25000.0   42.95   42.9510.0.0.2:5:5 [0] NCCL INFO x\n" + FOOTER
    (warning,) = parse(spliced)["parse_warnings"]
    assert warning.startswith("log:12: a size row with another process's NCCL line spliced into it could not")
    # An NCCL line of such a host alone is no row.
    assert (
        parse(HEADER + "10.0.0.2:5:5 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/IB/0 1 2 3 4\n")[
            "parse_warnings"
        ]
        == []
    )


def test_pieces_that_join_into_different_rows_are_named_not_guessed():
    # Without a column line the row may have 12 or 13 tokens: "0" + "24000.0" joins both ways.
    header = "\n".join(line for line in HEADER.splitlines() if "size" not in line) + "\n"
    text = header + PIECES_1G[0] + PIECES_1G[1] + NCCL_LINE + "\n"
    text += "24000.0   44.74   44.74   0\n" + FOOTER
    result = parse(text)
    assert result["rows"] == 0
    (warning,) = result["parse_warnings"]
    assert warning.startswith(
        "log:11, log:12: the pieces of a cut size row join into 2 different rows; none is kept"
    )


def test_bandwidth_is_judged_on_the_rows_read_back_never_on_the_summary_alone():
    capacity = 50.0
    text = HEADER + FIRST_ROW + PIECES_1G[0] + "\n" + NCCL_LINE + "\n" + PIECES_1G[1] + PIECES_1G[2] + "\n"
    text += PIECES_2G[0] + PIECES_2G[1] + "\n" + NCCL_LINE + "\n" + PIECES_2G[2] + "\n"
    result = parse(text + FOOTER.replace("33.1", "49.9"), capacity_gbyte_s=capacity)
    (table,) = result["tables"]
    assert table["peak_busbw"] == 46.68 and table["peak_busbw_size"] == 2147483648
    assert result["avg_busbw"] == 49.9
    assert check_expectations(result, {"min_busbw_share": 0.95}, capacity)[0].startswith(
        "min_busbw_share: expected all_reduce_perf peak bus bandwidth of at least 95% of 50.0 GB/s, "
        "found 46.68"
    )
    # A table whose rows are all lost has a summary line but no bandwidth to judge.
    summary_only = parse(HEADER + FOOTER, capacity_gbyte_s=capacity)
    assert summary_only["avg_busbw"] == 33.1 and summary_only["peak_busbw"] is None
    assert check_expectations(summary_only, {"min_busbw_share": 0.5}, capacity) == [
        "min_busbw_share: expected a bandwidth to judge, found no size rows"
    ]


def tagged(lines):
    return "".join("[1,0]<stdout>:" + line + "\n" for line in lines.splitlines())


def test_a_row_mpirun_tagged_in_the_middle_is_read_back():
    # Constructed: Open MPI's --tag-output tags every write it relays, so a row nccl-tests
    # writes in pieces carries the tag in the middle as well as in front when the pieces
    # end up on one line; another rank's tagged line can start in the middle of it too.
    text = tagged(HEADER + FIRST_ROW)
    text += "[1,0]<stdout>:" + PIECES_1G[0] + "[1,0]<stdout>:" + PIECES_1G[1] + "[1,0]<stdout>:"
    text += PIECES_1G[2] + "\n"
    text += "[1,0]<stdout>:" + PIECES_2G[0] + "[1,1]<stdout>:" + NCCL_LINE + "\n"
    # the rest of the row, cut in the middle of a number by the next write
    cut = PIECES_2G[1].rindex("46.68") + 3  # "...   46." and "68   0"
    text += (
        "[1,0]<stdout>:" + PIECES_2G[1][:cut] + "[1,0]<stdout>:" + PIECES_2G[1][cut:] + PIECES_2G[2] + "\n"
    )
    text += tagged(FOOTER)
    result = parse_nccl_tests([LogSource("launcher", text=text)])
    assert result["parse_warnings"] == []
    assert result["rows"] == 3
    assert result["tables"][0]["rows"] == parse(HEADER + ROWS + FOOTER)["tables"][0]["rows"]
    assert result["peak_busbw"] == 46.68

"""The NCCL log parser on every fixture, real and constructed, and on the cases they miss."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    LogSource,
    collect_sources,
    normalize_line,
)
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import (
    MAX_WARNINGS,
    NcclLogParser,
    check_expectations,
    info_gap,
    parse_nccl_logs,
    unverifiable,
)
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import parse_nccl_tests

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
OWN_FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl"
# Real logs people published (provenance in its README.md and INDEX.jsonl).
PUBLISHED_FIXTURES = OWN_FIXTURES / "published"


def index_cases():
    cases = []
    for directory in (PUBLISHED_FIXTURES, OWN_FIXTURES):
        index = directory / "INDEX.jsonl"
        for line in index.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                cases.append(pytest.param(directory / entry["file"], entry["expect"], id=entry["file"]))
    return cases


def parse_both_ways(path):
    """Parse with the fast scan and line by line; the two must agree exactly."""
    sources = collect_sources(paths=[str(path)])
    fast = parse_nccl_logs(sources)
    slow = NcclLogParser().feed_sources_line_by_line(sources).result()
    assert fast == slow
    return fast


@pytest.mark.parametrize(("path", "expect"), index_cases())
def test_every_fixture_gives_the_facts_its_index_promises(path, expect):
    result = parse_both_ways(path)
    tests = parse_nccl_tests(collect_sources(paths=[str(path)]))
    for key, expected in expect.items():
        if key in (
            "nccl_version",
            "cuda_version",
            "nranks",
            "init_complete_ranks",
            "seen_ranks",
            "missing_ranks",
            "transport",
            "gdr",
        ):
            assert result[key] == expected, key
        elif key == "p2p_types":
            assert set(expected) <= set(result["p2p_types"]), result["p2p_types"]
        elif key == "ib_devices":
            assert set(expected) <= {device["name"] for device in result["ib_devices"]}
        elif key == "socket_ifaces":
            assert set(expected) <= set(result["socket_ifaces"])
        elif key == "warn_lines":
            messages = [warning["message"] for warning in result["nccl_warnings"]]
            for text in expected:
                assert any(text in message for message in messages), text
        elif key == "errors":
            found = [line for error in result["errors"] for line in error["lines"] + [error["message"]]]
            for text in expected:
                assert any(text in line for line in found), (text, found)
            assert all(error["remedy"] for error in result["errors"])
        elif key == "error_kinds":
            assert sorted(error["kind"] for error in result["errors"]) == sorted(expected)
        elif key == "nccl_tests_avg_busbw":
            assert tests["avg_busbw"] == pytest.approx(expected)
        elif key == "nccl_tests_rows":
            assert tests["rows"] == expected
            assert tests["parse_warnings"] == []
        elif key == "nccl_tests_peak_busbw":
            # Judged on the rows of the large sizes, never on '# Avg bus bandwidth'.
            assert tests["peak_busbw"] == pytest.approx(expected)
            assert tests["peak_busbw"] != tests["avg_busbw"]
        elif key == "hosts":
            assert result["hosts"] == expected
        elif key == "error_ranks":
            assert {error["kind"]: error["ranks"] for error in result["errors"]} == expected
        else:
            pytest.fail("INDEX.jsonl has an expectation this test does not know: %s" % key)
    assert result["parse_warnings"] == []


def parse_text(text):
    sources = [LogSource("log", text=text)]
    fast = parse_nccl_logs(sources)
    assert fast == NcclLogParser().feed_sources_line_by_line(sources).result()
    return fast


def test_a_log_without_nccl_says_so():
    result = parse_text("epoch 1 loss 0.3\nusing gloo backend\n")
    assert result["nccl_used"] is False
    assert result["nranks"] is None
    assert result["transport"] is None
    assert result["gdr"] is None
    assert check_expectations(result, {"nccl_used": True}) == [
        "nccl_used: expected NCCL output, found no NCCL lines (set NCCL_DEBUG=INFO for every rank, and use "
        "the nccl backend on GPUs)"
    ]


def test_old_nccl_lines_and_the_warn_prefix_with_a_source_location_are_read():
    result = parse_text(
        "node1:100:100 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n"
        "node1:100:120 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC\n"
        "node1:100:120 [0] NCCL INFO Ring 00 : 1[1] -> 2[0] [send] via NET/IB/0\n"
        "node1:100:120 [0] NCCL INFO comm 0x7f5b8c001de0 rank 0 nranks 4 cudaDev 0 nvmlDev 0"
        " - Init COMPLETE\n"
        "node1:100:120 [0] init.cc:738 NCCL WARN Duplicate GPU detected : rank 0 and rank 1"
        " both on CUDA device 1000\n"
    )
    assert result["transport"] == "IB"
    assert result["gdr"] is False  # a network path without GDRDMA
    assert result["p2p_types"] == ["P2P/IPC"]
    assert result["init_complete_ranks"] == [0]
    assert result["missing_ranks"] == [1, 2, 3]
    assert result["nccl_warnings"][0] == {
        "host": "node1",
        "pid": 100,
        "message": "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000",
        "line": "log:5",
    }
    (error,) = result["errors"]
    assert error["kind"] == "duplicate_gpu"
    assert "torch.cuda.set_device" in error["remedy"]


def test_glued_lines_are_split_and_each_piece_read():
    result = parse_text(
        "h:1:2 [1] NCCL INFO comm 0x1 rank 1 nrh:3:4 [0] NCCL INFO comm 0x2 rank 0 nranks 4 ch:1:2 [1] NCCL "
        "INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'\n"
    )
    assert result["nccl_lines"] == 3
    assert result["nranks"] == 4
    assert result["gdr"] is False


def test_gdr_is_read_from_plugin_paths_with_spaces_and_from_ring_lines():
    result = parse_text(
        "h:1:2 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA\n"
    )
    assert result["gdr"] is True
    assert result["transport"] == "Plugin"
    assert parse_text("h:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n")["gdr"] is True
    assert parse_text("h:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0\n")["gdr"] is False
    assert (
        parse_text("h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n")["gdr"]
        is False
    )


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("P2P/IPC/read", "P2P/IPC"),
        ("P2P/CUMEM/read", "P2P/CUMEM"),
        ("P2P/direct pointer/read", "P2P/direct"),
        ("SHM/direct/direct", "SHM"),
        ("COLLNET/IBext/0/GDRDMA", "CollNet"),
    ],
)
def test_intra_node_paths_are_normalised(path, kind):
    assert parse_text("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via %s\n" % path)["p2p_types"] == [
        kind
    ]


def test_nvls_is_reported_when_connected_or_given_channels():
    assert "NVLS" in parse_text("h:1:2 [0] NCCL INFO Connected NVLS tree\n")["p2p_types"]
    counts = parse_text(
        "h:1:2 [0] NCCL INFO 16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, "
        "2 p2p channels per peer\n"
    )
    assert counts["channels"] == {"coll": 16, "collnet": 0, "nvls": 16, "p2p": 16, "p2p_per_peer": 2}
    assert counts["p2p_types"] == ["NVLS"]


def test_collector_prefixes_colour_codes_and_bad_bytes_are_tolerated():
    text = (
        b"[pod/w-0/pytorch] 2025-05-01T10:00:00.000000000Z h:1:2 [0] NCCL INFO Using network IB\n"
        b"2025-05-01T10:00:00.1Z stdout F h:1:2 [0] \x1b[33mNCCL WARN NET/IB : Got completion \xff\xfe"
        b" with error 12\x1b[0m\n"
        b"[1,3]<stdout>:h:1:2 [0] NCCL INFO comm 0xab rank 3 nranks 4 cudaDev 0 busId 1000 - Init COMPLETE\n"
    )
    sources = [LogSource("log", text=text)]
    result = parse_nccl_logs(sources)
    assert result == NcclLogParser().feed_sources_line_by_line(sources).result()
    assert result["transport"] == "IB"
    assert result["warning_count"] == 1
    assert "Got completion" in result["nccl_warnings"][0]["message"]
    assert result["init_complete_ranks"] == [3]
    assert result["parse_warnings"] == ["1 lines read held invalid UTF-8 (replaced)"]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "h:1:2 [0] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 96378)",
            "shared_memory",
        ),
        (
            "h:1:2 [0] NCCL WARN Net : Connect to 10.0.0.2<43211> failed : Connection refused",
            "socket_connect",
        ),
        ("h:1:2 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'", "cuda_out_of_memory"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_out_of_memory"),
        ("RuntimeError: NCCL communicator was aborted on rank 3.", "aborted"),
        ("h:1:2 [0] NCCL WARN NET/IB : Got completion from peer with error 12, opcode 0, len 0", None),
    ],
)
def test_failures_are_classified_with_a_remedy(line, kind):
    result = parse_text(line + "\n")
    assert [error["kind"] for error in result["errors"]] == ([kind] if kind else [])
    for error in result["errors"]:
        assert error["count"] == 1
        assert error["lines"] == ["log:1: " + line]
        assert error["remedy"]


IBV_REG_MR_WARN = (
    "h:1:2 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n"
)


def test_the_memlock_remedy_names_the_collection_roles():
    (error,) = parse_text(IBV_REG_MR_WARN)["errors"]
    for text in (
        "gpuops.training.crio_limits",
        "containerd_limits",
        "machineconfig_limits",
        "IPC_LOCK",
        "ulimit -l",
    ):
        assert text in error["remedy"]


def test_warnings_and_samples_are_bounded():
    result = parse_text(IBV_REG_MR_WARN * (MAX_WARNINGS + 50))
    assert result["warning_count"] == MAX_WARNINGS + 50
    assert len(result["nccl_warnings"]) == MAX_WARNINGS
    assert result["errors"][0]["count"] == MAX_WARNINGS + 50
    assert len(result["errors"][0]["lines"]) == 5


def test_a_rank_counts_as_initialised_only_when_every_communicator_completed():
    result = parse_text(
        "h:1:2 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 busId 1 - Init COMPLETE\n"
        "h:3:4 [1] NCCL INFO comm 0xb rank 1 nranks 2 cudaDev 1 busId 2 - Init COMPLETE\n"
        "h:1:2 [0] NCCL INFO ncclCommInitRank comm 0xc rank 0 nranks 2 cudaDev 0 busId 1 - Init START\n"
        "h:1:2 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 busId 1 - Destroy COMPLETE\n"
    )
    assert result["init_complete_ranks"] == [1]
    assert result["missing_ranks"] == [0]
    assert len(result["communicators"]) == 3


GARBLED_TRACE = PUBLISHED_FIXTURES / "socket-docker-eth0-sharp-plugin-garbled-trace.log"
# Constructed: the Init COMPLETE lines NCCL 2.19 prints for ranks 0 and 1 of that log later on
# (its published cut ends before them); host, pid, thread, device, address and bus id as the
# log gives them for each rank, the commId ours.
GARBLED_TRACE_COMPLETE = "".join(
    "c0b58536a5f1:%d:%d [%d] NCCL INFO comm %s rank %d nranks 4 cudaDev %d nvmlDev %d busId %s "
    "commId 0x7c1e5b2a90d34f61 - Init COMPLETE\n" % (pid, tid, rank, comm, rank, rank, rank, bus)
    for pid, tid, rank, comm, bus in (
        (324666, 325478, 0, "0x56074772e360", "27000"),
        (324667, 325481, 1, "0x558483af6490", "2d000"),
    )
)


def test_a_communicator_announced_in_a_line_cut_short_is_the_one_that_completes():
    # Line 21 of the real log: rank 1's Init START is cut short ("rank 1 nr") by rank 0's,
    # itself cut short ("rank 0 nranks 4 c") by rank 1's next line. Rank 0's piece has no
    # prefix of its own: it is rank 0's communicator all the same, not a second one.
    result = parse_text(GARBLED_TRACE.read_text() + GARBLED_TRACE_COMPLETE)
    assert [(comm["host"], comm["pid"], comm["rank"]) for comm in result["communicators"]] == [
        ("c0b58536a5f1", 324666, 0),
        ("c0b58536a5f1", 324667, 1),
    ]
    assert result["init_complete_ranks"] == [0, 1]
    assert result["missing_ranks"] == [2, 3]
    # The cut announcement read after the whole line joins it too (constructed order).
    lines = GARBLED_TRACE_COMPLETE.splitlines(keepends=True)
    glued = "c0b58536a5f1:324667:325481 [1] NCCL INFO x c0b58536a5f1:324666:325478 [0] NCCL INFO comm "
    glued += "0x56074772e360 rank 0 nranks 4 c\n"
    result = parse_text(lines[0] + glued + lines[1])
    assert (result["communicator_count"], result["init_complete_ranks"]) == (2, [0, 1])


def test_a_result_that_lists_missing_ranks_never_passes():
    result = parse_text(
        "h:1:2 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 busId 1 - Init COMPLETE\n"
        "h:3:4 [1] NCCL INFO comm 0xb rank 1 nranks 2 cudaDev 1 busId 2 - Init START\n"
    )
    assert result["missing_ranks"] == [1]
    missing = (
        "init_complete_ranks: expected ranks 0-1 to reach Init COMPLETE, rank 1 did not on host h (read "
        "those ranks' logs: they hung or failed during NCCL init)"
    )
    assert check_expectations(result, {}) == [missing]
    assert check_expectations(result, {"transport": "IB"}) == [
        missing,
        "transport: expected IB, found no network",
    ]
    assert check_expectations(result, {"nranks": 2}) == [missing]
    # NCCL_DEBUG=WARN said, yet INFO lines are there: what they show still counts.
    assert check_expectations(result, {"nranks": 2, "debug": "WARN"}) == [missing]


def test_without_an_init_line_the_world_size_comes_from_the_abort_and_destroy_lines():
    # Real: the tail of a 16-rank torchrun job as one of its two nodes printed it, ranks 0-7
    # aborting their communicators; no init line survived the cut.
    result = parse_both_ways(OWN_FIXTURES / "abort-complete-tail-8of16-ranks.log")
    assert (result["nranks"], result["nranks_source"]) == (16, "teardown")
    assert result["seen_ranks"] == list(range(8))
    assert result["missing_ranks"] == list(range(8, 16))
    assert result["init_complete_ranks"] == [] and result["communicators"] == []
    assert result["hosts"] == ["lsp-ws1"]
    (failure,) = check_expectations(result, {"nranks": 16})
    assert failure == (
        "init_complete_ranks: expected ranks 0-15 to reach Init COMPLETE; no NCCL init line is in the log, "
        "and ranks 8-15 appear in none of its lines (collect those ranks' logs, and read them: they "
        "hung or failed during NCCL init if they never reached it)"
    )
    assert check_expectations(result, {}) == [failure]
    # Real: the last lines of a 2-rank sendrecv_perf run (a contiguous cut of the published log,
    # from its 160th line): both ranks destroy their communicator.
    lines = (
        (PUBLISHED_FIXTURES / "ib-gdrdma-2node-a100-sendrecv-2165.log").read_text().splitlines(keepends=True)
    )
    result = parse_text("".join(lines[159:]))
    assert (result["nranks"], result["nranks_source"], result["seen_ranks"]) == (2, "teardown", [0, 1])
    assert result["missing_ranks"] == [] and check_expectations(result, {"nranks": 2}) == []
    assert result["hosts"] == ["n013", "n014"]


def line_numbers(lines):
    return [int(line.split(": ", 1)[0].rsplit(":", 1)[1]) for line in lines]


def test_the_last_error_torch_prints_after_an_nccl_error_is_part_of_its_evidence():
    # Real (NVIDIA/nccl issue #1247): torch's DistBackendError behind Ray's and vLLM's
    # prefixes, then ncclInternalError's line, "Last error:" and what failed.
    result = parse_both_ways(OWN_FIXTURES / "torch-internal-error-last-error-ray-vllm-1247.log")
    (error,) = result["errors"]
    assert line_numbers(error["lines"]) == [6, 8, 9]
    assert error["lines"][1].endswith(" ERROR 04-07 00:57:46 ray_utils.py:45] Last error:")
    assert error["lines"][2].endswith(
        " ERROR 04-07 00:57:46 ray_utils.py:45] Attribute busid of node nic not found"
    )
    assert error["message"] == (
        "NCCL reported an internal error (ncclInternalError); NCCL's last error: Attribute busid of node nic "
        "not found"
    )
    (failure,) = check_expectations(result, {"no_errors": True})
    assert "NCCL's last error: Attribute busid of node nic not found" in failure
    # Real (ours): two ranks on one GPU, torch's error and its evidence printed by each in turn.
    result = parse_both_ways(OWN_FIXTURES / "h100-duplicate-gpu-2rank-2289.log")
    error = {error["kind"]: error for error in result["errors"]}["invalid_usage"]
    assert line_numbers(error["lines"]) == [78, 79, 80, 81, 83, 84, 85, 86]
    assert error["message"] == (
        "NCCL reported invalid usage; NCCL's last error: Duplicate GPU detected : rank 0 and rank 1 both on "
        "CUDA device 60 | Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60"
    )


def test_only_the_same_rank_s_last_error_close_behind_is_evidence():
    # Constructed, in the forms of the fixtures above.
    error_line = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.21.5"
    )
    result = parse_text(
        "[rank1]: " + error_line + "\n"
        "[rank0]: step 3\n"
        "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed\n"
        "[rank0]: Last error:\n"  # another rank's
        "[rank1]: Last error:\n"
        "[rank0]: step 4\n"
        "[rank1]: socketStartConnect: Connect to 10.0.0.2<41235> failed : Connection refused\n"
        "[rank2]: " + error_line + "\n"
        "[rank2]: Last error: NET/Socket : no usable interface\n"  # torch 2.0's one-line form
        "[rank3]: " + error_line + "\n"
        "a\nb\nc\nd\ne\n"
        "[rank3]: Last error:\n"  # too far behind to be its
        "[rank3]: x\n"
    )
    (error,) = result["errors"]
    assert line_numbers(error["lines"]) == [1, 5, 7, 8, 9, 10]
    assert error["ranks"] == [1, 2, 3]
    assert error["message"].endswith(
        "; NCCL's last error: socketStartConnect: Connect to 10.0.0.2<41235> failed : Connection refused | "
        "NET/Socket : no usable interface"
    )


def test_nranks_comes_from_nccl_tests_rank_lines_when_nccl_printed_nothing():
    result = parse_text(
        "#  Rank  0 Group  0 Pid 448056 on cnode2-001 device  0 [0000:9d:00] NVIDIA H100 80GB HBM3\n"
        "#  Rank  1 Group  0 Pid 392912 on cnode2-004 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3\n"
        "[Rank 0] step 10\n"
    )
    assert result["nranks"] == 2
    assert result["nranks_source"] == "nccl-tests"
    assert result["hosts"] == ["cnode2-001", "cnode2-004"]
    assert result["nccl_used"] is True
    # Init COMPLETE is not printed without NCCL_DEBUG=INFO: do not fail on it, nor list a rank
    # as missing.
    assert result["missing_ranks"] == []
    assert check_expectations(result, {"nranks": 2}) == []
    assert check_expectations(result, {}) == []


def test_unmet_expectations_name_field_expected_found_and_remedy():
    result = parse_nccl_logs(collect_sources(paths=[str(OWN_FIXTURES / "socket-fallback-ib-profile.log")]))
    failures = check_expectations(result, {"nccl_used": True, "nranks": 8, "transport": "IB", "gdr": True})
    assert failures[0].startswith("nranks: expected a communicator of 8 ranks, found 4")
    assert failures[1].startswith(
        "init_complete_ranks: expected ranks 0-7 to reach Init COMPLETE, ranks 4-7 did not"
    )
    assert failures[2].startswith("transport: expected IB, found Socket (NCCL fell back to TCP sockets.")
    for text in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "gpuops.training.secondary_networks"):
        assert text in failures[2]
    assert failures[3].startswith("gdr: expected GPUDirect RDMA, found it disabled")
    assert len(failures) == 4


def test_no_errors_turns_each_classified_failure_into_a_message():
    result = parse_nccl_logs(collect_sources(paths=[str(OWN_FIXTURES / "ibv-reg-mr-memlock.log")]))
    failures = check_expectations(result, {"no_errors": True})
    # Neither rank reached Init COMPLETE: that fails whatever is expected.
    (init,) = check_expectations(result, {})
    assert init.startswith(
        "init_complete_ranks: expected ranks 0-1 to reach Init COMPLETE, ranks 0, 1 did not on host "
        "gpu-node-a"
    )
    assert failures[0] == init
    assert [failure.split(":")[1].split()[-1] for failure in failures[1:]] == [
        "memory_registration",
        "system_error",
    ]
    assert (
        "ibv-reg-mr-memlock.log:14: gpu-node-a:41:59 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr"
        in failures[1]
    )


def test_long_lines_are_cut_and_a_file_is_read_across_chunk_boundaries(tmp_path, monkeypatch):
    from ansible_collections.gpuops.training.plugins.module_utils import log_sources

    monkeypatch.setattr(log_sources, "READ_CHUNK_BYTES", 64)
    lines = [
        "h:1:2 [0] NCCL INFO Using network IB",
        "x" * (log_sources.MAX_LINE_BYTES + 10) + " NCCL WARN hidden in the cut-off tail",
        "h:1:2 [0] NCCL INFO comm 0xa rank 0 nranks 1 cudaDev 0 busId 1 - Init COMPLETE",
        "h:1:2 [0] NCCL WARN last line without a newline",
    ]
    path = tmp_path / "rank0.log"
    path.write_text("\n".join(lines))
    result = parse_both_ways(path)
    assert result["lines"] == 4
    assert result["warning_count"] == 1
    assert result["nccl_warnings"][0]["line"].endswith("rank0.log:4")
    assert result["init_complete_ranks"] == [0]


def test_an_nccl_message_starting_mid_line_is_read_with_its_host():
    result = parse_text(
        "node-a:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
        "step 12 loss 0.5node-b:123:456 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 2000"
        " - Init COMPLETE\n"
        "epoch 3 acc=0.91 gpu-7:9:9 [0] misc/socket.cc:50 NCCL WARN Net : Connect to 10.0.0.2<4321> failed"
        " : Connection refused\n"
    )
    assert result["init_complete_ranks"] == [0, 1]
    assert result["hosts"] == ["gpu-7", "node-a", "node-b"]
    assert {(comm["host"], comm["pid"]) for comm in result["communicators"]} == {
        ("node-a", 1),
        ("node-b", 123),
    }
    assert result["nccl_warnings"][0]["host"] == "gpu-7"
    assert [error["kind"] for error in result["errors"]] == ["socket_connect"]


@pytest.mark.parametrize(
    ("line", "kinds", "ranks"),
    [
        (
            "[rank1]:[E501 10:10:00.123 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
            ["collective_timeout"],
            [1],
        ),
        (
            "[E ProcessGroupNCCL.cpp:737] [Rank 6] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1802212 milliseconds "
            "before timing out.",
            ["collective_timeout"],
            [6],
        ),
        (
            "[PG ID 0 PG GUID 0(default_pg) Rank 3] Heartbeat monitor timed out! Process will be terminated "
            "after dumping debug info. workMetaList_.size()=1 (ProcessGroupNCCL.cpp:1423)",
            ["collective_timeout"],
            [3],
        ),
        (
            "0: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, internal error - please report this issue to the NCCL developers, "
            "NCCL version 2.18.1",
            ["internal_error"],
            [0],
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, internal error - please report this issue "
            "to the NCCL developers, NCCL version 2.21.5",
            ["internal_error"],
            [],
        ),
        (
            "[1,2]<stderr>:RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, "
            "unhandled system error, NCCL version 2.7.8",
            ["system_error"],
            [2],
        ),
        (
            "[pod/w-1/pytorch] [rank5]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
            "distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, "
            "NCCL version 2.19.3",
            ["remote_exited"],
            [5],
        ),
        (
            "[rank4]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
            ["invalid_usage"],
            [4],
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.19.3",
            ["cuda_error"],
            [],
        ),
        ("RuntimeError: NCCL error: invalid argument, NCCL version 2.7.8", ["nccl_error"], []),
        ("RuntimeError: NCCL error: unhandled system error, NCCL version 2.7.8", ["system_error"], []),
        ("RuntimeError: NCCL communicator was aborted on rank 3.", ["aborted"], [3]),
        # not failures: torch's other lines that name nccl
        ("[rank0]: ValueError: backend must be nccl, got gloo", [], []),
        ("Error: nccl-tests not found", [], []),
    ],
)
def test_pytorch_nccl_failures_are_classified_with_a_remedy_and_the_rank(line, kinds, ranks):
    result = parse_text(line + "\n")
    assert result["nccl_lines"] == 0
    assert sorted(error["kind"] for error in result["errors"]) == kinds
    for error in result["errors"]:
        assert error["remedy"]
        assert error["ranks"] == ranks
        assert error["lines"] == ["log:1: " + normalize_line(line)[0]]


def test_a_log_without_nccl_info_still_names_torchs_nccl_failures():
    result = parse_text(
        "[rank1]: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.\n"
    )
    assert result["nccl_used"] is False
    failures = check_expectations(result, {"nccl_used": True, "no_errors": True})
    assert failures[0].startswith("nccl_used: expected NCCL output")
    assert failures[1].startswith(
        "no_errors: expected none, found collective_timeout: a collective operation timed out (a rank "
        "stopped taking part or the network stalled) (1 lines; ranks 1, first: log:1: "
    )


# A rank's output under NCCL_DEBUG=WARN on a run that went well: NCCL prints nothing.
WARN_LEVEL_RUN = '{"event":"run_start","rank":0}\nepoch 0 loss 1.2\n{"event":"run_end","rank":0}\n'
INFO_EXPECT = {"nccl_used": True, "nranks": 2, "transport": "IB", "gdr": True, "no_errors": True}


@pytest.mark.parametrize(
    ("debug", "subsys", "gap"),
    [
        ("INFO", "INIT,NET", None),
        ("info", "", None),
        ("TRACE", "ALL", None),
        ("INFO", "^NET,GRAPH", None),
        ("INFO", None, None),
        (None, "NET", None),  # the run's settings are not known: everything is checked
        ("WARN", "INIT,NET", "NCCL_DEBUG=WARN prints no INFO lines"),
        ("VERSION", "", "NCCL_DEBUG=VERSION prints no INFO lines"),
        ("", "", "NCCL_DEBUG was not set, so NCCL printed no INFO lines"),
        ("INFO", "NET,GRAPH", "NCCL_DEBUG_SUBSYS=NET,GRAPH leaves out INIT, whose INFO lines carry them"),
        ("INFO", "^INIT", "NCCL_DEBUG_SUBSYS=^INIT leaves out INIT, whose INFO lines carry them"),
    ],
)
def test_the_info_gap_is_read_from_nccl_debug_and_its_subsystems(debug, subsys, gap):
    assert info_gap(debug, subsys) == gap


def test_a_run_with_nccl_info_lines_off_is_not_verifiable_instead_of_failing():
    result = parse_text(WARN_LEVEL_RUN)
    # With INFO promised, the same log fails: NCCL printed nothing.
    assert check_expectations(result, dict(INFO_EXPECT, debug="INFO"))[0].startswith(
        "nccl_used: expected NCCL output"
    )
    expect = dict(INFO_EXPECT, debug="WARN", debug_subsys="INIT,NET")
    assert check_expectations(result, expect) == []
    (statement,) = unverifiable(expect)
    assert statement.startswith(
        "not verifiable: nccl_used, nranks, transport, gdr (the NCCL transport, GPUDirect RDMA and every "
        "rank's NCCL init): NCCL_DEBUG=WARN prints no INFO lines. Set NCCL_DEBUG=INFO with "
        "NCCL_DEBUG_SUBSYS=INIT,NET"
    )


def test_an_info_run_whose_subsystems_hide_init_is_not_verifiable():
    result = parse_nccl_logs(collect_sources(paths=[str(OWN_FIXTURES / "socket-fallback-ib-profile.log")]))
    expect = {"transport": "IB", "debug": "INFO", "debug_subsys": "NET"}
    assert check_expectations(result, expect) == []
    assert "NCCL_DEBUG_SUBSYS=NET leaves out INIT" in unverifiable(expect)[0]
    # Nothing asked that needs the INFO lines: nothing to say.
    assert unverifiable({"no_errors": True, "debug": "WARN"}) == []


def test_errors_are_still_judged_when_the_info_lines_are_off():
    """NCCL's WARN lines and PyTorch's NCCL errors are printed whatever NCCL_DEBUG says."""
    log = OWN_FIXTURES / "torch-internal-error-kubectl-prefix-no-info.log"
    result = parse_nccl_logs(collect_sources(paths=[str(log)]))
    failures = check_expectations(result, dict(INFO_EXPECT, debug="WARN"))
    assert failures and all(failure.startswith("no_errors: expected none, found ") for failure in failures)
    assert any("internal_error" in failure for failure in failures)

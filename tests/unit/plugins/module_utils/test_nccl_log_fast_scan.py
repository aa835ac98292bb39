"""The fast scan of the NCCL log parser reads what the line-by-line parser reads.

The fast scan steps over NCCL lines in C and learns, as it goes, which channel paths and
messages it may step over from then on. These tests feed both parsers logs built from
the pieces that decide what is skipped (markers, channel paths, repeated messages, glued
lines, colour codes, carriage returns, invalid UTF-8, over-long lines, chunk boundaries)
and require the same result.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils import log_sources
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource, collect_sources
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import (
    MAX_COMMUNICATORS,
    NcclLogParser,
    parse_nccl_logs,
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]

HEADERS = [
    b"node1:100:100 [0] ",
    b"node1:100:120 [0] ",
    b"node2:200:200 [1] ",
    b"gpu-b:7:9 [3] misc/ibvwrap.cc:190 ",
    b"[pod/w-0/pytorch] node1:100:100 [0] ",
    b"2025-05-01T10:00:00.000000000Z stdout F node2:200:200 [1] ",
    b"[1,3]<stdout>:node3:300:300 [2] ",
    b"10.0.0.1:5:5 [0] ",
    b"",
    # launcher prefixes, stacked, and an NCCL line glued behind other output
    b"0: node1:100:100 [0] ",
    b" 12: [rank3]:node3:300:300 [2] ",
    b"(head, rank=0, pid=5) [h-0:0]:node2:200:200 [1] ",
    b"(RayTrainWorker pid=7, ip=10.0.0.2) [rank1]: node2:200:200 [1] ",
    b"Nov 26 07:16:57 node1 train.sh[100]: node1:100:100 [0] ",
    b"2025-05-01T10:00:00Z [1,0]<stdout>:[rank0]:node1:100:100 [0] ",
    b"step 12 loss 0.5node2:200:200 [1] ",
    b"Mar  3 14:0",
]
MARKERS = (
    b"NCCL INFO ",
    b"NCCL INFO ",
    b"NCCL INFO ",
    b"NCCL WARN ",
    b"NCCL TRACE ",
    b"NCCL INFO",
    b"NCCL ERROR ",
)
PATHS = [
    b"P2P/CUMEM/read",
    b"P2P/IPC",
    b"NET/IB/0/GDRDMA",
    b"NET/IB/1",
    b"SHM/direct/direct",
    b"NET/Socket/0",
]
BODIES = [
    b"Channel 00/0 : 0[0] -> 1[1] via %s",
    b"Channel 01/1 : 8[0] -> 0[0] [receive] via %s",
    b"Channel 02/0 : 1[1] -> 9[1] [send] via %s",
    b"Ring 00 : 0[0] -> 1[1] via %s",
    b"Channel 03 : 0[0] -> 1[1] via %s via %s",
    b"Channel a 0 -> 1 via %s",
    b"Chain via %s",
    b"Channel 00 : 0[0] -> 1[1]",
    b"CPU/0 (1/1/2)",
    b"CC Off, workFifoBytes 1048576",
    b"Connected all rings, use ring PXN 0 GDR 1",
    b"Connected all rings, use ring PXN 0 GDR 0",
    b"Connected all trees",
    b"Connected NVLS tree",
    b"Connected all rings via %s",
    b"comm 0x%x rank %d nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9d4c - Init START",
    b"ncclCommInitRank comm 0x%x rank %d nranks 4 cudaDev 1 nvmlDev 1 busId 2b000 commId 0x9 - Init COMPLETE",
    b"comm 0x%x rank %d nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
    b"comm 0x%x rank %d nranks 4 cudaDev 0 busId 1000 - Init COMPLETE",
    b"comm 0x%x rank %d nranks 2 cudaDev 0 busId 1000 - Destroy COMPLETE",
    b"comm 0x%x rank %d nranks 2 cudaDev 0 busId 1000 - Abort COMPLETE",
    b"comm 0x%x rank %d nranks x cudaDev 0 - Init COMPLETE",
    b"Bootstrap : Using eth0:10.0.0.1<0>",
    b"Bootstrap : Using ib0:10.1.0.%d<0>",
    b"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.%d<0>",
    b"NET/IB : No device found.",
    b"NET/Socket : Using [0]eth0:10.0.0.1<0>",
    b"NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
    b"NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'",
    b"GPU Direct RDMA Enabled for GPU 1b000 / HCA 0",
    b"Using network IB",
    b"Using network Socket",
    b"Using network AWS Libfabric",
    b"NCCL version 2.21.5+cuda12.4",
    b"NCCL_IB_HCA set to mlx5_0,mlx5_1",
    b"NCCL_SOCKET_IFNAME set by environment to eth0",
    b"NCCL INFO Using network IB",
    b"16 coll channels, 16 collnet channels, 16 nvls channels, 16 p2p channels, 2 p2p channels per peer",
    b"4 coll channels, 0 nvls channels, 4 p2p channels, 1 p2p channels per peer",
    b"NVLS comm 0x1 headRank 0 nHeads 2",
    b"Successfully loaded external plugin libnccl-net.so",
    b"cudaDriverVersion 12040",
    b"Trees [0] 1/-1/-1->0->-1",
    b"Init timings - ncclCommInitRank: rank 0 nranks 4 total 1.20",
    b"Call to ibv_reg_mr failed with error Cannot allocate memory",
    b"Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000",
    b"",
    b" ",
    b"\x1b[0mConnected all rings, use ring PXN 0 GDR 1",
    b"C\x1b[0monnected all rings, use ring PXN 0 GDR 1",
    b"Using network \xff\xfeIB",
    b"Channel 00 : 0[0] -> 1[1] via P2P/\xffIPC",
]
OTHER_LINES = [
    b"[rank3]: step 10 loss 2.31 lr 1.0e-04",
    b"#  Rank  0 Group  0 Pid 448056 on cnode2-001 device  0 [0000:9d:00] NVIDIA H100 80GB HBM3",
    b"#  Rank  1 Group  0 Pid 392912 on cnode2-004 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    b"RuntimeError: NCCL communicator was aborted on rank 3.",
    b"NC\x1b[0mCL INFO Using network Socket",
    b"\x1bNCCL INFO Using network Socket",
    b"export NCCL_DEBUG=INFO",
    b"torch.distributed.DistBackendError: NCCL error in: unhandled system error",
    b"[pod/NCCL/x] CUDA out of memory",
    b"[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
    b"0: ncclInternalError: Internal check failed.",
    b"(W pid=2, ip=10.0.0.3) [rank5]: ncclRemoteError: A call failed possibly due to a network error",
    b"[1,0]<stderr>:RuntimeError: NCCL error: invalid argument, NCCL version 2.7.8",
    b"[rank2]:[E501 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: "
    b"WorkNCCL(SeqNum=4, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 milliseconds before "
    b"timing out.",
    b"[PG ID 0 PG GUID 0(default_pg) Rank 3] Heartbeat monitor timed out!",
    b"Error: nccl-tests not found",
    b"ValueError: Error: no nccl",
    # torch's NCCL error, then its evidence: the scan reads the lines after it ahead
    b"[rank1]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, internal error, NCCL version 2.18",
    b"Last error:",
    b"[rank1]: Last error:",
    b"[rank0]: Last error: Call to ibv_reg_mr failed with error Cannot allocate memory",
    b"Attribute busid of node nic not found",
    b"[rank1]: Attribute busid of node nic not found",
]
ENDINGS = [b"\n", b"\n", b"\n", b"\n", b"\r\n", b"\r\n\n", b"\r"]


@st.composite
def nccl_message(draw, markers=MARKERS):
    body = draw(st.sampled_from(BODIES))
    values = tuple(
        draw(st.sampled_from(PATHS)) if spec == b"%s" else draw(st.integers(0, 3))
        for spec in re.findall(rb"%[sdx]", body)
    )
    return draw(st.sampled_from(markers)) + (body % values if values else body)


@st.composite
def log_line(draw):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from(OTHER_LINES))
    if kind < 7:  # an NCCL INFO line as NCCL prints it
        return draw(st.sampled_from(HEADERS)) + draw(nccl_message(markers=[b"NCCL INFO "]))
    line = draw(st.sampled_from(HEADERS)) + draw(nccl_message())
    while draw(st.integers(0, 3)) == 0:  # lines glued together by interleaved writes
        line = line[: draw(st.integers(0, len(line)))] + draw(st.sampled_from(HEADERS)) + draw(nccl_message())
    if draw(st.integers(0, 3)) == 0:
        line = line[: draw(st.integers(0, len(line)))] + draw(
            st.sampled_from([b"\x1b[32m", b"\xff", b"NCCL", b" via "])
        )
    return line


@st.composite
def nccl_log(draw):
    # A pool of lines drawn again and again: repeats are what the fast scan learns from.
    pool = draw(st.lists(log_line(), min_size=1, max_size=25))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=120))
    endings = draw(st.lists(st.sampled_from(ENDINGS), min_size=len(picks), max_size=len(picks)))
    text = b"".join(pool[pick] + ending for pick, ending in zip(picks, endings, strict=True))
    if draw(st.booleans()):
        text = text.rstrip(b"\n")
    return text


def both_ways(sources):
    fast = parse_nccl_logs(sources)
    slow = NcclLogParser().feed_sources_line_by_line(sources).result()
    assert fast == slow
    return fast


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(text=nccl_log())
def test_inline_logs_read_the_same_both_ways(text):
    both_ways([LogSource("log", text=text)])


@SETTINGS
@given(text=nccl_log(), chunk=st.sampled_from([64, 200, 4096]))
def test_files_read_in_small_chunks_read_the_same_both_ways(tmp_path_factory, text, chunk):
    path = tmp_path_factory.mktemp("log") / "rank.log"
    path.write_bytes(text)
    with pytest.MonkeyPatch.context() as patcher:
        patcher.setattr(log_sources, "READ_CHUNK_BYTES", chunk)
        both_ways(collect_sources(paths=[str(path)]))


def test_over_long_lines_count_only_what_the_cut_keeps(tmp_path):
    pad = b"x" * (log_sources.MAX_LINE_BYTES - 20)
    lines = [
        b"h:1:2 [0] NCCL INFO Using network IB",
        pad + b" h:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1",  # the marker straddles the cut
        pad * 2 + b" NCCL INFO Trees [0] 1/-1/-1->0->-1",  # past the cut: not an NCCL line
        pad + b"NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC",
        b"h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC",
    ]
    path = tmp_path / "long.log"
    path.write_bytes(b"\n".join(lines * 3) + b"\n")
    result = both_ways(collect_sources(paths=[str(path)]))
    assert result["lines"] == 15
    assert result["p2p_types"] == ["P2P/IPC"]


def test_a_known_channel_path_behind_an_unknown_one_is_not_skipped():
    text = b"".join(
        [
            b"h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\n" * 3,
            b"h:1:2 [0] NCCL INFO Channel 01 : 0[0] -> 1[1] via SHM/direct via P2P/IPC\n",
            b"h:1:2 [0] NCCL INFO Channel 02 : 0 -> h:1:2 [0] NCCL INFO Ring 01 : 1 -> 2 via P2P/IPC\n",
            b"h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via NET/IB/0 h:1:2 [0] NCCL INFO Channel 00 : "
            b"0[0] -> 1[1] via P2P/IPC\n",
        ]
    )
    result = both_ways([LogSource("log", text=text)])
    assert result["p2p_types"] == ["P2P/IPC", "SHM"]
    assert result["net_paths"] == ["NET/IB/0 h:1:2 [0]"]
    assert result["nccl_lines"] == 8


def test_repeated_messages_and_communicators_read_the_same_both_ways(tmp_path):
    lines = []
    for round_index in range(3):
        for rank in range(16):
            host = b"node%d:%d:%d [%d] NCCL INFO " % (rank // 8, 100 + rank % 8, 3000 + round_index, rank % 8)
            comm = 0x7F00 + round_index * 0x100 + rank
            lines += [
                host + b"Bootstrap : Using eth0:10.0.0.%d<0>" % rank,
                host + b"NCCL_IB_HCA set to mlx5_0",
                host + b"ncclCommInitRank comm 0x%x rank %d nranks 16 cudaDev %d nvmlDev %d busId %d000 "
                b"commId 0x9d - Init START" % (comm, rank, rank % 8, rank % 8, rank % 8),
                host
                + b"comm 0x%x rank %d nRanks 16 nNodes 2 localRanks 8 localRank %d MNNVL 0"
                % (comm, rank, rank % 8),
                host + b"Channel 00/0 : %d[%d] -> %d[%d] via P2P/CUMEM/read" % (rank, rank % 8, rank + 1, 0),
                host
                + b"Channel 00/0 : %d[%d] -> %d[%d] [send] via NET/IB/%d/GDRDMA"
                % (rank, 0, rank, 0, rank % 2),
                host + b"Connected all rings, use ring PXN 0 GDR 1",
                host + b"ncclCommInitRank comm 0x%x rank %d nranks 16 cudaDev %d nvmlDev %d busId %d000 "
                b"commId 0x9d - Init COMPLETE" % (comm, rank, rank % 8, rank % 8, rank % 8),
                b"[rank%d]: step %d loss 2.0" % (rank, round_index),
            ]
    lines.insert(7, b"node0:100:3000 [0] NCCL INFO comm 0x7f00 rank 0 nranks 16 cudaDev 0 - Abort COMPLETE")
    lines.insert(9, b"node0:100:3000 [0] NCCL INFO comm 0x7f01 rank 17 nranks 16 cudaDev 0 - Init START")
    path = tmp_path / "job.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for chunk in (256, 4096, log_sources.READ_CHUNK_BYTES):
        with pytest.MonkeyPatch.context() as patcher:
            patcher.setattr(log_sources, "READ_CHUNK_BYTES", chunk)
            result = both_ways(collect_sources(paths=[str(path)]))
        assert result["init_complete_ranks"] == list(range(16))
        assert result["communicator_count"] == 48
        assert result["net_paths"] == ["NET/IB/0/GDRDMA", "NET/IB/1/GDRDMA"]
        assert [error["kind"] for error in result["errors"]] == ["aborted"]
        (warning,) = result["parse_warnings"]
        assert warning.endswith("job.log:10: rank 17 is outside a communicator of 16 ranks")


def test_communicators_past_the_limit_are_warned_about_the_same_way(monkeypatch):
    from ansible_collections.gpuops.training.plugins.module_utils import nccl_log

    monkeypatch.setattr(nccl_log, "MAX_COMMUNICATORS", 3)
    text = b"".join(
        b"h:1:2 [0] NCCL INFO comm 0x%x rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1 commId 0x2 - Init START\n"
        % comm
        for comm in range(6)
    )
    result = both_ways([LogSource("log", text=text)])
    assert result["communicator_count"] == 3
    assert result["parse_warnings"][0] == "log:4: more than 3 communicators; the rest are not tracked"
    assert MAX_COMMUNICATORS == 65536


def load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "parse_speed", REPO_ROOT / "benchmarks" / "parse_speed" / "run.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_the_benchmark_log_reads_the_same_both_ways(tmp_path, share):
    benchmark = load_benchmark()
    path = tmp_path / "job.log"
    benchmark.generate(path, 3 << 20, 64, share, seed=1)
    result = both_ways(collect_sources(paths=[str(path)]))
    assert result["init_complete_ranks"] == list(range(64))
    assert result["transport"] == "IB"
    assert result["gdr"] is True


def test_lines_are_numbered_in_their_own_source():
    sources = [
        LogSource("rank0.log", text="x\ny\nh:1:2 [0] NCCL WARN first\n"),
        LogSource(
            "rank1.log", text="z\nh:3:4 [0] NCCL WARN second\nRuntimeError: NCCL error: invalid argument\n"
        ),
    ]
    result = both_ways(sources)
    assert [warning["line"] for warning in result["nccl_warnings"]] == ["rank0.log:3", "rank1.log:2"]
    assert result["errors"][0]["lines"] == ["rank1.log:3: RuntimeError: NCCL error: invalid argument"]

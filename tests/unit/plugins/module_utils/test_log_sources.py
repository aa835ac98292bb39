"""log_sources reads files in big chunks yet yields the same lines as a line-by-line reader."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils import log_sources
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    MAX_LINE_BYTES,
    LogSource,
    LogSourceError,
    collect_sources,
    iter_lines,
    normalize_line,
    scan_lines,
    split_mpi_tags,
)


def readline_reference(data):
    """The lines a readline(MAX_LINE_BYTES) loop yields, the tail of over-long lines dropped."""
    handle = io.BytesIO(data)
    lines = []
    while True:
        line = handle.readline(MAX_LINE_BYTES)
        if not line:
            return lines
        if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
            rest = line
            while rest and not rest.endswith(b"\n"):
                rest = handle.readline(MAX_LINE_BYTES)
        lines.append(line.rstrip(b"\n"))


LINE = st.one_of(
    st.binary(max_size=40).map(lambda data: data.replace(b"\n", b"")),
    st.integers(MAX_LINE_BYTES - 2, MAX_LINE_BYTES + 3).map(lambda size: b"x" * size),
)


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(LINE, max_size=8), final_newline=st.booleans(), chunk=st.sampled_from([7, 64, 4096]))
def test_chunked_reading_yields_the_lines_readline_would(tmp_path_factory, lines, final_newline, chunk):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path = tmp_path_factory.mktemp("log") / "x.log"
    path.write_bytes(data)
    source = LogSource("x", path=str(path))
    original = log_sources.READ_CHUNK_BYTES
    log_sources.READ_CHUNK_BYTES = chunk
    try:
        assert list(source.raw_lines()) == readline_reference(data)
        numbers = []
        count = scan_lines(source, (b"x",), lambda number, raw: numbers.append((number, raw)))
    finally:
        log_sources.READ_CHUNK_BYTES = original
    reference = readline_reference(data)
    assert count == len(reference)
    assert numbers == [(index + 1, line) for index, line in enumerate(reference) if b"x" in line]


def test_prefixes_and_colours_are_removed_and_tags_kept():
    text, tags = normalize_line(
        b"[pod/trainer-0/pytorch] 2025-05-01T10:00:00Z [1,3]<stdout>:\x1b[32mhello\x1b[0m\r\n"
    )
    assert text == "hello"
    assert tags == {"pod": "trainer-0", "container": "pytorch", "rank": 3}
    assert normalize_line(b"\xff\xfeok")[0] == "\ufffd\ufffdok"


def test_inline_text_and_pod_logs_are_sources(tmp_path):
    sources = collect_sources(content="a\r\nb\rc", pod_logs=[{"name": "w-0", "log_lines": ["x", "y"]}, "z"])
    assert [(name, text) for name, text, _tags in iter_lines(sources)] == [
        ("content", "a"),
        ("content", "b"),
        ("content", "c"),
        ("w-0", "x"),
        ("w-0", "y"),
        ("pod_logs[1]", "z"),
    ]
    assert [buffer[start:end] for buffer, start, end in sources[0].blocks()] == [b"a\nb\nc"]


def test_bad_paths_are_named(tmp_path):
    with pytest.raises(LogSourceError, match="paths: %s/nope.log does not exist" % tmp_path):
        collect_sources(paths=[str(tmp_path / "nope.log")])
    with pytest.raises(LogSourceError, match="matches no file"):
        collect_sources(paths=[str(tmp_path / "*.log")])


@pytest.mark.parametrize(
    ("line", "text", "tags"),
    [
        # srun --label, padded to the width of the largest task number
        ("0: h:1:2 [0] NCCL INFO x", "h:1:2 [0] NCCL INFO x", {"rank": 0}),
        ("  7: step 3", "step 3", {"rank": 7}),
        # Ray and SkyPilot: SkyPilot's rank is the node's, kept apart from the process rank
        ("(head, rank=0, pid=21170) # nThread 1", "# nThread 1", {"node_rank": 0}),
        ("(worker1, rank=1, pid=20075, ip=10.164.15.193) x", "x", {"node_rank": 1}),
        ("(RayTrainWorker pid=48121, ip=10.0.4.21) [rank2]: boom", "boom", {"rank": 2}),
        # SkyPilot's prefix on an MPI "[host:N]:" tag
        (
            "(head, rank=0, pid=5634) [sky-head:0]:sky-head:11169:11239 [0] NCCL INFO y",
            "sky-head:11169:11239 [0] NCCL INFO y",
            {"node_rank": 0},
        ),
        # syslog, then kubectl's prefix
        ("Mar  3 14:02:11 gpu-7 train.sh[88213]: [pod/w-0/c] z", "z", {"pod": "w-0", "container": "c"}),
        # a timestamp, mpirun's tag, then torch's: the innermost rank wins
        ("2025-05-01T10:00:00.5Z [1,0]<stdout>:[rank1]: w", "w", {"rank": 1}),
        ("2025-05-01 10:00:00,123 [1,2]<stderr>:0: v", "v", {"rank": 0}),
        # torchrun's tag names the worker's rank on its node: a local rank, and the launcher's
        # rank outside it was another process's
        ("[pod/w-1/pytorch] [default3]:u", "u", {"pod": "w-1", "container": "pytorch", "local_rank": 3}),
        ("[1,1]<stdout>:[default2]: t", "t", {"local_rank": 2}),
        # what is no prefix stays
        (
            "   1048576   262144   float   sum   -1   100.0",
            "   1048576   262144   float   sum   -1   100.0",
            None,
        ),
        ("10.0.0.1:5:5 [0] NCCL INFO x", "10.0.0.1:5:5 [0] NCCL INFO x", None),
        ("Nodes: 4 (pid=3)", "Nodes: 4 (pid=3)", None),
        ("12:00:00 started", "12:00:00 started", None),
    ],
)
def test_launcher_prefixes_are_stripped_stacked_and_their_rank_kept(line, text, tags):
    assert normalize_line(line) == (text, tags)
    # The scan's byte test never calls a line plain that normalize_line would change.
    if normalize_line(line)[0] != line:
        assert log_sources.may_start_with_prefix(line.encode())


PREFIX_PIECES = [
    "0: ",
    " 12: ",
    "(head, rank=0, pid=1) ",
    "(W pid=2, ip=10.0.0.1) ",
    "[h-1:0]:",
    "Nov 26 07:16:57 h tag[3]: ",
    "[1,0]<stdout>:",
    "[rank1]:",
    "[default0]: ",
    "[pod/p/c] ",
    "2025-05-01T10:00:00Z ",
    "2025-05-01T10:00:00.1Z stdout F ",
]


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(PREFIX_PIECES), max_size=4),
    rest=st.sampled_from(["h:1:2 [0] NCCL INFO a", "NCCL WARN b", "node1 x", "Nov", "(x)", "", "N/A"]),
)
def test_a_line_the_byte_test_calls_plain_reads_as_itself(pieces, rest):
    line = "".join(pieces) + rest
    if not log_sources.may_start_with_prefix(line.encode()):
        assert normalize_line(line)[0] == line
    if pieces:
        assert normalize_line(line)[0] == rest


def test_mpirun_tags_in_the_middle_of_a_line_cut_it_into_pieces_with_their_ranks():
    text, tags = normalize_line(
        "[pod/l/c] [1,0]<stdout>:   8   2   float   sum   -1[1,0]<stdout>:  85.70[1,1]<stderr>:x"
    )
    assert split_mpi_tags(text, tags) == [
        ("   8   2   float   sum   -1", {"pod": "l", "container": "c", "rank": 0}),
        ("  85.70", {"pod": "l", "container": "c", "rank": 0}),
        ("x", {"pod": "l", "container": "c", "rank": 1}),
    ]
    assert split_mpi_tags("no tag [1,0] here", None) == [("no tag [1,0] here", None)]

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

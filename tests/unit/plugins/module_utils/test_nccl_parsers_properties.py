"""Whatever bytes come in, the NCCL parsers return what they could read and never raise."""

from __future__ import annotations

import json
import pathlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import NcclLogParser, parse_nccl_logs
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import parse_nccl_tests

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
FIXTURE_DIRS = [
    REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl" / "published",
    REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl",
]


def fixture_texts():
    texts = []
    for directory in FIXTURE_DIRS:
        index = directory / "INDEX.jsonl"
        if index.is_file():
            for line in index.read_text().splitlines():
                if line.strip():
                    texts.append((directory / json.loads(line)["file"]).read_bytes())
    return texts or [b"h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 busId 1 - Init COMPLETE\n"]


FIXTURES = fixture_texts()
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NCCL_WORDS = st.sampled_from(
    [
        b"NCCL",
        b"NCCL INFO ",
        b"NCCL WARN ",
        b" via ",
        b"comm 0x",
        b" rank ",
        b" nranks ",
        b"Init COMPLETE",
        b"Rank ",
        b"\n",
        b"\r",
        b"\x1b[0m",
        b"\xff",
        b"#",
        b"# Avg bus bandwidth : ",
        b"nThread ",
    ]
)


def check_results(data):
    sources = [LogSource("fuzz", text=data)]
    result = parse_nccl_logs(sources)
    assert isinstance(result["parse_warnings"], list)
    assert result["nranks"] is None or result["nranks"] >= 1
    assert set(result["init_complete_ranks"]) <= set(range(result["nranks"] or 0))
    tests = parse_nccl_tests(sources, capacity_gbyte_s=50.0)
    assert isinstance(tests["parse_warnings"], list)
    assert tests["rows"] == sum(table["row_count"] for table in tests["tables"])
    return result


@SETTINGS
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(data):
    check_results(data)


@SETTINGS
@given(st.lists(st.one_of(NCCL_WORDS, st.binary(max_size=12)), max_size=60).map(b"".join))
def test_random_nccl_shaped_text_never_raises(data):
    check_results(data)


@SETTINGS
@given(
    fixture=st.sampled_from(FIXTURES),
    cut=st.floats(0, 1),
    start=st.floats(0, 1),
    garbage=st.binary(max_size=30),
    where=st.floats(0, 1),
)
def test_truncated_and_corrupted_fixtures_never_raise(fixture, cut, start, garbage, where):
    begin = int(len(fixture) * start * 0.5)
    end = begin + int((len(fixture) - begin) * cut)
    piece = fixture[begin:end]
    spot = int(len(piece) * where)
    check_results(piece[:spot] + garbage + piece[spot:])


@SETTINGS
@given(fixture=st.sampled_from(FIXTURES), cut=st.floats(0, 1), start=st.floats(0, 1))
def test_the_fast_scan_reads_whole_lines_as_the_line_by_line_parser_does(fixture, cut, start):
    lines = fixture.decode("utf-8", "replace").splitlines()
    begin = int(len(lines) * start * 0.5)
    text = "\n".join(lines[begin : begin + int((len(lines) - begin) * cut)])
    sources = [LogSource("piece", text=text)]
    assert parse_nccl_logs(sources) == NcclLogParser().feed_sources_line_by_line(sources).result()

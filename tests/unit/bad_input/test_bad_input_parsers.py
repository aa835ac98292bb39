"""The log parsers take anything and never raise; what they return is JSON for a module.

tests/unit/plugins/module_utils/test_nccl_parsers_properties.py already feeds the NCCL and
nccl-tests parsers random bytes and cut real logs as inline text. This adds what it leaves
out: the trainer-metrics parser (random bytes, metrics records with fields of any type,
torchrun's failure report cut anywhere), the same inputs read from files in chunks of any
size (the code path a log on disk takes), numbers in the logs that would take a list of
every rank to hold (a communicator of 10^11 ranks), the expectations checked on whatever
came out, and that every result is what exit_json can send (JSON).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import tempfile

import pytest
from bad_input_values import SETTINGS, anything, text
from hypothesis import example, given
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils import log_sources
from ansible_collections.gpuops.training.plugins.module_utils import nccl_log as nccl_log_module
from ansible_collections.gpuops.training.plugins.module_utils import training_log as training_log_module
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import (
    check_expectations as check_tests_expectations,
)
from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests import parse_nccl_tests

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURE_DIRS = [
    REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl" / "published",
    REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl",
]
SCHEMA = training_log_module.SCHEMA


def real_logs():
    logs = []
    for directory in FIXTURE_DIRS:
        index = directory / "INDEX.jsonl"
        if index.is_file():
            for line in index.read_text().splitlines():
                if line.strip():
                    logs.append((directory / json.loads(line)["file"]).read_bytes())
    assert logs, "no NCCL fixtures found in %s" % FIXTURE_DIRS
    return logs


NCCL_LOGS = real_logs()

# The trainer's records, each field any type the JSON of a broken or hostile line can hold.
EVENTS = [
    "run_start",
    "run_end",
    "step",
    "epoch",
    "checkpoint",
    "resume",
    "checkpoint_skipped",
    "eval",
    "memory",
    "x",
]
FIELD_VALUES = st.one_of(
    st.integers(min_value=-3, max_value=5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([10**30, -1, True, "ok", "error", "/ck/e1.pt", [1], {"a": 1}, None]),
    anything,
)
# A memory sample (training/README.md, Memory): any of its keys, the GPU device's included, with
# any value, or anything at all in its place.
MEMORY_SAMPLE = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            key: st.one_of(FIELD_VALUES, st.integers(min_value=0, max_value=1 << 64))
            for key in training_log_module.SAMPLE_KEYS
        },
    ),
    anything,
)
record = st.fixed_dictionaries(
    {"schema": st.just(SCHEMA), "event": st.one_of(st.sampled_from(EVENTS), anything)},
    optional={
        "memory": MEMORY_SAMPLE,
        "phase": st.one_of(st.sampled_from(training_log_module.MEMORY_PHASES), anything),
    }
    | {
        key: FIELD_VALUES
        for key in (
            "rank",
            "world_size",
            "host",
            "attempt",
            "epoch",
            "step",
            "loss",
            "loss_median",
            "images_per_s",
            "path",
            "status",
            "error",
            "time",
            "backend",
            "model",
            "device",
            "reason",
            "map",
        )
    },
)
# Every record has a rank most of the time, so the parser goes past its first check.
record = st.one_of(
    record, st.tuples(record, st.integers(-2, 4)).map(lambda pair: dict(pair[0], rank=pair[1]))
)
TORCHRUN_REPORT = [
    "Failures:",
    "[1]:",
    "  time      : 2026-11-22_05:00:00",
    "  host      : node-1",
    "  rank      : 1 (local_rank: 1)",
    "  rank      : x (local_rank: y)",
    "  exitcode  : -9 (pid: 12)",
    "  exitcode  : 99999999999999999999999999",
    "  error_file: <N/A>",
    "Root Cause (first observed failure):",
    "[0]:",
    "=" * 40,
]
training_line = st.one_of(
    record.map(lambda value: json.dumps(value, allow_nan=True)),
    record.map(lambda value: json.dumps(value)[: len(json.dumps(value)) // 2]),  # cut short
    st.sampled_from(TORCHRUN_REPORT),
    st.sampled_from(["[default0]:", "[rank1]: ", "[1,0]<stdout>:", "2026-11-22T05:00:00Z stdout F "]).flatmap(
        lambda prefix: record.map(lambda value: prefix + json.dumps(value))
    ),
    text,
)
training_log = st.lists(training_line, max_size=25).map("\n".join)
# Lines that set a communicator size or a rank count from the log to any number.
HUGE_COMMUNICATOR = (
    b"h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 99999999999 cudaDev 0 nvmlDev 0 busId 1 "
    b"commId 0x2 - Init COMPLETE\n"
)
HUGE_TESTS_RANK = b"#  Rank 99999999999 Group  0 Pid      1 on  h device  0 [0x1] NVIDIA A100\n"


def cut(data, start, length, garbage, where):
    begin = int(len(data) * start)
    piece = data[begin : begin + int((len(data) - begin) * length)]
    spot = int(len(piece) * where)
    return piece[:spot] + garbage + piece[spot:]


cut_nccl_log = st.builds(
    cut,
    st.sampled_from(NCCL_LOGS),
    st.floats(0, 1),
    st.floats(0, 1),
    st.one_of(st.binary(max_size=40), st.sampled_from([HUGE_COMMUNICATOR, HUGE_TESTS_RANK, b"\x00" * 10])),
    st.floats(0, 1),
)


def sources_of(data, as_file, chunk, directory):
    """One source of ``data``: inline text, or a file read in chunks of ``chunk`` bytes."""
    if not as_file:
        return [LogSource("inline", text=data)]
    path = os.path.join(directory, "rank0.log")
    with open(path, "wb") as handle:
        handle.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))
    return [LogSource(path, path=path)]


def json_safe(result):
    """exit_json sends the result as JSON: it must encode (NaN and inf are what json writes)."""
    json.dumps(result)
    return result


def parse_all(data, as_file, chunk, expect):
    with (
        tempfile.TemporaryDirectory(prefix="gpuops-parsers-") as directory,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(log_sources, "READ_CHUNK_BYTES", chunk)
        sources = sources_of(data, as_file, chunk, directory)
        training = json_safe(training_log_module.parse_training_logs(sources, tail_lines=3))
        assert all(
            isinstance(failure, str) for failure in training_log_module.check_expectations(training, expect)
        )
        nccl = json_safe(nccl_log_module.parse_nccl_logs(sources))
        assert len(nccl["missing_ranks"]) <= nccl_log_module.MAX_RANKS_LISTED
        assert all(isinstance(failure, str) for failure in nccl_log_module.check_expectations(nccl, expect))
        tests = json_safe(parse_nccl_tests(sources, capacity_gbyte_s=expect.get("capacity")))
        assert all(
            isinstance(failure, str)
            for failure in check_tests_expectations(tests, expect, expect.get("capacity"))
        )


# What the modules' argument specs let through to the expectations: typed, any size.
expectations = st.fixed_dictionaries(
    {},
    optional={
        "world_size": st.one_of(st.integers(-2, 4), st.just(10**11)),
        "nranks": st.one_of(st.integers(-2, 4), st.just(10**11)),
        "all_ranks_finished": st.booleans(),
        "min_epochs": st.integers(-1, 3),
        "loss_decreases": st.booleans(),
        "checkpoint": st.booleans(),
        "nccl_used": st.booleans(),
        "transport": st.sampled_from(["IB", "Socket", "Plugin"]),
        "gdr": st.booleans(),
        "no_errors": st.booleans(),
        "max_wrong": st.integers(-1, 2),
        "min_busbw_share": st.floats(allow_nan=True, allow_infinity=True),
        "capacity": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    },
)
chunks = st.sampled_from([1, 7, 64, 4096, log_sources.READ_CHUNK_BYTES])


@SETTINGS
@given(data=st.binary(max_size=3000), as_file=st.booleans(), chunk=chunks, expect=expectations)
@example(data=HUGE_COMMUNICATOR, as_file=False, chunk=64, expect={"nranks": 10**11})
@example(data=HUGE_TESTS_RANK, as_file=True, chunk=7, expect={"world_size": 10**11})
def test_random_bytes_never_raise(data, as_file, chunk, expect):
    parse_all(data, as_file, chunk, expect)


@SETTINGS
@given(data=training_log, as_file=st.booleans(), chunk=chunks, expect=expectations)
@example(
    data=json.dumps({"schema": SCHEMA, "event": "checkpoint", "rank": 0, "path": [1]}),
    as_file=False,
    chunk=64,
    expect={},
)
def test_trainer_metrics_of_any_shape_never_raise(data, as_file, chunk, expect):
    parse_all(data, as_file, chunk, expect)


@SETTINGS
@given(data=cut_nccl_log, as_file=st.booleans(), chunk=chunks, expect=expectations)
def test_cut_real_logs_read_from_files_never_raise(data, as_file, chunk, expect):
    parse_all(data, as_file, chunk, expect)


def test_a_communicator_size_from_the_log_lists_a_bounded_number_of_missing_ranks():
    result = nccl_log_module.parse_nccl_logs([LogSource("huge", text=HUGE_COMMUNICATOR)])
    assert result["nranks"] == 99999999999
    assert result["missing_ranks"][:3] == [1, 2, 3]
    assert len(result["missing_ranks"]) == nccl_log_module.MAX_RANKS_LISTED
    (failure,) = nccl_log_module.check_expectations(result, {"nranks": 99999999999})
    assert "ranks 1-%d ... (99999999998 ranks)" % nccl_log_module.MAX_RANKS_LISTED in failure
    assert not math.isnan(len(failure))

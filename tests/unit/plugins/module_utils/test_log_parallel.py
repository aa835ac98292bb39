"""log_parallel: a fleet's logs parsed in forked processes give what one process gives."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.training.plugins.module_utils import log_parallel
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import collect_sources
from ansible_collections.gpuops.training.plugins.module_utils.training_log import parse_training_logs

SCHEMA = "gpuops.metrics/v1"


def record(rank, event, **fields):
    where = {"rank": rank, "local_rank": rank % 8, "world_size": 32, "host": "pod-%d" % (rank // 8)}
    where["node"] = "node-%d" % (rank // 8)
    return json.dumps(
        {"schema": SCHEMA, "event": event, "time": 1000.0 + fields.get("step", 0), **where, **fields}
    )


def pod_log(pod, steps=40, restarted=False):
    lines = []
    for rank in range(pod * 8, pod * 8 + 8):
        lines.append(record(rank, "run_start", world_size=32, backend="nccl"))
        for step in range(1, steps + 1):
            memory = {"rss_bytes": (1000 + step + rank) << 20, "rss_peak_bytes": (1100 + step) << 20}
            loss = 3.0 - step / 50
            lines.append(
                record(rank, "step", epoch=step // 10, step=step, loss=loss, images_per_s=9.5, memory=memory)
            )
            if step % 10 == 0:
                lines.append(record(rank, "epoch", epoch=step // 10 - 1, step=step, loss=3.0 - step / 50))
        if rank == 0:
            lines.append(record(rank, "checkpoint", epoch=3, step=steps, path="/ck/%d.pt" % steps))
        lines.append("NCCL INFO a line that is not a record, rank %d" % rank)
        if not restarted:
            lines.append(record(rank, "run_end", status="ok", epochs_completed=4, step=steps))
    return "\n".join(lines) + "\n"


@pytest.fixture
def fleet_logs(tmp_path):
    for pod in range(4):
        (tmp_path / ("fl-worker-%d.log" % pod)).write_text(pod_log(pod, steps=40 + pod))
    (tmp_path / "fl-worker-2.previous.log").write_text(pod_log(2, steps=12, restarted=True))
    return str(tmp_path / "*.log")


def test_parsed_on_three_cores_it_is_what_one_process_reads(fleet_logs, monkeypatch):
    forks = []
    real_fork = os.fork

    def counted_fork():
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(log_parallel.os, "fork", counted_fork)
    monkeypatch.setattr(log_parallel, "MIN_PARALLEL_BYTES", 0)
    serial = parse_training_logs(collect_sources(paths=[fleet_logs]), workers=1)
    assert forks == []
    parallel = parse_training_logs(collect_sources(paths=[fleet_logs]), workers=3)
    assert len(forks) == 2
    assert json.dumps(parallel, sort_keys=True) == json.dumps(serial, sort_keys=True)
    assert parallel["ranks_reporting"] == list(range(32))
    assert len(parallel["checkpoints"]) == 1


def test_a_pods_previous_log_goes_with_its_log(tmp_path):
    class Source:
        def __init__(self, name, size):
            self.name = self.path = str(tmp_path / name)
            (tmp_path / name).write_bytes(b"x" * size)

    sources = [
        Source("a.log", 100),
        Source("b.log", 100),
        Source("b.previous.log", 100),
        Source("c.log", 100),
    ]
    parts = log_parallel.shares(sources, 2)
    assert [[source.name.rsplit("/", 1)[1] for source in part] for part in parts] == [
        ["a.log", "b.log", "b.previous.log"],
        ["c.log"],
    ]
    assert len(log_parallel.shares(sources, 8)) == 3  # never more shares than pods


def test_small_logs_are_read_in_this_process(fleet_logs, monkeypatch):
    monkeypatch.setattr(log_parallel.os, "fork", lambda: pytest.fail("forked for a few kilobytes"))
    assert parse_training_logs(collect_sources(paths=[fleet_logs]), workers=4)["ranks_reporting"] == list(
        range(32)
    )


def test_a_child_that_gives_no_answer_leaves_the_parse_to_this_process(fleet_logs, monkeypatch):
    monkeypatch.setattr(log_parallel, "MIN_PARALLEL_BYTES", 0)
    parent = os.getpid()

    def parse(share):
        if os.getpid() != parent:
            os._exit(3)  # as a child killed by the OOM killer would leave no answer
        return "parsed in the parent"

    sources = collect_sources(paths=[fleet_logs])
    assert log_parallel.parse_split(sources, parse, lambda parsers: parsers, workers=2) is None


def test_ranks_found_in_two_shares_are_parsed_again_in_one_process(tmp_path, monkeypatch):
    # A launcher's console log holds rank 0 as well as its own file: no share owns it.
    (tmp_path / "a.log").write_text(pod_log(0))
    (tmp_path / "b.log").write_text(record(0, "step", epoch=3, step=99, loss=1.0) + "\n" + pod_log(1))
    monkeypatch.setattr(log_parallel, "MIN_PARALLEL_BYTES", 0)
    result = parse_training_logs(collect_sources(paths=[str(tmp_path / "*.log")]), workers=2)
    serial = parse_training_logs(collect_sources(paths=[str(tmp_path / "*.log")]), workers=1)
    assert json.dumps(result, sort_keys=True) == json.dumps(serial, sort_keys=True)
    assert result["ranks"][0]["last_step"] == 99

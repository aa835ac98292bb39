import io
import json
import math
import socket

from gpuops_trainer.metrics import SCHEMA, MetricsWriter

COMMON_KEYS = {"schema", "event", "time", "rank", "local_rank", "world_size", "host", "attempt"}


def test_record_goes_to_stdout_and_rank_file_with_common_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    stream = io.StringIO()
    writer = MetricsWriter(tmp_path, rank=3, local_rank=1, world_size=4, stream=stream)
    writer.emit("step", epoch=0, loss=1.5, losses={"classification": 1.0, "bbox_regression": 0.5})
    writer.close()

    line = stream.getvalue()
    assert line.startswith("{") and line.endswith("\n") and line.count("\n") == 1
    from_file = (tmp_path / "metrics" / "rank3.jsonl").read_text()
    assert from_file == line
    record = json.loads(line)
    assert set(record) >= COMMON_KEYS
    assert record["schema"] == SCHEMA == "gpuops.metrics/v1"
    assert (record["event"], record["rank"], record["local_rank"]) == ("step", 3, 1)
    assert (record["world_size"], record["attempt"]) == (4, 2)
    assert record["host"] == socket.gethostname()
    assert isinstance(record["time"], float)
    assert record["losses"]["bbox_regression"] == 0.5


def test_appends_across_writers_and_defaults_attempt_to_zero(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    for _writer in range(2):
        writer = MetricsWriter(tmp_path, rank=0, local_rank=0, world_size=1, stream=io.StringIO())
        writer.emit("run_start")
        writer.close()
    lines = (tmp_path / "metrics" / "rank0.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["attempt"] == 0


def test_non_finite_values_become_null_so_the_line_stays_strict_json(tmp_path):
    stream = io.StringIO()
    writer = MetricsWriter(None, rank=0, local_rank=0, world_size=1, stream=stream)
    writer.emit("step", loss=math.nan, losses={"classification": math.inf, "bbox_regression": 1.0})
    record = json.loads(stream.getvalue(), parse_constant=lambda name: 1 / 0)
    assert record["loss"] is None and record["losses"]["classification"] is None

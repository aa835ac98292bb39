"""JSON-lines metrics in the ``gpuops.metrics/v1`` schema (see README.md).

Every record goes to stdout (one object per line, nothing before the ``{``) and to
``OUTPUT_DIR/metrics/rank{RANK}.jsonl``. The collection's log parser depends on this format:
add keys if needed, never rename or remove them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any

SCHEMA = "gpuops.metrics/v1"


def _finite_or_none(value: Any) -> Any:
    """Strict JSON has no NaN/Infinity: non-finite floats are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


class MetricsWriter:
    def __init__(
        self,
        output_dir: str | os.PathLike | None,
        rank: int,
        local_rank: int,
        world_size: int,
        attempt: int | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        self.common = {
            "rank": rank,
            "local_rank": local_rank,
            "world_size": world_size,
            "host": socket.gethostname(),
            # The machine the rank runs on: a pod's host name is the pod's, so the Kubernetes
            # launchers pass the node's name (downward API); elsewhere it is the host.
            "node": os.environ.get("GPUOPS_NODE_NAME") or socket.gethostname(),
            "attempt": attempt if attempt is not None else restart_attempt(),
        }
        self.stream = stream if stream is not None else sys.stdout
        self.file: IO[str] | None = None
        self.path: Path | None = None
        if output_dir is not None:
            self.path = Path(output_dir) / "metrics" / f"rank{rank}.jsonl"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            cut_short = _ends_mid_line(self.path)
            # Append: a restarted attempt continues the same file; "attempt" tells them apart.
            self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
            if cut_short:
                # A record cut short by a full volume: end its line so the next one starts
                # its own (readers skip an unreadable line, not two records on one).
                self._write_file("\n")

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Build one record: common keys first, then the event's own fields."""
        record = {"schema": SCHEMA, "event": event, "time": time.time(), **self.common}
        record.update(fields)
        return _finite_or_none(record)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = self.record(event, **fields)
        line = json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n"
        self.stream.write(line)
        self.stream.flush()  # a crash right after must not lose the record
        if self.file is not None:
            self._write_file(line)
        return record

    def _write_file(self, text: str) -> None:
        try:
            self.file.write(text)
            self.file.flush()
        except OSError as exc:
            # A full (or failing) output volume must not end the run from here: stdout still
            # carries every record, and a checkpoint write on the same volume stops the run
            # with its own exit code and message.
            print(
                f"gpuops-train: warning: cannot append to {self.path}: {exc}; "
                "metrics go to stdout only from here",
                file=sys.stderr,
                flush=True,
            )
            self.close()

    def close(self) -> None:
        if self.file is not None:
            file, self.file = self.file, None
            # Closing flushes what a failed write left in the buffer, and fails the same way.
            with contextlib.suppress(OSError):
                file.close()


def _ends_mid_line(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            if file.seek(0, os.SEEK_END) == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) != b"\n"
    except OSError:
        return False


def restart_attempt() -> int:
    """torchrun's restart counter: 0 on the first attempt."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0

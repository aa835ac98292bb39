"""A one-line progress display for rank 0 when stderr is a terminal (no dependency).

It rewrites one line with ``\\r`` at most a few times a second; logs and pipes never see it,
so the JSON-lines stdout and captured stderr stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import IO

MIN_INTERVAL_S = 0.25


class ProgressBar:
    def __init__(self, stream: IO[str] | None = None, width: int = 30):
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.last_draw = 0.0
        self.last_loss: float | None = None
        self.drawn = False

    @classmethod
    def for_rank(cls, rank: int, stream: IO[str] | None = None) -> ProgressBar | None:
        stream = stream if stream is not None else sys.stderr
        return cls(stream) if rank == 0 and stream.isatty() else None

    def update(self, epoch: int, done: int, total: int, loss: float | None) -> None:
        if loss is not None:
            self.last_loss = loss
        now = time.monotonic()
        if done < total and now - self.last_draw < MIN_INTERVAL_S:
            return
        self.last_draw = now
        filled = self.width * done // max(total, 1)
        gauge = "#" * filled + "." * (self.width - filled)
        loss_text = f" loss {self.last_loss:.4f}" if self.last_loss is not None else ""
        self.stream.write(f"\repoch {epoch} [{gauge}] {done}/{total}{loss_text}")
        self.stream.flush()
        self.drawn = True

    def end_line(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False

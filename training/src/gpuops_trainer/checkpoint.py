"""Epoch checkpoints: atomic writes, keep the newest K, resume from the newest readable one.

A checkpoint is a plain dict (tensors, numbers, strings) so it loads with
``weights_only=True``: reading a checkpoint never executes pickled code.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_epoch(\d+)\.pt$")
REQUIRED_KEYS = ("model", "optimizer", "lr_scheduler", "epoch", "global_step", "args")


def checkpoint_name(epoch: int) -> str:
    return f"checkpoint_epoch{epoch:04d}.pt"


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Checkpoint files in ``directory``, newest epoch first; temp files are ignored."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = CHECKPOINT_PATTERN.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return [path for _epoch, path in sorted(found, reverse=True)]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(state: dict[str, Any], directory: str | os.PathLike, keep: int) -> Path:
    """Write ``state`` atomically and delete all but the newest ``keep`` checkpoints.

    The temp file lives in the same directory so ``os.replace`` is a rename on one file
    system: a reader sees the old file or the complete new one, never half of one.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / checkpoint_name(int(state["epoch"]))
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp:
            torch.save(state, tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, final)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    prune_checkpoints(directory, keep)
    return final


def prune_checkpoints(directory: str | os.PathLike, keep: int) -> list[Path]:
    removed = list_checkpoints(directory)[max(keep, 1) :]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load on CPU; raise ValueError if the file is not a complete checkpoint."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"unreadable: {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict):
        raise ValueError("not a checkpoint dict")
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise ValueError(f"missing keys: {', '.join(missing)}")
    return state


@dataclass
class Skipped:
    path: Path
    reason: str


def load_newest(directory: str | os.PathLike) -> tuple[Path | None, dict | None, list[Skipped]]:
    """The newest checkpoint that loads, plus the newer ones that did not (and why)."""
    skipped: list[Skipped] = []
    for path in list_checkpoints(directory):
        try:
            return path, load_checkpoint(path), skipped
        except ValueError as exc:
            skipped.append(Skipped(path, str(exc).splitlines()[0][:300]))
    return None, None, skipped

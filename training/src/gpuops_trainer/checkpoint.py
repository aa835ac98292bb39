"""Checkpoints: atomic writes, keep the newest K, resume from the newest readable one.

Rank 0 writes one every ``--checkpoint-every-steps`` optimizer steps and at each epoch's
end, named by global step (``checkpoint_step000000042.pt``), so "newest" is "most steps".
A checkpoint is a plain dict (tensors, numbers, strings, lists) so it loads with
``weights_only=True``: reading a checkpoint never executes pickled code. It holds the model,
optimizer, lr scheduler and AMP scaler states, ``epoch`` and ``epoch_batches`` (batches of
that epoch consumed: equal to ``iters_per_epoch`` once the epoch is complete), the global
step, the RNG states and the arguments.
"""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import StorageError

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_step(\d+)\.pt$")
# save_checkpoint's temp files (mkstemp: ".NAME.RANDOM.tmp").
PARTIAL_PATTERN = re.compile(r"^\.checkpoint_step\d+\.pt\.[^.]+\.tmp$")
REQUIRED_KEYS = (
    "model",
    "optimizer",
    "lr_scheduler",
    "epoch",
    "epoch_batches",
    "iters_per_epoch",
    "global_step",
    "rng",
    "args",
)


def checkpoint_name(global_step: int) -> str:
    return f"checkpoint_step{global_step:09d}.pt"


def rng_states() -> dict:
    """Python, numpy, torch CPU and CUDA generator states, in weights_only-loadable types."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    states = {
        "python": list(random.getstate()[1]),
        "python_version": random.getstate()[0],
        "python_gauss": random.getstate()[2],
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict) -> None:
    random.setstate((states["python_version"], tuple(states["python"]), states["python_gauss"]))
    numpy_state = states["numpy"]
    np.random.set_state(
        (
            numpy_state["name"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["gauss"],
        )
    )
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        cuda_states = states["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Checkpoint files in ``directory``, most steps first; temp files are ignored."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = CHECKPOINT_PATTERN.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return [path for _step, path in sorted(found, reverse=True)]


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
    final = directory / checkpoint_name(int(state["global_step"]))
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=directory)
    writer = None
    try:
        with os.fdopen(fd, "wb") as tmp:
            writer = _WriteErrors(tmp)
            torch.save(state, writer)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, final)
    except BaseException as exc:
        Path(tmp_name).unlink(missing_ok=True)
        cause = exc if isinstance(exc, OSError) else getattr(writer, "error", None)
        if cause is not None and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageError(_no_space_message(directory, final)) from None
        raise
    _fsync_dir(directory)
    prune_checkpoints(directory, keep)
    return final


class _WriteErrors:
    """A file for torch.save that remembers the OSError of a failed write: torch's zip writer
    turns a short write into "RuntimeError: unexpected pos", which hides a full disk."""

    def __init__(self, file):
        self.file = file
        self.error = None

    def write(self, data):
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self):
        self.file.flush()


def _no_space_message(directory: Path, wanted: Path) -> str:
    """What a full checkpoint volume means for the run, and what to do about it."""
    free = shutil.disk_usage(directory).free
    kept = list_checkpoints(directory)
    if kept:
        # The previous checkpoint is the best estimate of the size of the next one.
        room = f"about {kept[0].stat().st_size} bytes needed, {free} free"
        newest = f"the newest checkpoint, {kept[0].name}, is intact"
    else:
        room, newest = f"{free} bytes free", "none was kept"
    return (
        f"cannot write checkpoint {wanted.name}: no space left in {directory} ({room}); "
        f"{newest}. Free space there, lower --keep-checkpoints or point --output-dir at a "
        "larger volume, then run again to resume"
    )


def remove_partial_writes(directory: str | os.PathLike) -> list[Path]:
    """Delete the temp files of writes that never finished (the writer was killed mid-write).

    Each is up to a checkpoint's size, and a run restarted many times would pile them up.
    Only rank 0 writes checkpoints, so at its start none of them is in progress.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    partial = [p for p in directory.iterdir() if PARTIAL_PATTERN.match(p.name) and p.is_file()]
    for path in partial:
        path.unlink(missing_ok=True)
    return sorted(partial)


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

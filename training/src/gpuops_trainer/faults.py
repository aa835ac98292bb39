"""Drills: ``--inject-fault RANK@STEP[:MODE]`` makes one rank fail on purpose,
``--leak-mib-per-epoch [RANK@]MIB`` (a test hook) makes ranks leak host memory on purpose, and
``--slow-rank RANK@MS`` makes one rank a straggler on purpose.

The fault fires when that rank is about to run global step STEP (after STEP steps are done),
and only on the first attempt (TORCHELASTIC_RESTART_COUNT 0), so a drill with
``torchrun --max-restarts`` shows the job restarting, resuming and finishing.

Modes: ``exit`` (default) reports the fault and exits with status 1; ``raise`` raises a
RuntimeError (traceback, status 1); ``kill`` sends SIGKILL to itself (status 137, no report).

The leak keeps MIB MiB more of host memory alive as each epoch starts, on every rank or on
rank RANK alone, so that leak detection (the growth of a rank's per-epoch minimum RSS) can be
proven on a real run, next to a healthy rank.

The slow rank spends MS more milliseconds of compute in every micro-step (a sleep inside the
compute section, on every attempt: a slow node stays slow), as a throttled GPU or a degraded
link would make it; its peers then wait for it in the collectives, and straggler detection
(per-rank compute time, see timing.py) must name it.
"""

from __future__ import annotations

import mmap
import os
import re
import signal
import sys
import time
from dataclasses import dataclass

from .errors import ConfigError, InjectedFault

FAULT_MODES = ("exit", "raise", "kill")
_SPEC = re.compile(r"^(\d+)@(\d+)(?::([a-z]+))?$")
_LEAK_SPEC = re.compile(r"^(?:(\d+)@)?(\d+)$")
_SLOW_SPEC = re.compile(r"^(\d+)@(\d+)$")


@dataclass(frozen=True)
class FaultSpec:
    rank: int
    step: int
    mode: str = "exit"

    def describe(self) -> str:
        return f"injected fault: rank {self.rank} at global step {self.step} (mode {self.mode})"


def parse_fault(text: str) -> FaultSpec:
    match = _SPEC.match(text.strip())
    if not match or (match.group(3) or "exit") not in FAULT_MODES:
        raise ConfigError(
            f"--inject-fault: expected RANK@STEP[:MODE] with MODE one of "
            f"{', '.join(FAULT_MODES)}, got {text!r}"
        )
    return FaultSpec(int(match.group(1)), int(match.group(2)), match.group(3) or "exit")


def maybe_inject(spec: FaultSpec | None, rank: int, global_step: int, attempt: int) -> None:
    if spec is None or attempt != 0 or rank != spec.rank or global_step != spec.step:
        return
    print(f"gpuops-train: {spec.describe()}", file=sys.stderr, flush=True)
    if spec.mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if spec.mode == "raise":
        raise RuntimeError(spec.describe())
    raise InjectedFault(spec.describe())


@dataclass(frozen=True)
class LeakSpec:
    mib: int
    rank: int | None = None  # None: every rank


def parse_leak(text: str) -> LeakSpec:
    match = _LEAK_SPEC.match(text.strip())
    if not match:
        raise ConfigError(f"--leak-mib-per-epoch: expected [RANK@]MIB, got {text!r}")
    rank = int(match.group(1)) if match.group(1) is not None else None
    return LeakSpec(int(match.group(2)), rank)


class HostMemoryLeak:
    """``--leak-mib-per-epoch``: this rank's deliberate leak (nothing when it is not chosen)."""

    def __init__(self, spec: LeakSpec | None, rank: int) -> None:
        chosen = spec is not None and spec.rank in (None, rank)
        self.mib = spec.mib if chosen else 0
        self.kept: list[mmap.mmap] = []

    def grow(self) -> None:
        if not self.mib:
            return
        # A mapping of its own, with a byte written into each page: new resident memory every
        # time. A malloc'd buffer can land on free memory the allocator already holds resident
        # (after torch freed tensors), and then no RSS grows.
        size = self.mib << 20
        leaked = mmap.mmap(-1, size)
        leaked[:: mmap.PAGESIZE] = b"\xa5" * (size // mmap.PAGESIZE)
        self.kept.append(leaked)


@dataclass(frozen=True)
class SlowRankSpec:
    rank: int
    ms: int

    def delay_s(self, rank: int) -> float:
        """Extra compute seconds per micro-step for ``rank``: 0 unless it is the slow one."""
        return self.ms / 1000.0 if rank == self.rank else 0.0


def parse_slow_rank(text: str) -> SlowRankSpec:
    match = _SLOW_SPEC.match(text.strip())
    if not match:
        raise ConfigError(
            f"--slow-rank: expected RANK@MS (a rank and the whole milliseconds of extra compute "
            f"it spends per micro-step, such as 1@200), got {text!r}"
        )
    return SlowRankSpec(int(match.group(1)), int(match.group(2)))


def slow_down(seconds: float) -> None:
    """The slow rank's extra compute (a sleep: it holds no core that its peers could use)."""
    if seconds > 0:
        time.sleep(seconds)

"""Per-rank step time, split into waiting for data, compute and waiting in DDP's collectives.

In synchronous DDP every rank's wall-clock step is the same: the fast ranks wait in the
collectives for the slowest one. A straggler therefore shows only in the split: its compute
time is the longest, and it is the rank that waits least.

Per micro-step the engine marks the start of its compute, the call into the model, the end of
backward and the end of the micro-step (after the optimizer and lr steps on the last one).
Two marks come from DDP itself (``StepTimer.attach``):

- a forward pre-hook on the wrapped module marks when DDP's own work before forward is done:
  broadcasting rank 0's buffers (batch-norm statistics), which waits for every rank to arrive;
- a communication hook that wraps DDP's default all-reduce marks when each gradient bucket is
  handed to the all-reduce. The last one marks the last gradient computed; from there to the
  return of backward (DDP waits for every bucket's all-reduce before backward returns) the
  rank waits for the collective and its peers.

``collective`` is those two waits; ``compute`` is the rest of the micro-step (copying the batch,
forward, loss, backward, clipping, optimizer and lr steps); ``data`` is the host's wait for the
DataLoader before the micro-step. Without DDP (one process) nothing marks a wait: collective
is 0.

Clocks: on a CPU the host clock measures the work as it happens. On CUDA the host only queues
work, so a host timestamp says when work was queued, not when it ran: CUDA events recorded on
the current stream mark the device's time instead, and they are read when a step record is
written, after that record's own host synchronisation has completed them. The hot loop gains
no synchronisation.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

TIMING_KEYS = ("step_s", "data_s", "compute_s", "collective_s")


class HostClock:
    """Marks are ``time.perf_counter()`` readings."""

    def mark(self) -> float:
        return time.perf_counter()

    @staticmethod
    def seconds(start: Any, end: Any) -> float:
        return end - start

    def settle(self, mark: Any) -> None:
        """Nothing to wait for: a host mark is final when taken."""


class CudaClock:
    """Marks are CUDA events recorded on the current stream (no synchronisation)."""

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def seconds(start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0

    def settle(self, mark: Any) -> None:
        # The step record's own host sync has normally completed it: this returns at once.
        mark.synchronize()


def clock_for(device: torch.device) -> HostClock | CudaClock:
    return CudaClock() if device.type == "cuda" else HostClock()


def _timed_allreduce(timer, bucket):
    """DDP's default all-reduce (averaging over the world), marking when the bucket is ready.

    No annotations: DDP compares them with its own types, and this module's are strings."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    timer.bucket_ready()
    return default_hooks.allreduce_hook(None, bucket)


class StepTimer:
    """Accumulates one print window of micro-steps; ``window`` returns the means per optimizer
    step and starts the next window."""

    def __init__(self, clock: HostClock | CudaClock | None = None) -> None:
        self.clock = clock or HostClock()
        self.distributed = False
        self._micro: dict[str, Any] | None = None
        self._armed = False
        self.reset()

    @classmethod
    def for_device(cls, device: torch.device) -> StepTimer:
        return cls(clock_for(device))

    def attach(self, ddp_model: nn.Module) -> None:
        """Mark DDP's waits: a forward pre-hook on the wrapped module and a communication hook
        around the default all-reduce. Must run before the first forward."""
        if not hasattr(ddp_model, "register_comm_hook"):
            raise TypeError("step timing: attach needs a DistributedDataParallel model")
        ddp_model.register_comm_hook(self, _timed_allreduce)
        ddp_model.module.register_forward_pre_hook(self._forward_synced)
        self.distributed = True

    def reset(self) -> None:
        """Forget the window (an epoch starts, or a new window after a record)."""
        self._finished: list[dict[str, Any]] = []
        self._data_s = 0.0
        self._steps = 0
        self._micro = None
        self._armed = False

    # -- marks, in the order the engine takes them ----------------------------------

    def data_waited(self, seconds: float) -> None:
        self._data_s += seconds

    def start(self) -> None:
        self._micro = {"start": self.clock.mark()}

    def before_forward(self) -> None:
        self._micro["forward_call"] = self.clock.mark()
        self._armed = True

    def _forward_synced(self, _module: nn.Module, _inputs: Any) -> None:
        # The wrapped module also runs without DDP (evaluation): only the training forward the
        # engine announced is marked.
        if self._armed and self._micro is not None:
            self._micro["forward_synced"] = self.clock.mark()
        self._armed = False

    def bucket_ready(self) -> None:
        if self._micro is not None:
            self._micro["last_bucket"] = self.clock.mark()  # the last one wins

    def after_backward(self) -> None:
        self._armed = False
        self._micro["backward_end"] = self.clock.mark()

    def end(self, optimizer_step: bool) -> None:
        self._micro["end"] = self.clock.mark()
        self._finished.append(self._micro)
        self._micro = None
        if optimizer_step:
            self._steps += 1

    # -- reading -------------------------------------------------------------------

    def _split(self, marks: dict[str, Any]) -> tuple[float, float]:
        """(compute, collective) seconds of one finished micro-step."""
        seconds = self.clock.seconds
        total = seconds(marks["start"], marks["end"])
        collective = 0.0
        if "forward_synced" in marks:
            collective += max(seconds(marks["forward_call"], marks["forward_synced"]), 0.0)
        if "last_bucket" in marks and "backward_end" in marks:
            collective += max(seconds(marks["last_bucket"], marks["backward_end"]), 0.0)
        collective = min(collective, max(total, 0.0))
        return max(total - collective, 0.0), collective

    def window(self, elapsed_s: float) -> dict[str, float]:
        """The window's mean seconds per optimizer step: ``step_s`` (``elapsed_s``, the host's
        wall time of the window, over its steps), ``data_s``, ``compute_s`` and
        ``collective_s``; then a new window starts. Called at step records only."""
        steps = max(self._steps, 1)
        if self._finished:
            self.clock.settle(self._finished[-1]["end"])
        compute = collective = 0.0
        for marks in self._finished:
            micro_compute, micro_collective = self._split(marks)
            compute += micro_compute
            collective += micro_collective
        timing = {
            "step_s": elapsed_s / steps,
            "data_s": self._data_s / steps,
            "compute_s": compute / steps,
            "collective_s": collective / steps,
        }
        self.reset()
        return {key: round(value, 6) for key, value in timing.items()}

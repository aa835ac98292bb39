"""``--inject-fault RANK@STEP[:MODE]``: make one rank fail on purpose, for fault drills.

The fault fires when that rank is about to run global step STEP (after STEP steps are done),
and only on the first attempt (TORCHELASTIC_RESTART_COUNT 0), so a drill with
``torchrun --max-restarts`` shows the job restarting, resuming and finishing.

Modes: ``exit`` (default) reports the fault and exits with status 1; ``raise`` raises a
RuntimeError (traceback, status 1); ``kill`` sends SIGKILL to itself (status 137, no report).
"""

from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass

from .errors import ConfigError, InjectedFault

FAULT_MODES = ("exit", "raise", "kill")
_SPEC = re.compile(r"^(\d+)@(\d+)(?::([a-z]+))?$")


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

"""Learning-rate schedule: linear warmup, then the main schedule (constant for now).

The schedule is a per-iteration multiplier of the base lr, so further main schedules
(multistep, cosine) slot into ``MAIN_SCHEDULES`` without touching the training loop.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR


def warmup_factor(step: int, warmup_iters: int, start_factor: float) -> float:
    """Linear from ``start_factor`` at step 0 to 1.0 at ``warmup_iters`` (torchvision's rule)."""
    if step >= warmup_iters:
        return 1.0
    alpha = step / warmup_iters
    return start_factor * (1 - alpha) + alpha


def constant(step: int) -> float:
    return 1.0


MAIN_SCHEDULES: dict[str, Callable[[int], float]] = {"constant": constant}


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_iters: int,
    start_factor: float,
    main_schedule: str = "constant",
) -> LambdaLR:
    """Stepped once per optimizer step. Its state dict holds only the step count, so a
    resumed run rebuilds the same schedule from its arguments."""
    main = MAIN_SCHEDULES[main_schedule]

    def factor(step: int) -> float:
        return warmup_factor(step, warmup_iters, start_factor) * main(step)

    return LambdaLR(optimizer, factor)

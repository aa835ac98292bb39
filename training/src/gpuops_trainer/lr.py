"""Learning-rate schedule: linear warmup times the main schedule, per optimizer step.

Main schedules: ``constant``; ``multistep`` (multiply by gamma at each milestone epoch, as
torchvision's detection reference: 26 epochs, milestones 16 and 22, gamma 0.1); ``cosine``
(from the base lr at the end of warmup down to 0 at the last step). Milestones are epochs
converted to optimizer steps, so gradient accumulation and world size are accounted for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.optim.lr_scheduler import LambdaLR

SCHEDULES = ("constant", "multistep", "cosine")


def warmup_factor(step: int, warmup_iters: int, start_factor: float) -> float:
    """Linear from ``start_factor`` at step 0 to 1.0 at ``warmup_iters`` (torchvision's rule)."""
    if step >= warmup_iters:
        return 1.0
    alpha = step / warmup_iters
    return start_factor * (1 - alpha) + alpha


def main_schedule(
    name: str,
    steps_per_epoch: int,
    total_epochs: int,
    warmup_iters: int = 0,
    milestones: Sequence[int] = (),
    gamma: float = 0.1,
) -> Callable[[int], float]:
    """The lr multiplier at optimizer step ``step`` (0-based), warmup excluded."""
    if name == "constant":
        return lambda step: 1.0
    if name == "multistep":
        milestone_steps = sorted(epoch * steps_per_epoch for epoch in milestones)

        def multistep(step: int) -> float:
            return gamma ** sum(1 for milestone in milestone_steps if step >= milestone)

        return multistep
    if name == "cosine":
        total = max(total_epochs * steps_per_epoch - warmup_iters, 1)

        def cosine(step: int) -> float:
            progress = min(max(step - warmup_iters, 0) / total, 1.0)
            return 0.5 * (1.0 + math.cos(math.pi * progress))

        return cosine
    raise ValueError(f"unknown lr schedule {name!r} (choose from {', '.join(SCHEDULES)})")


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_iters: int,
    start_factor: float,
    main_schedule_name: str = "constant",
    *,
    steps_per_epoch: int = 1,
    total_epochs: int = 1,
    milestones: Sequence[int] = (),
    gamma: float = 0.1,
) -> LambdaLR:
    """Stepped once per optimizer step. Its state dict holds only the step count, so a
    resumed run rebuilds the same schedule from its arguments."""
    main = main_schedule(
        main_schedule_name, steps_per_epoch, total_epochs, warmup_iters, milestones, gamma
    )

    def factor(step: int) -> float:
        return warmup_factor(step, warmup_iters, start_factor) * main(step)

    return LambdaLR(optimizer, factor)

"""One training epoch: forward, backward, optimizer and lr steps, and step records."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from .data import check_target
from .errors import NonFiniteLossError
from .faults import FaultSpec, maybe_inject
from .metrics import MetricsWriter

LOSS_NAMES = ("classification", "bbox_regression")


@dataclass
class TrainState:
    """What survives across epochs and goes into checkpoints."""

    epoch: int = 0
    global_step: int = 0
    nonfinite_streak: int = 0  # consecutive skipped steps; not checkpointed


@dataclass
class EpochResult:
    loss: float
    # The median resists the rare single-step spikes of from-scratch training, so it is
    # what verification compares across epochs.
    loss_median: float
    losses: dict[str, float]
    images: int
    seconds: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0


def train_one_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler,
    data_loader: Iterable,
    device: torch.device,
    state: TrainState,
    metrics: MetricsWriter,
    *,
    num_classes: int,
    print_freq: int,
    clip_grad_norm: float | None,
    nonfinite_limit: int,
    rank: int,
    attempt: int,
    fault: FaultSpec | None = None,
) -> EpochResult:
    model.train()
    iters_per_epoch = len(data_loader)
    sums = dict.fromkeys(LOSS_NAMES, 0.0)
    total_sum, finite_iters, images_seen = 0.0, 0, 0
    finite_losses: list[float] = []
    epoch_start = window_start = time.perf_counter()
    window_images = 0
    params = [p for p in model.parameters() if p.requires_grad]

    for iteration, (images, targets) in enumerate(data_loader):
        maybe_inject(fault, rank, state.global_step, attempt)
        for target in targets:
            check_target(target, num_classes)
        images = [image.to(device, non_blocking=True) for image in images]
        targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]

        loss_dict = model(images, targets)
        loss = sum(loss_dict.values())

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # After backward, DDP has averaged the gradients, so every rank computes the same
        # norm and makes the same skip decision without another collective.
        max_norm = clip_grad_norm if clip_grad_norm else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        loss_value = float(loss.detach())
        if math.isfinite(grad_norm):
            optimizer.step()
            state.nonfinite_streak = 0
        else:
            state.nonfinite_streak += 1
            if state.nonfinite_streak > nonfinite_limit:
                raise NonFiniteLossError(
                    f"non-finite loss/gradients for {state.nonfinite_streak} consecutive steps "
                    f"(limit {nonfinite_limit}, see --nonfinite-limit); last loss {loss_value}"
                )
        lr_used = optimizer.param_groups[0]["lr"]
        lr_scheduler.step()
        state.global_step += 1

        batch_images = len(images)
        images_seen += batch_images
        window_images += batch_images
        step_losses = {name: float(loss_dict[name].detach()) for name in LOSS_NAMES}
        if math.isfinite(loss_value):
            finite_iters += 1
            total_sum += loss_value
            finite_losses.append(loss_value)
            for name in LOSS_NAMES:
                sums[name] += step_losses[name]

        last = iteration == iters_per_epoch - 1
        if (iteration + 1) % print_freq == 0 or last:
            now = time.perf_counter()
            metrics.emit(
                "step",
                epoch=state.epoch,
                iter=iteration,
                iters_per_epoch=iters_per_epoch,
                step=state.global_step,
                loss=loss_value,
                losses=step_losses,
                lr=lr_used,
                images_per_s=window_images / max(now - window_start, 1e-9),
            )
            window_start, window_images = now, 0

    seconds = time.perf_counter() - epoch_start
    divisor = max(finite_iters, 1)
    return EpochResult(
        loss=total_sum / divisor if finite_iters else math.nan,
        loss_median=statistics.median(finite_losses) if finite_losses else math.nan,
        losses={name: sums[name] / divisor if finite_iters else math.nan for name in LOSS_NAMES},
        images=images_seen,
        seconds=seconds,
    )

"""One training epoch: micro-batches, gradient accumulation, optimizer and lr steps, records.

The hot loop avoids host synchronisation: one per optimizer step (the non-finite guard
must decide whether to step), more only at print steps; per-step losses stay on the device
until the epoch ends. Step timing (timing.py) adds none: its marks are host clock readings on
a CPU and CUDA events on a GPU, read at the print steps.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from .data import check_target
from .errors import NonFiniteLossError
from .faults import FaultSpec, maybe_inject, slow_down
from .memory import MemorySampler, emit_memory
from .metrics import MetricsWriter
from .progress import ProgressBar
from .timing import StepTimer

LOSS_NAMES = ("classification", "bbox_regression")


@dataclass
class TrainState:
    """What survives across epochs and goes into checkpoints."""

    epoch: int = 0
    global_step: int = 0  # optimizer steps, skipped non-finite ones included
    epoch_batches: int = 0  # micro-batches of ``epoch`` consumed (the sampler position)
    nonfinite_streak: int = 0  # consecutive skipped steps; not checkpointed


@dataclass
class LoopOptions:
    num_classes: int
    print_freq: int
    clip_grad_norm: float | None
    nonfinite_limit: int
    rank: int
    attempt: int
    grad_accum_steps: int = 1
    amp_dtype: torch.dtype | None = None  # None: full precision
    fault: FaultSpec | None = None
    memory: MemorySampler | None = None  # None: records without memory samples
    timer: StepTimer | None = None  # None: records without timing
    slow_s: float = 0.0  # --slow-rank: this rank's extra compute seconds per micro-step


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


def to_model_input(image: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Decoded images travel as uint8 (4x fewer bytes) and become floats on the device."""
    image = image.to(device, non_blocking=True)
    if image.dtype == torch.uint8:
        return image.float().div_(255)
    return image


def autocast_context(device: torch.device, amp_dtype: torch.dtype | None):
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=amp_dtype)


def train_one_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler,
    data_loader: Iterable,
    device: torch.device,
    state: TrainState,
    metrics: MetricsWriter,
    options: LoopOptions,
    *,
    iters_per_epoch: int,
    scaler: torch.amp.GradScaler | None = None,
    after_optimizer_step: Callable[[], None] | None = None,
    progress: ProgressBar | None = None,
) -> EpochResult:
    """Train from micro-batch ``state.epoch_batches`` (non-zero after a mid-epoch resume) to
    the epoch's end. ``after_optimizer_step`` runs after each optimizer step (checkpoints)."""
    model.train()
    accum = options.grad_accum_steps
    steps_per_epoch = math.ceil(iters_per_epoch / accum)
    start_iter = state.epoch_batches
    params = [p for p in model.parameters() if p.requires_grad]
    max_norm = options.clip_grad_norm or None
    no_sync = getattr(model, "no_sync", None)  # DDP: skip the all-reduce on non-final micro-steps
    step_losses: list[torch.Tensor] = []  # [3] per micro-step: total, classification, bbox
    group_loss = None
    images_seen = window_images = 0
    timer = options.timer
    if timer is not None:
        timer.reset()
    epoch_start = window_start = fetch_start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)

    for iteration, (images, targets) in enumerate(data_loader, start=start_iter):
        if timer is not None:
            timer.data_waited(time.perf_counter() - fetch_start)
        if iteration == start_iter and options.memory is not None:
            # The loader's spike: its workers started (or resumed) and prefetched.
            emit_memory(
                metrics, options.memory, "loader_start", epoch=state.epoch, step=state.global_step
            )
        if timer is not None:
            timer.start()
        slow_down(options.slow_s)
        group_start = iteration - iteration % accum
        # The last group of an epoch may be shorter; scaling by its real length keeps the
        # gradient an average over the micro-batches that went into it.
        group_len = min(accum, iters_per_epoch - group_start)
        final_micro_step = iteration == group_start + group_len - 1
        if iteration == group_start:
            maybe_inject(options.fault, options.rank, state.global_step, options.attempt)
            group_loss = None
        for target in targets:
            check_target(target, options.num_classes)
        images = [to_model_input(image, device) for image in images]
        targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]

        sync_context = no_sync() if no_sync and not final_micro_step else contextlib.nullcontext()
        if timer is not None:
            timer.before_forward()
        with sync_context:
            with autocast_context(device, options.amp_dtype):
                loss_dict = model(images, targets)
                loss = loss_dict["classification"] + loss_dict["bbox_regression"]
            micro_loss = loss / group_len
            (scaler.scale(micro_loss) if scaler else micro_loss).backward()
        if timer is not None:
            timer.after_backward()
        detached = torch.stack(
            [loss.detach(), *(loss_dict[name].detach() for name in LOSS_NAMES)]
        ).float()
        step_losses.append(detached)
        group_loss = detached[0] if group_loss is None else group_loss + detached[0]
        state.epoch_batches = iteration + 1
        images_seen += len(images)
        window_images += len(images)
        if not final_micro_step:
            if timer is not None:
                timer.end(optimizer_step=False)
            fetch_start = time.perf_counter()
            continue

        # One host sync per optimizer step: is it safe to apply these gradients?
        if scaler is not None:
            scaler.unscale_(optimizer)
        if max_norm is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if scaler is None and max_norm is not None:
            finite = math.isfinite(float(grad_norm))
        else:
            # With a GradScaler, overflowing fp16 gradients are the scaler's business (it
            # skips the step and lowers the scale); only a non-finite loss counts here.
            finite = math.isfinite(float(group_loss))
        if finite:
            if scaler is not None:
                scaler.step(optimizer)
            else:
                optimizer.step()
            state.nonfinite_streak = 0
        else:
            state.nonfinite_streak += 1
            if state.nonfinite_streak > options.nonfinite_limit:
                raise NonFiniteLossError(
                    f"non-finite loss/gradients for {state.nonfinite_streak} consecutive steps "
                    f"(limit {options.nonfinite_limit}, see --nonfinite-limit); "
                    f"last loss {float(group_loss)}"
                )
        if scaler is not None:
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        lr_used = optimizer.param_groups[0]["lr"]
        lr_scheduler.step()
        state.global_step += 1
        if timer is not None:
            timer.end(optimizer_step=True)

        epoch_step = group_start // accum + 1
        last = iteration == iters_per_epoch - 1
        if epoch_step % options.print_freq == 0 or last:
            now = time.perf_counter()
            elapsed = max(now - window_start, 1e-9)
            values = detached.tolist()
            memory = {"memory": options.memory.sample()} if options.memory is not None else {}
            # After tolist: that sync has completed the window's CUDA events.
            timing = {"timing": timer.window(elapsed)} if timer is not None else {}
            metrics.emit(
                "step",
                epoch=state.epoch,
                iter=iteration,
                iters_per_epoch=iters_per_epoch,
                steps_per_epoch=steps_per_epoch,
                step=state.global_step,
                loss=values[0],
                losses=dict(zip(LOSS_NAMES, values[1:], strict=True)),
                lr=lr_used,
                images_per_s=window_images / elapsed,
                **memory,
                **timing,
            )
            if progress is not None:
                progress.update(state.epoch, iteration + 1, iters_per_epoch, values[0])
            window_start, window_images = now, 0
        elif progress is not None:
            progress.update(state.epoch, iteration + 1, iters_per_epoch, None)
        if after_optimizer_step is not None:
            after_optimizer_step()
        fetch_start = time.perf_counter()

    seconds = time.perf_counter() - epoch_start
    if progress is not None:
        progress.end_line()
    return _summarise(step_losses, images_seen, seconds)


def _summarise(step_losses: list[torch.Tensor], images: int, seconds: float) -> EpochResult:
    rows = torch.stack(step_losses).tolist() if step_losses else []  # one sync per epoch
    finite = [row for row in rows if all(math.isfinite(value) for value in row)]
    if not finite:
        nan_losses = dict.fromkeys(LOSS_NAMES, math.nan)
        return EpochResult(math.nan, math.nan, nan_losses, images, seconds)
    totals = [row[0] for row in finite]
    return EpochResult(
        loss=sum(totals) / len(finite),
        loss_median=statistics.median(totals),
        losses={
            name: sum(row[i + 1] for row in finite) / len(finite)
            for i, name in enumerate(LOSS_NAMES)
        },
        images=images,
        seconds=seconds,
    )

"""Train RetinaNet with DistributedDataParallel.

    torchrun --standalone --nproc_per_node=2 -m gpuops_trainer.train --output-dir DIR ...
    python -m gpuops_trainer.train --output-dir DIR ...        # one process

Read ``run`` top to bottom, as torchvision's detection reference: process group, data,
model, optimizer, resume, then the epoch loop with its checkpoints and evaluations, which
are functions of a RunContext. The options are in options.py; exit codes are listed in
errors.py and README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler

from . import checkpoint as ckpt
from .data import (
    CocoDataset,
    GroupedBatchSampler,
    OpenImagesDataset,
    ResumableBatchSampler,
    SyntheticDetection,
    aspect_ratio_groups,
    collate_lists,
)
from .distributed import DistInfo, broadcast_from_main, cleanup, env_ranks, init_distributed
from .engine import LoopOptions, TrainState, train_one_epoch
from .errors import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_PEER_LOST,
    ConfigError,
    InjectedFault,
    Terminated,
    TrainerError,
    peer_lost,
)
from .evaluate import evaluate
from .faults import HostMemoryLeak, parse_fault, parse_leak, parse_slow_rank
from .layout import OPENIMAGES_SPLITS, paths_of_args
from .limits import memlock_limits
from .lr import build_lr_scheduler
from .memory import MemorySampler, emit_memory
from .metrics import MetricsWriter, restart_attempt
from .models import build_model
from .options import AMP_DTYPES, PROG, parse_args
from .progress import ProgressBar
from .shm import processes_on_node, shm_shortfall
from .timing import StepTimer


def build_dataset(args: argparse.Namespace, split: str):
    """The train or val split of the chosen dataset; problems with it are data errors (3)."""
    if args.dataset == "synthetic":
        if split == "train":
            return SyntheticDetection(
                args.synthetic_images, args.synthetic_classes, args.image_size, seed=args.seed
            )
        val_seed = args.seed + 1 if args.synthetic_val_seed is None else args.synthetic_val_seed
        return SyntheticDetection(
            args.synthetic_val_images, args.synthetic_classes, args.image_size, seed=val_seed
        )
    paths = paths_of_args(args, split)  # the layout the pre-launch check verifies
    if args.dataset == "coco":
        return CocoDataset(paths.annotations, paths.images, train=split == "train")
    return OpenImagesDataset(
        paths.annotations,
        paths.class_descriptions,
        paths.images,
        split=OPENIMAGES_SPLITS[split],
        classes=args.classes,
        image_list=paths.image_list,
        train=split == "train",
    )


def report_dataset(split: str, dataset, args, metrics: MetricsWriter, is_main: bool) -> None:
    """One ``dataset`` event (rank 0), and a stderr line when boxes or images were dropped."""
    if not is_main:
        return
    facts = dataset.describe()
    metrics.emit("dataset", split=split, dataset=args.dataset, **facts)
    dropped = {k: v for k, v in facts.get("dropped_boxes", {}).items() if v}
    if dropped or facts.get("images_without_boxes"):
        summary = ", ".join(f"{count} {reason}" for reason, count in sorted(dropped.items()))
        print(
            f"{PROG}: {split} data: dropped boxes: {summary or 'none'}; "
            f"images without boxes left out: {facts.get('images_without_boxes', 0)}",
            file=sys.stderr,
            flush=True,
        )


def warn_if_shm_small(args, metrics: MetricsWriter, dist_info: DistInfo) -> None:
    shortfall = shm_shortfall(args.workers, processes_on_node())
    if shortfall is None or dist_info.local_rank != 0:
        return
    print(f"{PROG}: warning: {shortfall['message']}", file=sys.stderr, flush=True)
    metrics.emit("warning", code="shm_too_small", **shortfall)


def build_train_loader(dataset, args, dist_info: DistInfo):
    """DistributedSampler -> (grouped) batches -> resumable batches -> DataLoader."""
    sampler = DistributedSampler(
        dataset,
        num_replicas=dist_info.world_size,
        rank=dist_info.rank,
        shuffle=True,
        seed=args.seed,
    )
    if args.aspect_ratio_group_factor >= 0:
        group_ids = aspect_ratio_groups(dataset.aspect_ratios(), args.aspect_ratio_group_factor)
        batches = GroupedBatchSampler(sampler, group_ids, args.batch_size)
    else:
        batches = BatchSampler(sampler, args.batch_size, drop_last=False)
    resumable = ResumableBatchSampler(batches)
    loader = DataLoader(
        dataset,
        batch_sampler=resumable,
        num_workers=args.workers,
        collate_fn=collate_lists,
        pin_memory=dist_info.device.type == "cuda",
        worker_init_fn=loader_worker_exits_quietly_on_sigterm,
        persistent_workers=args.workers > 0 and args.persistent_workers,
    )
    return sampler, resumable, loader


def loader_worker_exits_quietly_on_sigterm(_worker_id: int) -> None:
    """A SIGTERM to the rank's process group (torchrun's agent stopping it) is the rank's to
    report. A loader worker killed by it would race that report with the loader's "worker
    killed by signal" error; one that exits 0 is not an error to the loader. Ignoring the
    signal is no answer: at exit, multiprocessing stops its workers with SIGTERM and waits."""
    signal.signal(signal.SIGTERM, _exit_quietly)


def _exit_quietly(_signum, _frame) -> None:
    os._exit(0)


def build_val_loader(dataset, args, dist_info: DistInfo) -> DataLoader:
    sampler = DistributedSampler(
        dataset, num_replicas=dist_info.world_size, rank=dist_info.rank, shuffle=False
    )
    return DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        collate_fn=collate_lists,
        pin_memory=dist_info.device.type == "cuda",
        worker_init_fn=loader_worker_exits_quietly_on_sigterm,
    )


def choose_checkpoint(
    args: argparse.Namespace, dist_info: DistInfo, metrics: MetricsWriter
) -> tuple[str | None, dict | None]:
    """Rank 0 picks the checkpoint and tells the others, so all ranks load the same file."""
    checkpoint_dir = Path(args.output_dir) / "checkpoints"
    chosen: str | None = None
    state: dict | None = None
    if dist_info.is_main:
        for path in ckpt.remove_partial_writes(checkpoint_dir):
            print(
                f"{PROG}: warning: removed {path}: a checkpoint write that never finished",
                file=sys.stderr,
                flush=True,
            )
    if dist_info.is_main and args.resume != "never":
        if args.resume == "auto":
            path, state, skipped = ckpt.load_newest(checkpoint_dir)
            for item in skipped:
                print(
                    f"{PROG}: warning: skipping checkpoint {item.path}: {item.reason}",
                    file=sys.stderr,
                    flush=True,
                )
                metrics.emit("checkpoint_skipped", path=str(item.path), reason=item.reason)
        else:
            path = Path(args.resume)
            try:
                state = ckpt.load_checkpoint(path)
            except ValueError as exc:
                raise ConfigError(f"--resume: {path}: {exc}") from None
        chosen = str(path) if path is not None else None
    chosen = broadcast_from_main(chosen)
    if chosen is not None and state is None:
        state = ckpt.load_checkpoint(chosen)
    return chosen, state


def resume_position(checkpoint: dict, args, dist_info: DistInfo, batches_per_epoch: int):
    """(epoch, batches of it already consumed) to continue from.

    A mid-epoch position only means the same thing with the same shards and batches: if the
    world size, batch size or accumulation changed, the interrupted epoch starts over.
    """
    epoch, done = int(checkpoint["epoch"]), int(checkpoint["epoch_batches"])
    if done >= int(checkpoint["iters_per_epoch"]):
        return epoch + 1, 0
    saved = checkpoint["args"]
    same_layout = (
        int(checkpoint.get("world_size", -1)) == dist_info.world_size
        and saved.get("batch_size") == args.batch_size
        and saved.get("grad_accum_steps", 1) == args.grad_accum_steps
        and int(checkpoint["iters_per_epoch"]) == batches_per_epoch
    )
    if not same_layout:
        print(
            f"{PROG}: warning: world size, batch size or --grad-accum-steps changed since the "
            f"checkpoint; epoch {epoch} restarts from its first batch",
            file=sys.stderr,
            flush=True,
        )
        return epoch, 0
    return epoch, done


@dataclass
class RunContext:
    """What checkpointing and evaluation read, built once by ``run``.

    ``model`` is the model without DDP's wrapper: what is saved and evaluated. ``state``
    is the run's position, which the epoch loop moves on.
    """

    args: argparse.Namespace
    dist_info: DistInfo
    metrics: MetricsWriter
    state: TrainState
    model: nn.Module
    optimizer: torch.optim.Optimizer
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None
    iters_per_epoch: int
    num_classes: int
    amp_dtype: torch.dtype | None
    val_loader: DataLoader | None
    val_dataset: Dataset | None
    memory: MemorySampler


def build_ddp_model(
    args: argparse.Namespace, num_classes: int, checkpoint: dict | None, dist_info: DistInfo
) -> tuple[nn.Module, nn.Module]:
    """The model, built on every rank from the same seed (and given the checkpoint's
    weights), and what trains it: the model wrapped for DDP, or itself in one process."""
    model = build_model(
        args.model,
        num_classes=num_classes,
        min_size=args.min_size,
        max_size=args.max_size,
        backbone_weights=args.backbone_weights,
        trainable_backbone_layers=args.trainable_backbone_layers,
    )
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
    if args.sync_bn and dist_info.enabled:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    device = dist_info.device
    model.to(device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)
    if not dist_info.enabled:
        return model, model
    device_ids = [device.index] if device.type == "cuda" else None
    return model, DistributedDataParallel(model, device_ids=device_ids)


def resume(ctx: RunContext, checkpoint: dict, path: str) -> None:
    """Continue from ``checkpoint`` (read from ``path``): optimizer, schedule, loss scale,
    position and random states; the model has its weights already (build_ddp_model)."""
    ctx.optimizer.load_state_dict(checkpoint["optimizer"])
    ctx.lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
    if ctx.scaler is not None and checkpoint.get("scaler"):
        ctx.scaler.load_state_dict(checkpoint["scaler"])
    state = ctx.state
    state.epoch, state.epoch_batches = resume_position(
        checkpoint, ctx.args, ctx.dist_info, ctx.iters_per_epoch
    )
    state.global_step = int(checkpoint["global_step"])
    ckpt.restore_rng_states(checkpoint["rng"])
    ctx.metrics.emit(
        "resume",
        path=path,
        epoch=state.epoch,
        step=state.global_step,
        epoch_batches=state.epoch_batches,
    )


def record_memory(ctx: RunContext, phase: str, epoch: int | None = None) -> None:
    """A ``memory`` event at PHASE, at the run's position (or after EPOCH)."""
    epoch = ctx.state.epoch if epoch is None else epoch
    emit_memory(ctx.metrics, ctx.memory, phase, epoch=epoch, step=ctx.state.global_step)


def save_checkpoint(ctx: RunContext) -> None:
    """Rank 0 writes the run's state at its current position and reports it."""
    if not ctx.dist_info.is_main:
        return
    state = ctx.state
    # Collecting and serialising the state costs host memory: the sample after the write
    # shows what stayed, and its rss_peak_bytes whether the write set a new high-water mark.
    record_memory(ctx, "checkpoint_write_before")
    # The other ranks wait at their next collective meanwhile: this is the run's stall.
    started = time.perf_counter()
    path = ckpt.save_checkpoint(
        {
            "model": ctx.model.state_dict(),
            "optimizer": ctx.optimizer.state_dict(),
            "lr_scheduler": ctx.lr_scheduler.state_dict(),
            "scaler": ctx.scaler.state_dict() if ctx.scaler is not None else None,
            "epoch": state.epoch,
            "epoch_batches": state.epoch_batches,
            "iters_per_epoch": ctx.iters_per_epoch,
            "global_step": state.global_step,
            "world_size": ctx.dist_info.world_size,
            "rng": ckpt.rng_states(),
            "args": vars(ctx.args),
        },
        Path(ctx.args.output_dir) / "checkpoints",
        keep=ctx.args.keep_checkpoints,
    )
    ctx.metrics.emit(
        "checkpoint",
        epoch=state.epoch,
        step=state.global_step,
        epoch_batches=state.epoch_batches,
        path=str(path),
        bytes=path.stat().st_size,
        seconds=time.perf_counter() - started,
    )
    record_memory(ctx, "checkpoint_write_after")


def checkpoint_mid_epoch(ctx: RunContext) -> None:
    """After each optimizer step: a checkpoint every --checkpoint-every-steps steps."""
    every = ctx.args.checkpoint_every_steps
    state = ctx.state
    # The epoch's last step is saved by the end-of-epoch checkpoint.
    if every and state.global_step % every == 0 and state.epoch_batches < ctx.iters_per_epoch:
        save_checkpoint(ctx)


def evaluate_epoch(ctx: RunContext, epoch: int) -> None:
    """COCO mAP of the model on the validation split after ``epoch``; rank 0 reports it.
    Every rank reports its memory after it: the GPU peaks are the evaluation's own."""
    ctx.memory.reset_peaks()
    result = evaluate(
        ctx.model,
        ctx.val_loader,
        ctx.val_dataset,
        ctx.dist_info.device,
        ctx.num_classes,
        ctx.amp_dtype,
        ctx.dist_info.is_main,
    )
    if result is not None:
        ctx.metrics.emit(
            "eval",
            epoch=epoch,
            step=ctx.state.global_step,
            map=result.map,
            map_50=result.map_50,
            map_75=result.map_75,
            images=result.images,
            detections=result.detections,
            seconds=result.seconds,
        )
    record_memory(ctx, "eval_after", epoch)


def run(args: argparse.Namespace, state: TrainState, metrics: MetricsWriter) -> None:
    dist_info = init_distributed(args.dist_backend, args.dist_timeout_s)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts them)
    device = dist_info.device
    if args.sync_bn and device.type != "cuda":
        raise ConfigError(
            "--sync-bn: SyncBatchNorm needs CUDA devices (torch has no CPU/gloo "
            "implementation); drop --sync-bn on CPU"
        )
    attempt = restart_attempt()
    fault = parse_fault(args.inject_fault) if args.inject_fault else None
    leak_spec = parse_leak(args.leak_mib_per_epoch) if args.leak_mib_per_epoch else None
    leak = HostMemoryLeak(leak_spec, dist_info.rank)  # a test hook: off unless asked for
    slow_rank = parse_slow_rank(args.slow_rank) if args.slow_rank else None  # a drill
    memory = MemorySampler(device)
    amp_dtype = AMP_DTYPES[args.amp_dtype] if args.amp else None

    # Data: the train split, and the validation split when anything evaluates.
    dataset = build_dataset(args, "train")
    report_dataset("train", dataset, args, metrics, dist_info.is_main)
    evaluating = args.eval_at_end or args.eval_every_epochs > 0
    val_dataset = build_dataset(args, "val") if evaluating else None
    if val_dataset is not None:
        report_dataset("val", val_dataset, args, metrics, dist_info.is_main)
        if val_dataset.num_classes != dataset.num_classes:
            raise ConfigError(
                f"--val-annotations: {val_dataset.num_classes} classes, the training split "
                f"has {dataset.num_classes}"
            )
    warn_if_shm_small(args, metrics, dist_info)
    sampler, batch_sampler, data_loader = build_train_loader(dataset, args, dist_info)
    val_loader = build_val_loader(val_dataset, args, dist_info) if val_dataset else None
    iters_per_epoch = batch_sampler.batches_per_epoch
    steps_per_epoch = math.ceil(iters_per_epoch / args.grad_accum_steps)

    resumed_from, checkpoint = choose_checkpoint(args, dist_info, metrics)
    model_without_ddp, model = build_ddp_model(args, dataset.num_classes, checkpoint, dist_info)
    # Per-rank step time split into data, compute and the wait in DDP's collectives.
    timer = StepTimer.for_device(device)
    if dist_info.enabled:
        timer.attach(model)

    # Optimization: SGD, warmup + main schedule per optimizer step, fp16 loss scaling.
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(
        params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    # As in torchvision's reference, warmup never outlasts the first epoch.
    warmup_iters = min(args.warmup_iters, steps_per_epoch)
    lr_scheduler = build_lr_scheduler(
        optimizer,
        warmup_iters,
        args.warmup_factor,
        args.lr_schedule,
        steps_per_epoch=steps_per_epoch,
        total_epochs=args.epochs,
        milestones=args.lr_steps,
        gamma=args.lr_gamma,
    )
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    ctx = RunContext(
        args=args,
        dist_info=dist_info,
        metrics=metrics,
        state=state,
        model=model_without_ddp,
        optimizer=optimizer,
        lr_scheduler=lr_scheduler,
        scaler=scaler,
        iters_per_epoch=iters_per_epoch,
        num_classes=dataset.num_classes,
        amp_dtype=amp_dtype,
        val_loader=val_loader,
        val_dataset=val_dataset,
        memory=memory,
    )
    if checkpoint is not None:
        resume(ctx, checkpoint, resumed_from)
    start_epoch = state.epoch

    memlock_bytes, memlock_max_bytes = memlock_limits()
    metrics.emit(
        "run_start",
        model=args.model,
        backend=dist_info.backend,
        collective_timeout_s=args.dist_timeout_s if dist_info.backend else None,
        device=str(device),
        torch_version=torch.__version__,
        dataset=args.dataset,
        train_images=len(dataset),
        val_images=len(val_dataset) if val_dataset is not None else None,
        num_classes=dataset.num_classes,
        batch_size=args.batch_size,
        grad_accum_steps=args.grad_accum_steps,
        # The model's input size: with the model, batch and AMP, what makes two runs'
        # throughput comparable (a node's history compares a GPU only with itself on the same).
        min_size=args.min_size,
        max_size=args.max_size,
        iters_per_epoch=iters_per_epoch,
        steps_per_epoch=steps_per_epoch,
        amp=args.amp_dtype if args.amp else None,
        epochs=args.epochs,
        start_epoch=start_epoch,
        start_epoch_batches=state.epoch_batches,
        resumed_from=resumed_from,
        global_step=state.global_step,
        uid=os.getuid(),
        memlock_bytes=memlock_bytes,
        memlock_max_bytes=memlock_max_bytes,
        memory_cgroup=memory.cgroup.path if memory.cgroup is not None else None,
        memory_cgroup_version=memory.cgroup.files.version if memory.cgroup is not None else None,
    )
    record_memory(ctx, "start")  # model, optimizer and data built; nothing trained yet

    options = LoopOptions(
        num_classes=dataset.num_classes,
        print_freq=args.print_freq,
        clip_grad_norm=args.clip_grad_norm,
        nonfinite_limit=args.nonfinite_limit,
        rank=dist_info.rank,
        attempt=attempt,
        grad_accum_steps=args.grad_accum_steps,
        amp_dtype=amp_dtype,
        fault=fault,
        memory=memory,
        timer=timer,
        slow_s=slow_rank.delay_s(dist_info.rank) if slow_rank is not None else 0.0,
    )
    progress = ProgressBar.for_rank(dist_info.rank)
    last_evaluated = None
    for epoch in range(start_epoch, args.epochs):
        state.epoch = epoch
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        batch_sampler.skip = state.epoch_batches  # batches a mid-epoch checkpoint already did
        leak.grow()
        memory.reset_peaks()  # each epoch's samples show that epoch's GPU peaks
        result = train_one_epoch(
            model,
            optimizer,
            lr_scheduler,
            data_loader,
            device,
            state,
            metrics,
            options,
            iters_per_epoch=iters_per_epoch,
            scaler=scaler,
            after_optimizer_step=functools.partial(checkpoint_mid_epoch, ctx),
            progress=progress,
        )
        batch_sampler.skip = 0
        metrics.emit(
            "epoch",
            epoch=epoch,
            step=state.global_step,
            loss=result.loss,
            loss_median=result.loss_median,
            losses=result.losses,
            images_per_s=result.images_per_s,
            seconds=result.seconds,
        )
        record_memory(ctx, "epoch_end")
        save_checkpoint(ctx)
        state.epoch, state.epoch_batches = epoch + 1, 0
        if args.eval_every_epochs and (epoch + 1) % args.eval_every_epochs == 0:
            evaluate_epoch(ctx, epoch)
            last_evaluated = epoch

    if args.eval_at_end and last_evaluated != args.epochs - 1:
        evaluate_epoch(ctx, args.epochs - 1)
    cleanup()


def one_line(exc: BaseException) -> str:
    """The message alone: a DataLoader worker re-raises with the worker's traceback."""
    text = str(exc)
    if "Original Traceback" in text:
        last = text.strip().splitlines()[-1]
        prefix = f"{type(exc).__module__}.{type(exc).__name__}: "
        text = last[len(prefix) :] if last.startswith(prefix) else last
    return text


def report_end(
    metrics: MetricsWriter, state: TrainState, started: float, status: str, **extra
) -> None:
    """The rank's last record (``run_end``), then its metrics file closed."""
    metrics.emit(
        "run_end",
        status=status,
        epochs_completed=state.epoch,
        step=state.global_step,
        seconds=time.time() - started,
        **extra,
    )
    metrics.close()


STOPPED_BY_SIGTERM = (
    "stopped by SIGTERM (the pod is being deleted or preempted, or torchrun's agent is "
    "stopping its workers after a failure elsewhere)"
)


class SigtermRaises:
    """While active, the first SIGTERM raises Terminated in this process, so the rank reports
    its end instead of vanishing; later ones are ignored (its launcher sends SIGKILL after its
    grace period). torchrun's agent signals the worker's whole process group; the DataLoader
    workers leave without an error (``loader_worker_exits_quietly_on_sigterm``)."""

    def __init__(self) -> None:
        self.received = False
        self._owner = os.getpid()

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self._owner:  # a DataLoader worker before its own set-up
            return
        self.received = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated(STOPPED_BY_SIGTERM)

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self  # signal handlers belong to the main thread (in-process callers)
            return
        previous = signal.signal(signal.SIGTERM, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)

    def hold(self) -> None:
        """From here on a SIGTERM cannot interrupt the rank's last record."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


def report_failure(
    metrics: MetricsWriter, state: TrainState, started: float, message: str, code: int
) -> int:
    """The rank's one error line and its run_end; returns the exit code."""
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    report_end(metrics, state, started, "error", error=message)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    with SigtermRaises().installed() as sigterm:
        return _main(argv, sigterm)


def _main(argv: Sequence[str] | None, sigterm: SigtermRaises) -> int:
    args = parse_args(argv)  # usage errors exit 2 here, before anything starts
    started = time.time()
    state = TrainState()
    try:
        rank, local_rank, world_size = env_ranks()
        metrics = MetricsWriter(args.output_dir, rank, local_rank, world_size)
    except (ConfigError, OSError) as exc:
        print(f"{PROG}: error: --output-dir: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG

    try:
        run(args, state, metrics)
    except TrainerError as exc:
        sigterm.hold()
        if isinstance(exc, InjectedFault):  # the fault already printed its line
            report_end(metrics, state, started, "error", error=one_line(exc))
            return exc.exit_code
        return report_failure(metrics, state, started, one_line(exc), exc.exit_code)
    except Exception as exc:
        sigterm.hold()
        if sigterm.received:  # whatever the signal broke on its way (a loader, a collective)
            return report_failure(metrics, state, started, STOPPED_BY_SIGTERM, Terminated.exit_code)
        if peer_lost(exc):
            message = f"a peer rank or the rendezvous was lost: {one_line(exc)}"
            return report_failure(metrics, state, started, message, EXIT_PEER_LOST)
        traceback.print_exc()
        report_end(metrics, state, started, "error", error=f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    sigterm.hold()
    report_end(metrics, state, started, "ok")
    return EXIT_OK


def cli() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    cli()

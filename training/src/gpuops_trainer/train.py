"""Train RetinaNet with DistributedDataParallel.

    torchrun --standalone --nproc_per_node=2 -m gpuops_trainer.train --output-dir DIR ...
    python -m gpuops_trainer.train --output-dir DIR ...        # one process

Read ``main`` top to bottom: arguments, process group, data, model, optimizer, resume,
then the epoch loop with its checkpoints. Exit codes are listed in errors.py and README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from . import __version__
from . import checkpoint as ckpt
from .data import SyntheticDetection, collate_lists
from .distributed import (
    BACKENDS,
    DistInfo,
    broadcast_from_main,
    cleanup,
    env_ranks,
    init_distributed,
)
from .engine import TrainState, train_one_epoch
from .errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, ConfigError, InjectedFault, TrainerError
from .faults import parse_fault
from .lr import build_lr_scheduler
from .metrics import MetricsWriter, restart_attempt
from .models import MODELS, build_model

PROG = "gpuops-train"
DATASETS = ("synthetic",)


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors print one line naming the option (no usage block), then exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_CONFIG, f"{self.prog}: error: {message}\n")


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _float_at_least(minimum: float, inclusive: bool):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (value >= minimum if inclusive else value > minimum):
            raise argparse.ArgumentTypeError(f"must be {'>=' if inclusive else '>'} {minimum}")
        return value

    return parse


_positive_float = _float_at_least(0.0, inclusive=False)
_non_negative_float = _float_at_least(0.0, inclusive=True)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=PROG, description="Distributed RetinaNet trainer (gpuops).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")

    run = parser.add_argument_group("run")
    run.add_argument("--output-dir", required=True, help="checkpoints/ and metrics/ go here")
    run.add_argument("--epochs", type=_int_at_least(1), default=26)
    run.add_argument(
        "--print-freq",
        type=_int_at_least(1),
        default=20,
        help="emit a step record every N iterations (and at each epoch's end)",
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--threads",
        type=_int_at_least(1),
        default=None,
        help="torch.set_num_threads per process (default: torch's own choice, "
        "which follows OMP_NUM_THREADS)",
    )
    run.add_argument(
        "--dist-backend",
        choices=BACKENDS,
        default="auto",
        help="auto = nccl when CUDA is available, else gloo",
    )

    data = parser.add_argument_group("data")
    data.add_argument("--dataset", choices=DATASETS, default="synthetic")
    data.add_argument("--synthetic-images", type=_int_at_least(1), default=256)
    data.add_argument("--synthetic-classes", type=_int_at_least(1), default=6)
    data.add_argument(
        "--image-size",
        type=_int_at_least(16),
        default=256,
        help="side of the generated square images, in pixels",
    )
    data.add_argument("--batch-size", type=_int_at_least(1), default=2, help="images per process")
    data.add_argument("--workers", type=_int_at_least(0), default=2, help="DataLoader workers")

    model = parser.add_argument_group("model")
    model.add_argument("--model", choices=tuple(MODELS), default="retinanet_resnet50_fpn")
    model.add_argument(
        "--min-size",
        type=_int_at_least(16),
        default=800,
        help="RetinaNet resizes the shorter image side to this",
    )
    model.add_argument(
        "--max-size",
        type=_int_at_least(16),
        default=1333,
        help="upper bound for the longer side after resizing",
    )
    model.add_argument(
        "--backbone-weights",
        default=None,
        metavar="PATH",
        help="local ResNet state dict loaded into the backbone",
    )
    model.add_argument(
        "--trainable-backbone-layers",
        type=int,
        choices=range(6),
        default=None,
        metavar="{0..5}",
        help="with --backbone-weights (default 3)",
    )

    optim = parser.add_argument_group("optimization")
    optim.add_argument(
        "--lr",
        type=_positive_float,
        default=0.01,
        help="SGD learning rate (for the whole job, not scaled by world size)",
    )
    optim.add_argument("--momentum", type=float, default=0.9)
    optim.add_argument("--weight-decay", type=float, default=1e-4)
    optim.add_argument(
        "--warmup-iters",
        type=_int_at_least(0),
        default=1000,
        help="linear warmup steps, capped at one epoch",
    )
    optim.add_argument(
        "--warmup-factor",
        type=_positive_float,
        default=0.001,
        help="lr multiplier at the first warmup step",
    )
    optim.add_argument(
        "--clip-grad-norm",
        type=_non_negative_float,
        default=10.0,
        metavar="NORM",
        help="clip the global gradient norm; 0 disables (from-scratch RetinaNet sees rare "
        "gradient spikes 50x the usual norm that otherwise kill the classification head)",
    )
    optim.add_argument(
        "--nonfinite-limit",
        type=_int_at_least(0),
        default=10,
        help="consecutive non-finite steps (skipped) before exiting with code 4",
    )

    state = parser.add_argument_group("checkpoints and drills")
    state.add_argument(
        "--resume",
        default="auto",
        metavar="auto|never|PATH",
        help="auto: newest loadable checkpoint in OUTPUT_DIR/checkpoints",
    )
    state.add_argument("--keep-checkpoints", type=_int_at_least(1), default=3)
    state.add_argument(
        "--inject-fault",
        default=None,
        metavar="RANK@STEP[:MODE]",
        help="fault drills only: rank RANK fails at global step STEP on the "
        "first attempt; MODE exit (default), raise or kill",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_size < args.min_size:
        parser.error(f"argument --max-size: must be >= --min-size ({args.min_size})")
    if args.inject_fault is not None:
        try:
            parse_fault(args.inject_fault)
        except ConfigError as exc:
            parser.error(f"argument {exc}")
    if args.resume not in ("auto", "never") and not os.path.isfile(args.resume):
        parser.error(
            f"argument --resume: expected auto, never or a checkpoint file, got {args.resume!r}"
        )
    return args


def build_dataset(args: argparse.Namespace) -> SyntheticDetection:
    # Later datasets (COCO, Open Images) plug in here and must expose num_classes.
    return SyntheticDetection(
        args.synthetic_images, args.synthetic_classes, args.image_size, seed=args.seed
    )


def choose_checkpoint(
    args: argparse.Namespace, dist_info: DistInfo, metrics: MetricsWriter
) -> tuple[str | None, dict | None]:
    """Rank 0 picks the checkpoint and tells the others, so all ranks load the same file."""
    checkpoint_dir = Path(args.output_dir) / "checkpoints"
    chosen: str | None = None
    state: dict | None = None
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


def run(args: argparse.Namespace, state: TrainState, metrics: MetricsWriter) -> None:
    dist_info = init_distributed(args.dist_backend)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts them)
    device = dist_info.device
    attempt = restart_attempt()
    fault = parse_fault(args.inject_fault) if args.inject_fault else None

    dataset = build_dataset(args)
    sampler = DistributedSampler(
        dataset,
        num_replicas=dist_info.world_size,
        rank=dist_info.rank,
        shuffle=True,
        seed=args.seed,
    )
    data_loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        collate_fn=collate_lists,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
    )

    resumed_from, checkpoint = choose_checkpoint(args, dist_info, metrics)

    model = build_model(
        args.model,
        num_classes=dataset.num_classes,
        min_size=args.min_size,
        max_size=args.max_size,
        backbone_weights=args.backbone_weights,
        trainable_backbone_layers=args.trainable_backbone_layers,
    )
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
    model.to(device)
    model_without_ddp = model
    if dist_info.enabled:
        device_ids = [device.index] if device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=device_ids)

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(
        params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    # As in torchvision's reference, warmup never outlasts the first epoch.
    warmup_iters = min(args.warmup_iters, len(data_loader))
    lr_scheduler = build_lr_scheduler(optimizer, warmup_iters, args.warmup_factor)
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
        lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
        state.epoch = int(checkpoint["epoch"]) + 1
        state.global_step = int(checkpoint["global_step"])
        metrics.emit("resume", path=resumed_from, epoch=state.epoch, step=state.global_step)
    start_epoch = state.epoch

    metrics.emit(
        "run_start",
        model=args.model,
        backend=dist_info.backend,
        device=str(device),
        torch_version=torch.__version__,
        dataset=args.dataset,
        train_images=len(dataset),
        batch_size=args.batch_size,
        epochs=args.epochs,
        start_epoch=start_epoch,
        resumed_from=resumed_from,
        global_step=state.global_step,
    )

    for epoch in range(start_epoch, args.epochs):
        state.epoch = epoch
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        result = train_one_epoch(
            model,
            optimizer,
            lr_scheduler,
            data_loader,
            device,
            state,
            metrics,
            num_classes=dataset.num_classes,
            print_freq=args.print_freq,
            clip_grad_norm=args.clip_grad_norm,
            nonfinite_limit=args.nonfinite_limit,
            rank=dist_info.rank,
            attempt=attempt,
            fault=fault,
        )
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
        if dist_info.is_main:
            path = ckpt.save_checkpoint(
                {
                    "model": model_without_ddp.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "lr_scheduler": lr_scheduler.state_dict(),
                    "epoch": epoch,
                    "global_step": state.global_step,
                    "args": vars(args),
                },
                Path(args.output_dir) / "checkpoints",
                keep=args.keep_checkpoints,
            )
            metrics.emit("checkpoint", epoch=epoch, step=state.global_step, path=str(path))
        state.epoch = epoch + 1

    cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)  # usage errors exit 2 here, before anything starts
    started = time.time()
    state = TrainState()
    try:
        rank, local_rank, world_size = env_ranks()
        metrics = MetricsWriter(args.output_dir, rank, local_rank, world_size)
    except (ConfigError, OSError) as exc:
        print(f"{PROG}: error: --output-dir: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG

    def finish(status: str, **extra) -> None:
        metrics.emit(
            "run_end",
            status=status,
            epochs_completed=state.epoch,
            step=state.global_step,
            seconds=time.time() - started,
            **extra,
        )
        metrics.close()

    try:
        run(args, state, metrics)
    except TrainerError as exc:
        if not isinstance(exc, InjectedFault):  # the fault already printed its line
            print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        finish("error", error=str(exc))
        return exc.exit_code
    except Exception as exc:
        traceback.print_exc()
        finish("error", error=f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    finish("ok")
    return EXIT_OK


def cli() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    cli()

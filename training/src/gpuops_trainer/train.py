"""Train RetinaNet with DistributedDataParallel.

    torchrun --standalone --nproc_per_node=2 -m gpuops_trainer.train --output-dir DIR ...
    python -m gpuops_trainer.train --output-dir DIR ...        # one process

Read ``run`` top to bottom: process group, data, model, optimizer, resume, then the epoch
loop with its checkpoints and evaluations. Exit codes are listed in errors.py and README.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from . import __version__
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
from .data.common import resolve
from .distributed import (
    BACKENDS,
    DEFAULT_COLLECTIVE_TIMEOUT_S,
    DistInfo,
    broadcast_from_main,
    cleanup,
    env_ranks,
    init_distributed,
)
from .engine import LoopOptions, TrainState, train_one_epoch
from .errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, ConfigError, InjectedFault, TrainerError
from .evaluate import evaluate
from .faults import parse_fault
from .limits import memlock_limits
from .lr import SCHEDULES, build_lr_scheduler
from .metrics import MetricsWriter, restart_attempt
from .models import MODELS, build_model
from .progress import ProgressBar
from .shm import processes_on_node, shm_shortfall

PROG = "gpuops-train"
DATASETS = ("synthetic", "coco", "openimages")
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Relative to --data-path (or --val-data-path); each overridable by an option.
DEFAULT_LAYOUT = {
    "coco": {
        "train": ("annotations/instances_train2017.json", "train2017"),
        "val": ("annotations/instances_val2017.json", "val2017"),
    },
    "openimages": {
        "train": ("annotations/oidv6-train-annotations-bbox.csv", "train"),
        "val": ("annotations/validation-annotations-bbox.csv", "validation"),
    },
}
OPENIMAGES_CLASS_FILE = "annotations/class-descriptions-boxable.csv"
OPENIMAGES_SPLITS = {"train": "train", "val": "validation"}  # names in the image list


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
    run.add_argument(
        "--dist-timeout-s",
        type=_int_at_least(1),
        default=DEFAULT_COLLECTIVE_TIMEOUT_S,
        help="how long a collective (or joining the process group) may block before the run "
        "fails instead of hanging (default: %(default)s)",
    )

    data = parser.add_argument_group("data")
    data.add_argument("--dataset", choices=DATASETS, default="synthetic")
    data.add_argument(
        "--data-path", default=None, metavar="DIR", help="dataset root (coco, openimages)"
    )
    data.add_argument(
        "--train-annotations",
        default=None,
        metavar="PATH",
        help="relative to --data-path; default annotations/instances_train2017.json (coco), "
        "annotations/oidv6-train-annotations-bbox.csv (openimages)",
    )
    data.add_argument(
        "--train-images",
        default=None,
        metavar="DIR",
        help="relative to --data-path; default train2017 (coco), train (openimages)",
    )
    data.add_argument("--val-data-path", default=None, metavar="DIR", help="default: --data-path")
    data.add_argument(
        "--val-annotations",
        default=None,
        metavar="PATH",
        help="relative to --val-data-path; default annotations/instances_val2017.json "
        "(coco), annotations/validation-annotations-bbox.csv (openimages)",
    )
    data.add_argument(
        "--val-images",
        default=None,
        metavar="DIR",
        help="relative to --val-data-path; default val2017 (coco), validation (openimages)",
    )
    data.add_argument(
        "--class-descriptions",
        default=OPENIMAGES_CLASS_FILE,
        metavar="PATH",
        help="openimages: LabelName,DisplayName CSV, relative to --data-path",
    )
    data.add_argument(
        "--classes",
        default=None,
        metavar="NAMES",
        help='openimages: comma-separated display names or /m/ ids (e.g. "Cat,Dog"); '
        "default all boxable classes",
    )
    data.add_argument(
        "--image-list",
        default=None,
        metavar="PATH",
        help="openimages: the downloader's split/ImageID lines; default every image present",
    )
    data.add_argument("--synthetic-images", type=_int_at_least(1), default=256)
    data.add_argument("--synthetic-classes", type=_int_at_least(1), default=6)
    data.add_argument(
        "--synthetic-val-images",
        type=_int_at_least(1),
        default=32,
        help="size of the held-out synthetic split used for evaluation",
    )
    data.add_argument(
        "--synthetic-val-seed",
        type=int,
        default=None,
        help="default --seed + 1 (held out); equal to --seed scores the training images",
    )
    data.add_argument(
        "--image-size",
        type=_int_at_least(16),
        default=256,
        help="side of the generated square images, in pixels",
    )
    data.add_argument("--batch-size", type=_int_at_least(1), default=2, help="images per process")
    data.add_argument("--workers", type=_int_at_least(0), default=2, help="DataLoader workers")
    data.add_argument(
        "--persistent-workers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep DataLoader workers between epochs (with --workers > 0)",
    )
    data.add_argument(
        "--aspect-ratio-group-factor",
        type=int,
        default=3,
        metavar="K",
        help="batch images of similar aspect ratio (2K+1 bins, as torchvision's reference); "
        "-1 disables",
    )

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
    model.add_argument(
        "--sync-bn",
        action="store_true",
        help="convert BatchNorm to SyncBatchNorm (CUDA only: torch has no CPU/gloo version)",
    )
    model.add_argument(
        "--channels-last",
        action="store_true",
        help="keep convolution weights (and so activations) in NHWC, which tensor cores read "
        "fastest under --amp on GPUs",
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
        help="linear warmup optimizer steps, capped at one epoch",
    )
    optim.add_argument(
        "--warmup-factor",
        type=_positive_float,
        default=0.001,
        help="lr multiplier at the first warmup step",
    )
    optim.add_argument(
        "--lr-schedule",
        choices=SCHEDULES,
        default="multistep",
        help="after warmup: multistep (--lr-steps, --lr-gamma), cosine to 0, or constant",
    )
    optim.add_argument(
        "--lr-steps",
        type=_int_at_least(1),
        nargs="+",
        default=[16, 22],
        metavar="EPOCH",
        help="multistep milestones, in epochs (torchvision's reference: 16 22 of 26)",
    )
    optim.add_argument("--lr-gamma", type=_positive_float, default=0.1)
    optim.add_argument(
        "--grad-accum-steps",
        type=_int_at_least(1),
        default=1,
        metavar="N",
        help="micro-batches per optimizer step (effective batch = N x batch size x world)",
    )
    optim.add_argument("--amp", action="store_true", help="mixed precision (torch.autocast)")
    optim.add_argument(
        "--amp-dtype",
        choices=tuple(AMP_DTYPES),
        default="bf16",
        help="with --amp: bf16 (CPU and Ampere+ GPUs) or fp16 (with a GradScaler)",
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
        "--checkpoint-every-steps",
        type=_int_at_least(0),
        default=0,
        metavar="N",
        help="also checkpoint every N optimizer steps (0: only at each epoch's end)",
    )
    state.add_argument(
        "--eval-every-epochs",
        type=_int_at_least(0),
        default=0,
        metavar="N",
        help="COCO mAP on the validation split every N epochs (0: only at the end)",
    )
    state.add_argument(
        "--eval-at-end",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="evaluate after the last epoch",
    )
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
    if args.dataset != "synthetic" and not args.data_path:
        parser.error(f"argument --data-path: required with --dataset {args.dataset}")
    if args.dataset != "openimages":
        for option in ("classes", "image_list"):
            if getattr(args, option) is not None:
                name = option.replace("_", "-")
                parser.error(f"argument --{name}: only with --dataset openimages")
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
    root = args.data_path if split == "train" else (args.val_data_path or args.data_path)
    default_annotations, default_images = DEFAULT_LAYOUT[args.dataset][split]
    annotations = resolve(root, getattr(args, f"{split}_annotations") or default_annotations)
    images = resolve(root, getattr(args, f"{split}_images") or default_images)
    if args.dataset == "coco":
        return CocoDataset(annotations, images, train=split == "train")
    return OpenImagesDataset(
        annotations,
        resolve(args.data_path, args.class_descriptions),
        images,
        split=OPENIMAGES_SPLITS[split],
        classes=args.classes,
        image_list=resolve(root, args.image_list) if args.image_list else None,
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
        persistent_workers=args.workers > 0 and args.persistent_workers,
    )
    return sampler, resumable, loader


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

    # Model: built on every rank from the same seed, then wrapped for DDP.
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
    if args.sync_bn and dist_info.enabled:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model.to(device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)
    model_without_ddp = model
    if dist_info.enabled:
        device_ids = [device.index] if device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=device_ids)

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
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
        lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
        if scaler is not None and checkpoint.get("scaler"):
            scaler.load_state_dict(checkpoint["scaler"])
        state.epoch, state.epoch_batches = resume_position(
            checkpoint, args, dist_info, iters_per_epoch
        )
        state.global_step = int(checkpoint["global_step"])
        ckpt.restore_rng_states(checkpoint["rng"])
        metrics.emit(
            "resume",
            path=resumed_from,
            epoch=state.epoch,
            step=state.global_step,
            epoch_batches=state.epoch_batches,
        )
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
    )

    def save_checkpoint() -> None:
        if not dist_info.is_main:
            return
        # The other ranks wait at their next collective meanwhile: this is the run's stall.
        started = time.perf_counter()
        path = ckpt.save_checkpoint(
            {
                "model": model_without_ddp.state_dict(),
                "optimizer": optimizer.state_dict(),
                "lr_scheduler": lr_scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "epoch": state.epoch,
                "epoch_batches": state.epoch_batches,
                "iters_per_epoch": iters_per_epoch,
                "global_step": state.global_step,
                "world_size": dist_info.world_size,
                "rng": ckpt.rng_states(),
                "args": vars(args),
            },
            Path(args.output_dir) / "checkpoints",
            keep=args.keep_checkpoints,
        )
        metrics.emit(
            "checkpoint",
            epoch=state.epoch,
            step=state.global_step,
            epoch_batches=state.epoch_batches,
            path=str(path),
            bytes=path.stat().st_size,
            seconds=time.perf_counter() - started,
        )

    def checkpoint_mid_epoch() -> None:
        every = args.checkpoint_every_steps
        # The epoch's last step is saved by the end-of-epoch checkpoint below.
        if every and state.global_step % every == 0 and state.epoch_batches < iters_per_epoch:
            save_checkpoint()

    def run_evaluation(epoch: int) -> None:
        result = evaluate(
            model_without_ddp,
            val_loader,
            val_dataset,
            device,
            dataset.num_classes,
            amp_dtype,
            dist_info.is_main,
        )
        if result is not None:
            metrics.emit(
                "eval",
                epoch=epoch,
                step=state.global_step,
                map=result.map,
                map_50=result.map_50,
                map_75=result.map_75,
                images=result.images,
                detections=result.detections,
                seconds=result.seconds,
            )

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
    )
    progress = ProgressBar.for_rank(dist_info.rank)
    last_evaluated = None
    for epoch in range(start_epoch, args.epochs):
        state.epoch = epoch
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        batch_sampler.skip = state.epoch_batches  # batches a mid-epoch checkpoint already did
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
            after_optimizer_step=checkpoint_mid_epoch,
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
        save_checkpoint()
        state.epoch, state.epoch_batches = epoch + 1, 0
        if args.eval_every_epochs and (epoch + 1) % args.eval_every_epochs == 0:
            run_evaluation(epoch)
            last_evaluated = epoch

    if args.eval_at_end and last_evaluated != args.epochs - 1:
        run_evaluation(args.epochs - 1)
    cleanup()


def one_line(exc: BaseException) -> str:
    """The message alone: a DataLoader worker re-raises with the worker's traceback."""
    text = str(exc)
    if "Original Traceback" in text:
        last = text.strip().splitlines()[-1]
        prefix = f"{type(exc).__module__}.{type(exc).__name__}: "
        text = last[len(prefix) :] if last.startswith(prefix) else last
    return text


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
        message = one_line(exc)
        if not isinstance(exc, InjectedFault):  # the fault already printed its line
            print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
        finish("error", error=message)
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

"""The trainer's command line: every option, its default and its checks.

``parse_args`` ends the process with exit code 2 and one line naming the option for a usage
error, before anything starts (see errors.py).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import NoReturn

import torch

from . import __version__
from .distributed import BACKENDS, DEFAULT_COLLECTIVE_TIMEOUT_S
from .errors import EXIT_CONFIG, ConfigError
from .faults import parse_fault, parse_leak, parse_slow_rank
from .layout import OPENIMAGES_CLASS_FILE
from .lr import SCHEDULES
from .models import MODELS

PROG = "gpuops-train"
DATASETS = ("synthetic", "coco", "openimages")
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
    state.add_argument(
        "--leak-mib-per-epoch",
        default=None,
        metavar="[RANK@]MIB",
        help="test hook only, never for real runs: keep MIB MiB more of host memory alive as "
        "each epoch starts, on every rank or on rank RANK, to prove leak detection",
    )
    state.add_argument(
        "--slow-rank",
        default=None,
        metavar="RANK@MS",
        help="fault drills only: rank RANK spends MS more milliseconds of compute in every "
        "micro-step (a straggler), on every attempt, to prove straggler detection",
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
    if args.leak_mib_per_epoch is not None:
        try:
            parse_leak(args.leak_mib_per_epoch)
        except ConfigError as exc:
            parser.error(f"argument {exc}")
    if args.slow_rank is not None:
        try:
            parse_slow_rank(args.slow_rank)
        except ConfigError as exc:
            parser.error(f"argument {exc}")
    if args.resume not in ("auto", "never") and not os.path.isfile(args.resume):
        parser.error(
            f"argument --resume: expected auto, never or a checkpoint file, got {args.resume!r}"
        )
    return args

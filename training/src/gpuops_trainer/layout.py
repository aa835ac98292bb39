"""Where each dataset's files lie under its root: the one definition the readers, the stager
and the pre-launch check share.

    python -m gpuops_trainer.layout TRAINER-ARGS...

checks, without loading anything, that every path the trainer would open with the same
arguments is there (the annotations, the image folder, Open Images' class list and image list,
for the train split and, when the run evaluates, the val split). It prints one JSON line
(``{"event": "layout", "expected": [...], "missing": [...]}``) and exits 0, or 3 (a data error)
with a line naming each missing path: a launcher runs it in one short pod before starting every
rank. The definitions need only the standard library (the stager imports them); the command
line parses the trainer's own options (options.py), so it accepts exactly what the trainer
accepts.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

# Relative to --data-path (or --val-data-path): (annotations, image folder) per split, each
# overridable by an option of the trainer.
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
SPLITS = ("train", "val")


@dataclass(frozen=True)
class SplitPaths:
    """The files one split of a file-backed dataset is read from."""

    annotations: Path
    images: Path
    class_descriptions: Path | None = None  # openimages only
    image_list: Path | None = None  # openimages, when given

    def expected(self) -> list[tuple[str, Path, str]]:
        """``(what, path, "file" or "dir")`` for every path the reader opens."""
        found = [
            ("annotation file", self.annotations, "file"),
            ("image folder", self.images, "dir"),
        ]
        if self.class_descriptions is not None:
            found.append(("class descriptions file", self.class_descriptions, "file"))
        if self.image_list is not None:
            found.append(("image list", self.image_list, "file"))
        return found


def resolve(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """``path`` as given if absolute, else under the dataset root."""
    path = Path(path)
    return path if path.is_absolute() else Path(root) / path


def split_paths(
    dataset: str,
    split: str,
    data_path: str | os.PathLike,
    val_data_path: str | os.PathLike | None = None,
    annotations: str | None = None,
    images: str | None = None,
    class_descriptions: str = OPENIMAGES_CLASS_FILE,
    image_list: str | None = None,
) -> SplitPaths:
    """The paths of ``split`` (train or val) of ``dataset`` (coco or openimages): the defaults
    of DEFAULT_LAYOUT unless ``annotations``/``images`` override them, under ``data_path``
    (the val split under ``val_data_path`` when given)."""
    root = data_path if split == "train" else (val_data_path or data_path)
    default_annotations, default_images = DEFAULT_LAYOUT[dataset][split]
    paths = SplitPaths(
        annotations=resolve(root, annotations or default_annotations),
        images=resolve(root, images or default_images),
    )
    if dataset == "openimages":
        paths = SplitPaths(
            annotations=paths.annotations,
            images=paths.images,
            class_descriptions=resolve(data_path, class_descriptions),
            image_list=resolve(root, image_list) if image_list else None,
        )
    return paths


def paths_of_args(args, split: str) -> SplitPaths:
    """``split_paths`` for the trainer's parsed arguments (what build_dataset reads)."""
    return split_paths(
        args.dataset,
        split,
        args.data_path,
        args.val_data_path,
        annotations=getattr(args, f"{split}_annotations"),
        images=getattr(args, f"{split}_images"),
        class_descriptions=args.class_descriptions,
        image_list=args.image_list,
    )


def missing(paths: SplitPaths) -> list[str]:
    """One message per expected path that is absent or of the wrong kind."""
    problems = []
    for what, path, kind in paths.expected():
        present = path.is_file() if kind == "file" else path.is_dir()
        if not present:
            shape = "a file" if kind == "file" else "a directory"
            problems.append(f"{what} not found: {path} (expected {shape})")
    return problems


def evaluated_splits(args) -> tuple[str, ...]:
    """The splits a run with these arguments reads: train, and val when anything evaluates."""
    return ("train", "val") if args.eval_at_end or args.eval_every_epochs > 0 else ("train",)


def check_args(args) -> dict:
    """What :func:`cli` reports for parsed trainer arguments."""
    expected, problems = [], []
    for split in evaluated_splits(args):
        paths = paths_of_args(args, split)
        expected += [f"{split}: {path}" for _what, path, _kind in paths.expected()]
        problems += [f"{split}: {message}" for message in missing(paths)]
    return {"event": "layout", "dataset": args.dataset, "expected": expected, "missing": problems}


def cli(argv: list[str] | None = None) -> int:
    from .errors import EXIT_DATA, EXIT_OK
    from .options import PROG, parse_args

    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dataset == "synthetic":
        report = {"event": "layout", "dataset": "synthetic", "expected": [], "missing": []}
        print(json.dumps(report))
        return EXIT_OK
    report = check_args(args)
    print(json.dumps(report), flush=True)
    for message in report["missing"]:
        print(f"{PROG}: dataset layout: {message}", file=sys.stderr, flush=True)
    return EXIT_DATA if report["missing"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(cli())

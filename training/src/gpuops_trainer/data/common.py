"""Pieces shared by the file-backed datasets: image decoding, box clipping, drop counts."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ..errors import DataError

# How many missing files an error message names before it says "and N more".
NAMED_IN_ERRORS = 3


@dataclass
class Annotation:
    """One image's ground truth in pixels, crowd/group-of boxes included (for evaluation)."""

    width: int
    height: int
    boxes: torch.Tensor  # [N, 4] xyxy
    labels: torch.Tensor  # [N]
    iscrowd: torch.Tensor  # [N], 1 for crowd (COCO) or group-of (Open Images) boxes


@dataclass
class DropCounts:
    """What a dataset left out of training, reported in the ``dataset`` metrics event."""

    boxes: Counter = field(default_factory=Counter)  # reason -> boxes dropped
    clipped_boxes: int = 0  # boxes partly outside the image, clipped and kept
    images_without_boxes: int = 0  # images left out of training: nothing left to learn

    def as_dict(self) -> dict:
        return {
            "dropped_boxes": dict(sorted(self.boxes.items())),
            "clipped_boxes": self.clipped_boxes,
            "images_without_boxes": self.images_without_boxes,
        }


def require_file(path: Path, what: str) -> None:
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")


def require_images(image_dir: Path, file_names: list[str]) -> None:
    """One directory listing instead of a stat per image (COCO train has 118k files)."""
    if not image_dir.is_dir():
        raise DataError(f"image folder not found: {image_dir}")
    present = set(os.listdir(image_dir))
    missing = [name for name in file_names if name not in present]
    if missing:
        named = ", ".join(str(image_dir / name) for name in missing[:NAMED_IN_ERRORS])
        extra = len(missing) - NAMED_IN_ERRORS
        more = f" and {extra} more" if extra > 0 else ""
        raise DataError(f"{len(missing)} image file(s) missing: {named}{more}")


def load_image(path: Path) -> torch.Tensor:
    """``[3, H, W]`` uint8 RGB; a damaged file is a data error naming the file."""
    # PIL rather than torchvision.io, whose decoders are deprecated since torchvision 0.29.
    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
    except (OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"{path}: cannot decode image: {exc}") from None
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1)


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the file header only, without decoding the pixels."""
    try:
        with Image.open(path) as image:
            return image.size
    except OSError as exc:
        raise DataError(f"{path}: cannot read image header: {exc}") from None


def sanitize_boxes(
    boxes: torch.Tensor, width: float, height: float, drops: DropCounts
) -> torch.Tensor:
    """Clip xyxy boxes to the image in place; return the mask of boxes worth keeping.

    Counted in ``drops``: ``degenerate`` (no area as annotated), ``outside_image`` (no area
    left inside the image) and ``clipped_boxes`` (kept, but partly outside before clipping).
    """
    valid = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    original = boxes.clone()
    boxes[:, 0::2] = boxes[:, 0::2].clamp(0, width)
    boxes[:, 1::2] = boxes[:, 1::2].clamp(0, height)
    inside = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    keep = valid & inside
    drops.boxes["degenerate"] += int((~valid).sum())
    drops.boxes["outside_image"] += int((valid & ~inside).sum())
    drops.clipped_boxes += int((keep & (boxes != original).any(dim=1)).sum())
    return keep

"""Datasets and the helpers every dataset shares (collate, target checks, batch sampling).

Every dataset returns ``(image, target)`` with ``image`` a ``[3, H, W]`` tensor (uint8 for
decoded files, float in [0, 1] for synthetic data; the training loop converts uint8 on the
device, so workers ship 4x fewer bytes through shared memory) and ``target`` holding xyxy
pixel ``boxes`` (float32), ``labels`` in ``[0, num_classes)`` and ``image_id`` (the index).
Each also offers ``aspect_ratios()`` for batch grouping and ``annotation(index)`` for
building the COCO-style ground truth used by evaluation.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import DataError
from .coco import CocoDataset
from .openimages import OpenImagesDataset
from .sampling import GroupedBatchSampler, ResumableBatchSampler, aspect_ratio_groups
from .synthetic import SyntheticDetection

__all__ = [
    "CocoDataset",
    "GroupedBatchSampler",
    "OpenImagesDataset",
    "ResumableBatchSampler",
    "SyntheticDetection",
    "aspect_ratio_groups",
    "check_target",
    "collate_lists",
]


def collate_lists(batch: list[tuple[Any, Any]]) -> tuple[tuple[Any, ...], ...]:
    """Detection images differ in size and box count: keep images and targets as lists."""
    return tuple(zip(*batch, strict=True))


def check_target(target: dict[str, torch.Tensor], num_classes: int) -> None:
    """Fail with a data error (exit 3) instead of a deep traceback from inside the model."""
    boxes, labels = target["boxes"], target["labels"]
    image_id = target.get("image_id", "?")
    if boxes.ndim != 2 or boxes.shape[-1] != 4 or boxes.shape[0] != labels.shape[0]:
        raise DataError(f"image {image_id}: boxes must be [N, 4] with N labels")
    if boxes.numel() and not bool(torch.isfinite(boxes).all()):
        raise DataError(f"image {image_id}: non-finite box coordinates")
    if boxes.numel() and bool((boxes[:, 2:] <= boxes[:, :2]).any()):
        raise DataError(f"image {image_id}: degenerate box (x2 <= x1 or y2 <= y1)")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise DataError(f"image {image_id}: label outside [0, {num_classes})")

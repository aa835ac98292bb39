"""Datasets and the helpers every dataset shares (collate, target checks)."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import DataError
from .synthetic import SyntheticDetection

__all__ = ["SyntheticDetection", "check_target", "collate_lists"]


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

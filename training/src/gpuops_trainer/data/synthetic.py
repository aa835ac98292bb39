"""A generated detection dataset that a detector can learn from in a few epochs.

Each image is a noisy grey background with 1-4 filled shapes. The class decides the shape's
colour (evenly spaced hues) and form (even classes are rectangles, odd ones ellipses), so
both appearance cues agree. Everything is derived from ``(seed, index)``: any rank, worker
or restarted attempt sees the same sample for the same index, and nothing is stored.
"""

from __future__ import annotations

import colorsys

import torch
from torch.utils.data import Dataset

from .common import Annotation

MAX_OBJECTS = 4
MIN_OBJECT_FRACTION = 0.15  # smallest side, as a fraction of the image size
MAX_OBJECT_FRACTION = 0.5
MAX_OVERLAP_IOU = 0.3  # keep objects mostly visible so every box has evidence
PLACEMENT_TRIES = 20


def class_colours(num_classes: int) -> torch.Tensor:
    """[K, 3] RGB in [0, 1]: fully saturated hues, evenly spaced."""
    rgb = [colorsys.hsv_to_rgb(k / num_classes, 1.0, 1.0) for k in range(num_classes)]
    return torch.tensor(rgb, dtype=torch.float32)


def _iou(box: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    top_left = torch.maximum(box[:2], others[:, :2])
    bottom_right = torch.minimum(box[2:], others[:, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(dim=1)
    area = (box[2:] - box[:2]).prod()
    other_areas = (others[:, 2:] - others[:, :2]).prod(dim=1)
    return inter / (area + other_areas - inter)


class SyntheticDetection(Dataset):
    """Images ``[3, S, S]`` in [0, 1] and targets with xyxy ``boxes`` and ``labels``.

    Labels are ``0 .. num_classes - 1``. RetinaNet classifies with one sigmoid per class and
    has no background logit, so the model is built with exactly ``num_classes`` outputs.
    """

    def __init__(self, num_images: int, num_classes: int, image_size: int, seed: int = 0):
        if num_images < 1 or num_classes < 1 or image_size < 16:
            raise ValueError("need num_images >= 1, num_classes >= 1 and image_size >= 16")
        self.num_images = num_images
        self.num_classes = num_classes
        self.image_size = image_size
        self.seed = seed
        self.colours = class_colours(num_classes)

    def __len__(self) -> int:
        return self.num_images

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if not 0 <= index < self.num_images:
            raise IndexError(index)
        size = self.image_size
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)

        def uniform(low: float, high: float) -> float:
            return low + (high - low) * float(torch.rand((), generator=generator))

        base = uniform(0.2, 0.6)
        image = (base + 0.08 * torch.randn(3, size, size, generator=generator)).clamp(0, 1)

        count = int(torch.randint(1, MAX_OBJECTS + 1, (), generator=generator))
        boxes: list[torch.Tensor] = []
        labels: list[int] = []
        for _object in range(count):
            box = self._place(boxes, uniform)
            if box is None:
                continue
            label = int(torch.randint(0, self.num_classes, (), generator=generator))
            self._draw(image, box, label)
            boxes.append(box)
            labels.append(label)

        target = {
            "boxes": torch.stack(boxes),
            "labels": torch.tensor(labels, dtype=torch.int64),
            "image_id": torch.tensor(index),
        }
        return image, target

    def aspect_ratios(self) -> list[float]:
        return [1.0] * self.num_images

    def annotation(self, index: int) -> Annotation:
        _image, target = self[index]
        return Annotation(
            width=self.image_size,
            height=self.image_size,
            boxes=target["boxes"],
            labels=target["labels"],
            iscrowd=torch.zeros(len(target["labels"]), dtype=torch.int64),
        )

    def describe(self) -> dict:
        return {"images": self.num_images, "classes": self.num_classes, "seed": self.seed}

    def _place(self, existing: list[torch.Tensor], uniform) -> torch.Tensor | None:
        """A random integer-aligned box that overlaps earlier ones only a little."""
        size = self.image_size
        for _try in range(PLACEMENT_TRIES):
            width = round(uniform(MIN_OBJECT_FRACTION, MAX_OBJECT_FRACTION) * size)
            height = round(uniform(MIN_OBJECT_FRACTION, MAX_OBJECT_FRACTION) * size)
            x1 = round(uniform(0, size - width))
            y1 = round(uniform(0, size - height))
            box = torch.tensor([x1, y1, x1 + width, y1 + height], dtype=torch.float32)
            if not existing or float(_iou(box, torch.stack(existing)).max()) <= MAX_OVERLAP_IOU:
                return box
        # The first object always fits, so every image keeps at least one box.
        return None

    def _draw(self, image: torch.Tensor, box: torch.Tensor, label: int) -> None:
        x1, y1, x2, y2 = (int(v) for v in box.tolist())
        colour = self.colours[label].view(3, 1, 1)
        region = image[:, y1:y2, x1:x2]
        if label % 2 == 0:
            region.copy_(colour.expand_as(region))
            return
        height, width = y2 - y1, x2 - x1
        ys = (torch.arange(height, dtype=torch.float32) + 0.5 - height / 2) / (height / 2)
        xs = (torch.arange(width, dtype=torch.float32) + 0.5 - width / 2) / (width / 2)
        inside = (ys[:, None] ** 2 + xs[None, :] ** 2) <= 1.0
        region[:, inside] = colour.view(3, 1).expand(3, int(inside.sum()))

"""COCO detection: an ``instances_*.json`` file and its image folder.

Built on torchvision's ``CocoDetection`` (pycocotools' index of the JSON). Boxes become xyxy
pixels; crowd boxes, degenerate boxes and boxes of unknown categories are dropped and
counted; boxes partly outside the image are clipped. Category ids map to contiguous labels
0..K-1 in id order, so the model has exactly K outputs (COCO: 80).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import torch
from torchvision.datasets import CocoDetection

from ..errors import DataError
from .common import Annotation, DropCounts, load_image, require_file, require_images, sanitize_boxes


def _load_index(annotation_file: Path, image_dir: Path) -> CocoDetection:
    require_file(annotation_file, "annotation file")
    # pycocotools prints progress to stdout, which carries only metrics records.
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return CocoDetection(str(image_dir), str(annotation_file))
        except json.JSONDecodeError as exc:
            raise DataError(f"{annotation_file}: not valid JSON: {exc}") from None
        except (KeyError, TypeError, AssertionError) as exc:
            raise DataError(
                f"{annotation_file}: not a COCO instances file (needs images, annotations "
                f"and categories): {type(exc).__name__}: {exc}"
            ) from None


class CocoDataset:
    def __init__(self, annotation_file: Path, image_dir: Path, train: bool = True):
        self.annotation_file = Path(annotation_file)
        self.image_dir = Path(image_dir)
        self.coco_detection = _load_index(self.annotation_file, self.image_dir)
        coco = self.coco_detection.coco
        self.category_ids = sorted(coco.cats)
        if not self.category_ids:
            raise DataError(f"{self.annotation_file}: no categories")
        self.label_of = {cat_id: label for label, cat_id in enumerate(self.category_ids)}
        self.class_names = [coco.cats[i].get("name", str(i)) for i in self.category_ids]
        self.num_classes = len(self.category_ids)
        self.drops = DropCounts()

        self.image_ids: list[int] = []
        self.file_names: list[str] = []
        self.sizes: list[tuple[int, int]] = []
        self.targets: list[dict[str, torch.Tensor]] = []
        self.crowd: list[torch.Tensor] = []  # crowd boxes per image, kept for evaluation
        for image_id in sorted(self.coco_detection.ids):
            info = coco.imgs[image_id]
            try:
                width, height = int(info["width"]), int(info["height"])
                file_name = info["file_name"]
            except (KeyError, TypeError, ValueError) as exc:
                raise DataError(
                    f"{self.annotation_file}: image entry {image_id}: {exc!r}"
                ) from None
            boxes, labels, crowd = self._convert(coco.imgToAnns.get(image_id, []), width, height)
            if train and len(boxes) == 0:
                # As torchvision's reference: images with nothing to learn are left out.
                self.drops.images_without_boxes += 1
                continue
            self.image_ids.append(image_id)
            self.file_names.append(file_name)
            self.sizes.append((width, height))
            self.targets.append({"boxes": boxes, "labels": labels})
            self.crowd.append(crowd)
        if not self.image_ids:
            raise DataError(f"{self.annotation_file}: no images with usable boxes")
        require_images(self.image_dir, self.file_names)

    def _convert(self, annotations: list[dict], width: int, height: int):
        boxes, labels, crowd = [], [], []
        for ann in annotations:
            label = self.label_of.get(ann.get("category_id"))
            bbox = ann.get("bbox")
            if label is None:
                self.drops.boxes["unknown_category"] += 1
                continue
            if not isinstance(bbox, list) or len(bbox) != 4:
                self.drops.boxes["malformed"] += 1
                continue
            try:
                x, y, w, h = (float(v) for v in bbox)
            except (TypeError, ValueError):
                self.drops.boxes["malformed"] += 1
                continue
            if ann.get("iscrowd", 0):
                self.drops.boxes["crowd"] += 1
                crowd.append([x, y, x + w, y + h, label])
                continue
            boxes.append([x, y, x + w, y + h])
            labels.append(label)
        boxes_t = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
        labels_t = torch.tensor(labels, dtype=torch.int64)
        keep = sanitize_boxes(boxes_t, width, height, self.drops)
        crowd_t = torch.tensor(crowd, dtype=torch.float32).reshape(-1, 5)
        return boxes_t[keep], labels_t[keep], crowd_t

    def __len__(self) -> int:
        return len(self.image_ids)

    def __getitem__(self, index: int):
        image = load_image(self.image_dir / self.file_names[index])
        width, height = self.sizes[index]
        if image.shape[1:] != (height, width):
            raise DataError(
                f"{self.image_dir / self.file_names[index]}: image is {image.shape[2]}x"
                f"{image.shape[1]}, {self.annotation_file} says {width}x{height}"
            )
        target = dict(self.targets[index])
        target["image_id"] = torch.tensor(index)
        return image, target

    def aspect_ratios(self) -> list[float]:
        return [width / height for width, height in self.sizes]

    def annotation(self, index: int) -> Annotation:
        width, height = self.sizes[index]
        target, crowd = self.targets[index], self.crowd[index]
        return Annotation(
            width=width,
            height=height,
            boxes=torch.cat([target["boxes"], crowd[:, :4]]),
            labels=torch.cat([target["labels"], crowd[:, 4].long()]),
            iscrowd=torch.cat([torch.zeros(len(target["boxes"])), torch.ones(len(crowd))]).long(),
        )

    def describe(self) -> dict:
        return {
            "annotations": str(self.annotation_file),
            "images": len(self),
            "classes": self.num_classes,
            "boxes": sum(len(t["boxes"]) for t in self.targets),
            **self.drops.as_dict(),
        }

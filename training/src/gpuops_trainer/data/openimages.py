"""Open Images V7 boxes: the box annotation CSV, the boxable class list, and image files.

The CSV (``ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,
IsGroupOf,IsDepiction,IsInside``, coordinates normalised to [0, 1]) is several GB for the
train split, so it is streamed row by row into flat arrays: no per-row Python objects.

Images: those named by ``--image-list`` (the official downloader's ``split/ImageID`` lines;
a listed image that is missing is an error), else every ``ImageID.jpg`` present in the image
folder. Classes: all boxable classes (601) or a subset by display name or ``/m/`` id; boxes
of other classes are left out. Group-of boxes are left out of training (one box around many
objects teaches the wrong extent) and kept as crowd regions for evaluation, as COCO does.
"""

from __future__ import annotations

import csv
import os
from array import array
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError, DataError
from .common import (
    Annotation,
    DropCounts,
    image_size,
    load_image,
    require_file,
    require_images,
    sanitize_boxes,
)

BOX_COLUMNS = ("ImageID", "LabelName", "XMin", "XMax", "YMin", "YMax", "IsGroupOf")
IMAGE_SUFFIX = ".jpg"


def read_class_descriptions(path: Path) -> list[tuple[str, str]]:
    """``[(label_id, display_name)]`` in file order; a ``LabelName,DisplayName`` header is
    optional (the V7 file has one, older ones do not)."""
    require_file(path, "class descriptions file")
    classes = []
    with open(path, newline="", encoding="utf-8") as handle:
        for line_number, row in enumerate(csv.reader(handle), start=1):
            if not row or (line_number == 1 and row[0] == "LabelName"):
                continue
            if len(row) < 2:
                raise DataError(f"{path}:{line_number}: expected LabelName,DisplayName")
            classes.append((row[0].strip(), row[1].strip()))
    if not classes:
        raise DataError(f"{path}: no classes")
    return classes


def select_classes(all_classes: list[tuple[str, str]], wanted: str | None) -> list[tuple[str, str]]:
    """All classes, or those named in a comma list (display names, any case, or /m/ ids)."""
    if not wanted:
        return all_classes
    by_key = {}
    for label_id, name in all_classes:
        by_key[label_id] = (label_id, name)
        by_key.setdefault(name.lower(), (label_id, name))
    chosen = []
    for item in (part.strip() for part in wanted.split(",")):
        if not item:
            continue
        match = by_key.get(item) or by_key.get(item.lower())
        if match is None:
            raise ConfigError(f"--classes: unknown class {item!r} (a display name or /m/ id)")
        if match not in chosen:
            chosen.append(match)
    if not chosen:
        raise ConfigError("--classes: no class named")
    return chosen


def read_image_list(path: Path, split: str) -> list[str]:
    """Image ids of ``split`` from the downloader's list (``split/ImageID`` per line)."""
    require_file(path, "image list")
    ids = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            list_split, slash, image_id = line.partition("/")
            if not slash or not image_id:
                raise DataError(f"{path}:{line_number}: expected split/ImageID, got {line!r}")
            if list_split == split:
                ids.append(image_id)
    if not ids:
        raise DataError(f"{path}: no images of split {split!r}")
    return ids


class OpenImagesDataset:
    def __init__(
        self,
        annotation_file: Path,
        class_descriptions: Path,
        image_dir: Path,
        split: str,
        classes: str | None = None,
        image_list: Path | None = None,
        train: bool = True,
    ):
        self.annotation_file = Path(annotation_file)
        self.image_dir = Path(image_dir)
        all_classes = read_class_descriptions(Path(class_descriptions))
        selected = select_classes(all_classes, classes)
        self.class_ids = [label_id for label_id, _name in selected]
        self.class_names = [name for _label_id, name in selected]
        self.num_classes = len(selected)
        self.drops = DropCounts()

        require_file(self.annotation_file, "annotation file")
        if image_list is not None:
            wanted = read_image_list(Path(image_list), split)
            require_images(self.image_dir, [image_id + IMAGE_SUFFIX for image_id in wanted])
        else:
            if not self.image_dir.is_dir():
                raise DataError(f"image folder not found: {self.image_dir}")
            wanted = sorted(
                name[: -len(IMAGE_SUFFIX)]
                for name in os.listdir(self.image_dir)
                if name.endswith(IMAGE_SUFFIX)
            )
            if not wanted:
                raise DataError(f"no {IMAGE_SUFFIX} images in {self.image_dir}")
        unique_ids = dict.fromkeys(wanted)
        image_index = {image_id: position for position, image_id in enumerate(unique_ids)}
        all_ids = list(image_index)

        rows = self._stream(image_index, {label_id for label_id, _name in all_classes})
        self._group(rows, all_ids, train)

    def _stream(self, image_index: dict[str, int], known_labels: set[str]) -> tuple[array, ...]:
        label_of = {label_id: label for label, label_id in enumerate(self.class_ids)}
        images, labels, group_of, coords = array("l"), array("l"), array("b"), array("f")
        path = self.annotation_file
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if not header:
                raise DataError(
                    f"{path}: empty file (expected a CSV header with {', '.join(BOX_COLUMNS)})"
                )
            missing = [name for name in BOX_COLUMNS if name not in header]
            if missing:
                raise DataError(f"{path}: header lacks column(s) {', '.join(missing)}")
            column = {name: header.index(name) for name in BOX_COLUMNS}
            width = len(header)
            for line_number, row in enumerate(reader, start=2):
                if len(row) != width:
                    if not row:
                        continue
                    raise DataError(f"{path}:{line_number}: {len(row)} fields, header has {width}")
                position = image_index.get(row[column["ImageID"]])
                if position is None:
                    continue  # an image not selected
                label_id = row[column["LabelName"]]
                label = label_of.get(label_id)
                if label is None:
                    # Not in the class list at all, or a class outside --classes.
                    reason = "other_class" if label_id in known_labels else "unknown_label"
                    self.drops.boxes[reason] += 1
                    continue
                try:
                    box = [float(row[column[name]]) for name in ("XMin", "YMin", "XMax", "YMax")]
                except ValueError:
                    raise DataError(
                        f"{path}:{line_number}: box coordinates are not numbers: {row!r}"
                    ) from None
                images.append(position)
                labels.append(label)
                group_of.append(1 if row[column["IsGroupOf"]] == "1" else 0)
                coords.extend(box)
        return images, labels, group_of, coords

    def _group(self, rows: tuple[array, ...], all_ids: list[str], train: bool) -> None:
        images, labels, group_of, coords = (np.frombuffer(a, dtype=a.typecode) for a in rows)
        coords = coords.reshape(-1, 4).astype(np.float32)
        if len(images) == 0 and train:
            raise DataError(f"{self.annotation_file}: no boxes for the selected images and classes")
        order = np.argsort(images, kind="stable")
        images, labels = images[order], labels[order]
        group_of, coords = group_of[order], coords[order]
        starts = np.searchsorted(images, np.arange(len(all_ids) + 1))
        self.image_ids: list[str] = []
        self.boxes: list[torch.Tensor] = []  # normalised xyxy, clipped to [0, 1]
        self.labels: list[torch.Tensor] = []
        self.crowd: list[torch.Tensor] = []  # normalised xyxy + label, group-of boxes
        for position, image_id in enumerate(all_ids):
            span = slice(starts[position], starts[position + 1])
            boxes = torch.from_numpy(coords[span].copy())
            image_labels = torch.from_numpy(labels[span].astype(np.int64))
            is_group = torch.from_numpy(group_of[span].astype(bool))
            self.drops.boxes["group_of"] += int(is_group.sum())
            crowd = torch.cat([boxes[is_group], image_labels[is_group, None].float()], dim=1)
            boxes, image_labels = boxes[~is_group], image_labels[~is_group]
            keep = sanitize_boxes(boxes, 1.0, 1.0, self.drops)
            boxes, image_labels = boxes[keep], image_labels[keep]
            if train and len(boxes) == 0:
                self.drops.images_without_boxes += 1
                continue
            self.image_ids.append(image_id)
            self.boxes.append(boxes)
            self.labels.append(image_labels)
            self.crowd.append(crowd)
        if not self.image_ids:
            raise DataError(f"{self.annotation_file}: no images with usable boxes")
        self._sizes: list[tuple[int, int]] | None = None

    def __len__(self) -> int:
        return len(self.image_ids)

    def _path(self, index: int) -> Path:
        return self.image_dir / (self.image_ids[index] + IMAGE_SUFFIX)

    def __getitem__(self, index: int):
        image = load_image(self._path(index))
        height, width = image.shape[1:]
        scale = torch.tensor([width, height, width, height], dtype=torch.float32)
        target = {
            "boxes": self.boxes[index] * scale,
            "labels": self.labels[index],
            "image_id": torch.tensor(index),
        }
        return image, target

    def sizes(self) -> list[tuple[int, int]]:
        """(width, height) per image, read from file headers once (the CSV has no sizes)."""
        if self._sizes is None:
            self._sizes = [image_size(self._path(index)) for index in range(len(self))]
        return self._sizes

    def aspect_ratios(self) -> list[float]:
        return [width / height for width, height in self.sizes()]

    def annotation(self, index: int) -> Annotation:
        width, height = self.sizes()[index]
        scale = torch.tensor([width, height, width, height], dtype=torch.float32)
        boxes, crowd = self.boxes[index], self.crowd[index]
        return Annotation(
            width=width,
            height=height,
            boxes=torch.cat([boxes, crowd[:, :4]]) * scale,
            labels=torch.cat([self.labels[index], crowd[:, 4].long()]),
            iscrowd=torch.cat([torch.zeros(len(boxes)), torch.ones(len(crowd))]).long(),
        )

    def describe(self) -> dict:
        return {
            "annotations": str(self.annotation_file),
            "images": len(self),
            "classes": self.num_classes,
            "boxes": sum(len(b) for b in self.boxes),
            **self.drops.as_dict(),
        }

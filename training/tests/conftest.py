"""Shared helpers. Tests run real code on CPU with one thread per process."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
from pathlib import Path

import pytest
import torch

# Two cores, several processes: more threads only make everything slower.
torch.set_num_threads(1)

PYTHON = sys.executable
REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "ansible_collections.gpuops.training"


def collection_module_utils(name: str):
    """The collection's ``plugins/module_utils/NAME`` from this working tree, imported by its
    ``ansible_collections`` name the way the collection's own tests import it: running their
    tests/conftest.py puts that name on the path. For the end-to-end tests that judge a real
    run with the collection's parsers; those modules import nothing from Ansible or torch."""
    runpy.run_path(str(REPO_ROOT / "tests" / "conftest.py"))
    return importlib.import_module(f"{COLLECTION}.plugins.module_utils.{name}")


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stdout_records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture
def cpu_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env


# Real-format datasets written on the fly: JPEG files (PIL), COCO JSON, Open Images CSVs.

OPENIMAGES_HEADER = (
    "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,"
    "IsOccluded,IsTruncated,IsGroupOf,IsDepiction,IsInside"
)
OPENIMAGES_CLASSES = [("/m/01yrx", "Cat"), ("/m/0bt9lr", "Dog"), ("/m/0k4j", "Car")]
CLASS_COLOURS = [(230, 40, 40), (40, 200, 40), (40, 40, 230)]


def write_jpeg(path: Path, width: int, height: int, boxes, labels, seed: int = 0) -> None:
    """Grey noise with a filled rectangle per box, in its class's colour."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(90, 150, size=(height, width, 3), dtype=np.uint8)
    for (x1, y1, x2, y2), label in zip(boxes, labels, strict=True):
        x1, y1 = max(int(x1), 0), max(int(y1), 0)
        pixels[y1 : int(y2), x1 : int(x2)] = CLASS_COLOURS[label % len(CLASS_COLOURS)]
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=90)


def tiny_layout(count: int, seed: int = 0) -> list[dict]:
    """Image sizes (landscape and portrait, 64-96 px) and 1-2 boxes each, in pixels."""
    import random

    rng = random.Random(seed)
    images = []
    for index in range(count):
        width, height = (96, 64) if index % 2 == 0 else (64, 96)
        boxes, labels = [], []
        for _box in range(1 + index % 2):
            w, h = rng.randint(16, 30), rng.randint(16, 30)
            x, y = rng.randint(0, width - w), rng.randint(0, height - h)
            boxes.append((x, y, x + w, y + h))
            labels.append(rng.randrange(len(OPENIMAGES_CLASSES)))
        images.append({"width": width, "height": height, "boxes": boxes, "labels": labels})
    return images


def write_coco(root: Path, split: str, count: int, seed: int = 0, extra_annotations=()) -> Path:
    """``root/annotations/instances_{split}2017.json`` and ``root/{split}2017/*.jpg``.

    Category ids are 1, 3, 7 (not contiguous, as in real COCO)."""
    category_ids = [1, 3, 7]
    images, annotations = [], []
    for index, layout in enumerate(tiny_layout(count, seed)):
        image_id = 1000 + index
        file_name = f"{image_id:012d}.jpg"
        write_jpeg(
            root / f"{split}2017" / file_name,
            layout["width"],
            layout["height"],
            layout["boxes"],
            layout["labels"],
            seed=seed + index,
        )
        images.append(
            {"id": image_id, "file_name": file_name, "width": layout["width"],
             "height": layout["height"]}
        )  # fmt: skip
        for (x1, y1, x2, y2), label in zip(layout["boxes"], layout["labels"], strict=True):
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id,
                 "category_id": category_ids[label], "bbox": [x1, y1, x2 - x1, y2 - y1],
                 "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}
            )  # fmt: skip
    for extra in extra_annotations:
        annotations.append({"id": len(annotations) + 1, "area": 1.0, "iscrowd": 0, **extra})
    categories = [
        {"id": cat_id, "name": name}
        for cat_id, (_mid, name) in zip(category_ids, OPENIMAGES_CLASSES, strict=True)
    ]
    path = root / "annotations" / f"instances_{split}2017.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories})
    )
    return path


def write_openimages(
    root: Path, split: str, count: int, seed: int = 0, extra_rows=(), prefix: str = ""
) -> tuple[Path, list[str]]:
    """Open Images V7 layout: ``annotations/{oidv6-train|validation}-annotations-bbox.csv``,
    ``annotations/class-descriptions-boxable.csv`` and ``{train|validation}/ID.jpg``."""
    folder = "train" if split == "train" else "validation"
    csv_name = (
        "oidv6-train-annotations-bbox.csv"
        if split == "train"
        else ("validation-annotations-bbox.csv")
    )
    rows, image_ids = [OPENIMAGES_HEADER], []
    for index, layout in enumerate(tiny_layout(count, seed)):
        image_id = f"{prefix}{seed:02x}{index:014x}"
        image_ids.append(image_id)
        width, height = layout["width"], layout["height"]
        write_jpeg(root / folder / f"{image_id}.jpg", width, height, layout["boxes"],
                   layout["labels"], seed=seed + index)  # fmt: skip
        for (x1, y1, x2, y2), label in zip(layout["boxes"], layout["labels"], strict=True):
            mid = OPENIMAGES_CLASSES[label][0]
            rows.append(
                f"{image_id},xclick,{mid},1,{x1 / width:.6f},{x2 / width:.6f},"
                f"{y1 / height:.6f},{y2 / height:.6f},0,0,0,0,0"
            )
    rows.extend(extra_rows)
    annotations = root / "annotations"
    annotations.mkdir(parents=True, exist_ok=True)
    (annotations / csv_name).write_text("\n".join(rows) + "\n")
    classes = annotations / "class-descriptions-boxable.csv"
    classes.write_text("".join(f"{mid},{name}\n" for mid, name in OPENIMAGES_CLASSES))
    return annotations / csv_name, image_ids

"""COCO-style box mAP with pycocotools, for any of the datasets.

Every rank runs inference on its shard of the validation set; the detections are gathered
to rank 0 (``all_gather_object``), which builds the ground truth from the dataset's own
annotations (crowd / group-of boxes as ``iscrowd`` regions, as COCO's evaluation wants) and
runs ``COCOeval``. Image ids are dataset index + 1 and category ids label + 1 throughout.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from .engine import autocast_context, to_model_input


@dataclass
class EvalResult:
    map: float | None  # AP@[.5:.95]; None when there is no ground truth to score
    map_50: float | None
    map_75: float | None
    images: int
    detections: int
    seconds: float


def ground_truth(dataset, indices: list[int], num_classes: int) -> dict:
    """A COCO instances dict for ``indices`` of ``dataset``, boxes in pixels."""
    images, annotations = [], []
    for index in indices:
        annotation = dataset.annotation(index)
        images.append({"id": index + 1, "width": annotation.width, "height": annotation.height})
        boxes = annotation.boxes.tolist()
        for box, label, crowd in zip(
            boxes, annotation.labels.tolist(), annotation.iscrowd.tolist(), strict=True
        ):
            width, height = box[2] - box[0], box[3] - box[1]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": index + 1,
                    "category_id": label + 1,
                    "bbox": [box[0], box[1], width, height],
                    "area": width * height,
                    "iscrowd": int(crowd),
                }
            )
    categories = [{"id": label + 1, "name": str(label)} for label in range(num_classes)]
    return {"images": images, "annotations": annotations, "categories": categories}


@torch.no_grad()
def predict(model, data_loader, device, amp_dtype) -> list[list[float]]:
    """Rows ``[image_id, x, y, w, h, score, category_id]`` for this rank's images."""
    was_training = model.training
    model.eval()
    rows: list[list[float]] = []
    for images, targets in data_loader:
        images = [to_model_input(image, device) for image in images]
        with autocast_context(device, amp_dtype):
            outputs = model(images)
        for target, output in zip(targets, outputs, strict=True):
            boxes = output["boxes"].float().cpu()
            boxes[:, 2:] -= boxes[:, :2]
            scores = output["scores"].float().cpu().tolist()
            labels = output["labels"].cpu().tolist()
            image_id = int(target["image_id"]) + 1
            for box, score, label in zip(boxes.tolist(), scores, labels, strict=True):
                rows.append([image_id, *box, score, label + 1])
            if not boxes.numel():
                rows.append([image_id])  # marks the image as seen, with no detections
    model.train(was_training)
    return rows


def evaluate(model, data_loader, dataset, device, num_classes, amp_dtype, is_main):
    """Run on every rank; rank 0 gets an ``EvalResult``, the others None."""
    started = time.perf_counter()
    rows = predict(model, data_loader, device, amp_dtype)
    if dist.is_available() and dist.is_initialized():
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, rows)
    else:
        gathered = [rows]
    if not is_main:
        return None
    # DistributedSampler pads the shards with repeats: keep each image's first report.
    owner: dict[int, int] = {}
    detections = []
    for rank, rank_rows in enumerate(gathered):
        for row in rank_rows:
            image_id = int(row[0])
            if owner.setdefault(image_id, rank) == rank and len(row) == 7:
                detections.append(row)
    image_ids = sorted(owner)
    scores = _coco_scores(
        ground_truth(dataset, [i - 1 for i in image_ids], num_classes), detections, image_ids
    )
    return EvalResult(
        *scores,
        images=len(image_ids),
        detections=len(detections),
        seconds=time.perf_counter() - started,
    )


def _coco_scores(gt: dict, detections: list[list[float]], image_ids: list[int]):
    if not gt["annotations"]:
        return None, None, None
    if not detections:
        return 0.0, 0.0, 0.0
    # pycocotools prints progress to stdout, which carries only metrics records; its
    # summary table goes to stderr for people reading the log.
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(np.asarray(detections, dtype=np.float64))
        evaluator = COCOeval(coco_gt, coco_dt, "bbox")
        evaluator.params.imgIds = image_ids
        evaluator.evaluate()
        evaluator.accumulate()
    with contextlib.redirect_stdout(sys.stderr):
        evaluator.summarize()
    stats = [float(value) for value in evaluator.stats[:3]]
    return tuple(value if value >= 0 else None for value in stats)

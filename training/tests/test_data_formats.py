"""COCO and Open Images inputs of the real formats, written on the fly (nothing mocked)."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from conftest import (
    OPENIMAGES_HEADER,
    PYTHON,
    read_records,
    write_coco,
    write_jpeg,
    write_openimages,
)

from gpuops_trainer.data import CocoDataset, OpenImagesDataset, check_target
from gpuops_trainer.errors import ConfigError, DataError
from gpuops_trainer.train import main

TINY_RUN = [
    "--model", "retinanet_resnet18_fpn", "--min-size", "64", "--max-size", "96",
    "--batch-size", "2", "--workers", "0", "--threads", "1", "--print-freq", "1",
    "--epochs", "1", "--warmup-iters", "2",
]  # fmt: skip


def _coco(tmp_path, **kwargs) -> CocoDataset:
    root = tmp_path / "coco"
    annotations = write_coco(root, "train", 4, **kwargs)
    return CocoDataset(annotations, root / "train2017")


def test_coco_boxes_become_xyxy_with_contiguous_labels(tmp_path):
    dataset = _coco(tmp_path)
    raw = json.loads((tmp_path / "coco/annotations/instances_train2017.json").read_text())
    assert dataset.num_classes == 3 and dataset.class_names == ["Cat", "Dog", "Car"]
    image, target = dataset[0]
    assert image.dtype == torch.uint8 and image.shape == (3, 64, 96)
    first = raw["annotations"][0]
    x, y, w, h = first["bbox"]
    assert target["boxes"][0].tolist() == [x, y, x + w, y + h]
    assert target["labels"][0] == [1, 3, 7].index(first["category_id"])
    assert int(target["image_id"]) == 0
    check_target(target, dataset.num_classes)
    assert dataset.aspect_ratios()[:2] == [1.5, 64 / 96]


def test_coco_drops_and_counts_crowd_degenerate_unknown_and_clips_outside(tmp_path):
    extra = [
        {"image_id": 1000, "category_id": 1, "bbox": [2, 2, 20, 20], "iscrowd": 1},
        {"image_id": 1000, "category_id": 3, "bbox": [5, 5, 0, 10]},  # zero width
        {"image_id": 1000, "category_id": 99, "bbox": [5, 5, 10, 10]},  # unknown category
        {"image_id": 1000, "category_id": 7, "bbox": [90, 50, 40, 40]},  # partly outside
        {"image_id": 1000, "category_id": 7, "bbox": [200, 200, 10, 10]},  # fully outside
        {"image_id": 1001, "category_id": 7, "bbox": ["a", 0, 1, 1]},  # malformed
    ]
    dataset = _coco(tmp_path, extra_annotations=extra)
    facts = dataset.describe()
    assert facts["dropped_boxes"] == {
        "crowd": 1, "degenerate": 1, "unknown_category": 1, "outside_image": 1, "malformed": 1
    }  # fmt: skip
    assert facts["clipped_boxes"] == 1
    _image, target = dataset[0]
    assert [90.0, 50.0, 96.0, 64.0] in target["boxes"].tolist()  # clipped to 96x64
    annotation = dataset.annotation(0)
    assert int(annotation.iscrowd.sum()) == 1  # the crowd box stays for evaluation


def test_coco_images_without_boxes_are_left_out_of_training_only(tmp_path):
    root = tmp_path / "coco"
    path = write_coco(root, "train", 3)
    data = json.loads(path.read_text())
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] != 1001]
    path.write_text(json.dumps(data))
    assert len(CocoDataset(path, root / "train2017", train=True)) == 2
    assert CocoDataset(path, root / "train2017", train=True).drops.images_without_boxes == 1
    assert len(CocoDataset(path, root / "train2017", train=False)) == 3


def test_coco_bad_inputs_are_data_errors_naming_the_file(tmp_path):
    root = tmp_path / "coco"
    path = write_coco(root, "train", 2)
    with pytest.raises(DataError, match="annotation file not found: .*missing.json"):
        CocoDataset(root / "missing.json", root / "train2017")
    (root / "train2017" / "000000001001.jpg").unlink()
    with pytest.raises(DataError, match=r"1 image file\(s\) missing: .*000000001001.jpg"):
        CocoDataset(path, root / "train2017")
    path.write_text("{not json")
    with pytest.raises(DataError, match="instances_train2017.json: not valid JSON"):
        CocoDataset(path, root / "train2017")


def test_openimages_streams_the_csv_with_classes_and_image_list(tmp_path):
    root = tmp_path / "oi"
    other = "/m/0aaaa"
    extra = [
        f"{'00' + '0' * 14},xclick,/m/0nope,1,0.1,0.5,0.1,0.5,0,0,0,0,0",  # unknown label
        f"{'00' + '0' * 14},xclick,/m/01yrx,1,0.1,0.5,0.1,0.5,0,0,1,0,0",  # group of
        f"{'00' + '0' * 14},xclick,/m/01yrx,1,0.8,1.3,0.2,0.4,0,0,0,0,0",  # partly outside
        f"{'00' + '0' * 14},xclick,/m/0bt9lr,1,0.5,0.5,0.2,0.4,0,0,0,0,0",  # degenerate
        f"notlisted0000000,xclick,{other},1,0.1,0.5,0.1,0.5,0,0,0,0,0",  # image not present
    ]
    csv_path, ids = write_openimages(root, "train", 4, extra_rows=extra)
    descriptions = root / "annotations" / "class-descriptions-boxable.csv"
    dataset = OpenImagesDataset(csv_path, descriptions, root / "train", split="train")
    assert (len(dataset), dataset.num_classes) == (4, 3)
    facts = dataset.describe()
    assert facts["dropped_boxes"]["unknown_label"] == 1
    assert facts["dropped_boxes"]["group_of"] == 1
    assert facts["dropped_boxes"]["degenerate"] == 1
    assert facts["clipped_boxes"] == 1
    image, target = dataset[0]
    assert image.shape == (3, 64, 96)
    boxes = target["boxes"]
    assert float(boxes[:, 2].max()) <= 96.0 and float(boxes.min()) >= 0
    check_target(target, dataset.num_classes)

    # A class subset by display name and by /m/ id; the downloader's image list.
    image_list = tmp_path / "images.txt"
    image_list.write_text(f"train/{ids[1]}\nvalidation/{ids[2]}\n\ntrain/{ids[3]}\n")
    subset = OpenImagesDataset(
        csv_path, descriptions, root / "train", split="train",
        classes="dog, /m/01yrx", image_list=image_list, train=False,
    )  # fmt: skip
    assert subset.class_names == ["Dog", "Cat"]
    assert subset.image_ids == [ids[1], ids[3]]
    assert subset.describe()["dropped_boxes"]["other_class"] >= 0


def test_openimages_bad_inputs(tmp_path):
    root = tmp_path / "oi"
    csv_path, ids = write_openimages(root, "train", 2)
    descriptions = root / "annotations" / "class-descriptions-boxable.csv"

    def build(**kwargs):
        return OpenImagesDataset(
            kwargs.pop("csv", csv_path), descriptions, root / "train", split="train", **kwargs
        )

    with pytest.raises(ConfigError, match="--classes: unknown class 'Dgo'"):
        build(classes="Dgo")
    listed = tmp_path / "list.txt"
    listed.write_text(f"train/{ids[0]}\ntrain/deadbeefdeadbeef\n")
    with pytest.raises(DataError, match="missing: .*deadbeefdeadbeef.jpg"):
        build(image_list=listed)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.csv: empty file"):
        build(csv=empty)
    header_only = tmp_path / "header.csv"
    header_only.write_text(OPENIMAGES_HEADER + "\n")
    with pytest.raises(DataError, match="header.csv: no boxes"):
        build(csv=header_only)
    bad_number = tmp_path / "bad.csv"
    bad_number.write_text(f"{OPENIMAGES_HEADER}\n{ids[0]},x,/m/01yrx,1,0.1,abc,0.1,0.5,0,0,0,0,0\n")
    with pytest.raises(DataError, match="bad.csv:2: box coordinates are not numbers"):
        build(csv=bad_number)
    with pytest.raises(DataError, match="annotation file not found"):
        build(csv=tmp_path / "absent.csv")


@pytest.mark.slow
def test_openimages_trains_an_epoch(tmp_path):
    root = tmp_path / "oi"
    write_openimages(root, "train", 6)
    write_openimages(root, "validation", 2, seed=5)
    out = tmp_path / "run"
    argv = ["--output-dir", str(out), "--dataset", "openimages", "--data-path", str(root),
            "--classes", "Cat,Dog,Car", *TINY_RUN]  # fmt: skip
    assert main(argv) == 0
    records = read_records(out / "metrics" / "rank0.jsonl")
    train_facts, val_facts = (r for r in records if r["event"] == "dataset")
    assert (train_facts["split"], train_facts["images"], train_facts["classes"]) == ("train", 6, 3)
    assert val_facts["split"] == "val" and val_facts["images"] == 2
    (start,) = (r for r in records if r["event"] == "run_start")
    assert start["num_classes"] == 3 and start["dataset"] == "openimages"
    steps = [r for r in records if r["event"] == "step"]
    assert steps and steps[-1]["step"] == start["steps_per_epoch"]
    (evaluation,) = (r for r in records if r["event"] == "eval")
    assert evaluation["images"] == 2
    assert records[-1]["event"] == "run_end" and records[-1]["status"] == "ok"


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("missing_annotations", "annotation file not found: "),
        ("missing_image", "image file(s) missing: "),
        ("unknown_label_only", "no images with usable boxes"),
        ("boxes_outside", "no images with usable boxes"),
    ],
)
def test_bad_coco_exits_3_with_one_line(tmp_path, capsys, breakage, message):
    root = tmp_path / "coco"
    path = write_coco(root, "train", 2)
    data = json.loads(path.read_text())
    if breakage == "missing_annotations":
        path.unlink()
    elif breakage == "missing_image":
        (root / "train2017" / data["images"][1]["file_name"]).unlink()
    elif breakage == "unknown_label_only":
        for annotation in data["annotations"]:
            annotation["category_id"] = 42
        path.write_text(json.dumps(data))
    else:
        for annotation in data["annotations"]:
            annotation["bbox"] = [500, 500, 10, 10]
        path.write_text(json.dumps(data))
    argv = ["--output-dir", str(tmp_path / "run"), "--dataset", "coco", "--data-path",
            str(root), "--no-eval-at-end", *TINY_RUN]  # fmt: skip
    assert main(argv) == 3
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gpuops-train: error")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err


@pytest.mark.slow
def test_damaged_image_in_a_loader_worker_is_one_line_exit_3(tmp_path, cpu_env):
    root = tmp_path / "coco"
    path = write_coco(root, "train", 2)
    broken = root / "train2017" / json.loads(path.read_text())["images"][0]["file_name"]
    broken.write_bytes(b"\xff\xd8\xff not really a jpeg")
    result = subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.train", "--output-dir", str(tmp_path / "run"),
         "--dataset", "coco", "--data-path", str(root), "--no-eval-at-end",
         *TINY_RUN, "--workers", "1"],  # the last --workers wins
        capture_output=True, text=True, env=cpu_env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(f"gpuops-train: error: {broken}: cannot decode image: ")
    assert "Traceback" not in result.stderr


def test_write_jpeg_round_trip(tmp_path):
    write_jpeg(tmp_path / "a.jpg", 40, 30, [(0, 0, 10, 10)], [0])
    from gpuops_trainer.data.common import image_size, load_image

    assert image_size(tmp_path / "a.jpg") == (40, 30)
    assert load_image(tmp_path / "a.jpg").shape == (3, 30, 40)

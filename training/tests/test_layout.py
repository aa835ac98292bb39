"""The layout check (python -m gpuops_trainer.layout): the paths the trainer's readers open,
from the same arguments, named when missing."""

from __future__ import annotations

import json
import subprocess

from conftest import PYTHON, write_coco, write_openimages

from gpuops_trainer.layout import check_args, paths_of_args
from gpuops_trainer.options import parse_args
from gpuops_trainer.train import build_dataset


def layout(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.layout", "--output-dir", "/nonexistent", *argv],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_missing_split_is_named_with_its_path_and_exit_3(tmp_path):
    write_coco(tmp_path, "train", 2)
    result = layout("--dataset", "coco", "--data-path", str(tmp_path))
    assert result.returncode == 3, result
    report = json.loads(result.stdout)
    assert report["missing"] == [
        f"val: annotation file not found: {tmp_path}/annotations/instances_val2017.json "
        "(expected a file)",
        f"val: image folder not found: {tmp_path}/val2017 (expected a directory)",
    ]
    assert f"dataset layout: val: image folder not found: {tmp_path}/val2017" in result.stderr
    # Without evaluation the val split is not needed.
    assert (
        layout("--dataset", "coco", "--data-path", str(tmp_path), "--no-eval-at-end").returncode
        == 0
    )


def test_a_complete_dataset_passes_and_lists_what_it_checked(tmp_path):
    write_openimages(tmp_path, "train", 2)
    write_openimages(tmp_path, "val", 2)
    result = layout("--dataset", "openimages", "--data-path", str(tmp_path))
    assert result.returncode == 0, result
    expected = json.loads(result.stdout)["expected"]
    assert f"train: {tmp_path}/annotations/class-descriptions-boxable.csv" in expected
    assert f"val: {tmp_path}/validation" in expected


def test_synthetic_data_needs_no_files():
    result = layout("--dataset", "synthetic")
    assert result.returncode == 0 and json.loads(result.stdout)["expected"] == []


def test_the_check_and_the_reader_use_the_same_paths_overrides_included(tmp_path):
    write_coco(tmp_path / "elsewhere", "val", 2)
    args = parse_args(
        ["--output-dir", str(tmp_path / "out"), "--dataset", "coco", "--data-path", str(tmp_path),
         "--train-annotations", "elsewhere/annotations/instances_val2017.json",
         "--train-images", str(tmp_path / "elsewhere" / "val2017"), "--no-eval-at-end"]
    )  # fmt: skip
    paths = paths_of_args(args, "train")
    dataset = build_dataset(args, "train")
    assert (dataset.annotation_file, dataset.image_dir) == (paths.annotations, paths.images)
    assert check_args(args)["missing"] == []

"""Accumulation, AMP, SyncBN, the /dev/shm warning and evaluation, in-process on CPU."""

from __future__ import annotations

import io

import pytest
import torch
from conftest import read_records

from gpuops_trainer import shm
from gpuops_trainer.data import SyntheticDetection
from gpuops_trainer.evaluate import _coco_scores, ground_truth
from gpuops_trainer.progress import ProgressBar
from gpuops_trainer.train import main

TINY = [
    "--model", "retinanet_resnet18_fpn", "--image-size", "48", "--min-size", "48",
    "--max-size", "48", "--workers", "0", "--threads", "1", "--print-freq", "1",
    "--no-eval-at-end",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def _events(output_dir, event):
    return [r for r in read_records(output_dir / "metrics" / "rank0.jsonl") if r["event"] == event]


def test_grad_accumulation_counts_optimizer_steps(tmp_path):
    # 6 micro-batches per epoch, 4 per optimizer step: steps of 4 and then 2 micro-batches,
    # so 2 optimizer steps per epoch (ceil), 4 after two epochs.
    out = tmp_path / "run"
    argv = ["--output-dir", str(out), *TINY, "--synthetic-images", "6", "--batch-size", "1",
            "--grad-accum-steps", "4", "--epochs", "2", "--warmup-iters", "0"]  # fmt: skip
    assert main(argv) == 0
    (start,) = _events(out, "run_start")
    assert (start["iters_per_epoch"], start["steps_per_epoch"]) == (6, 2)
    steps = _events(out, "step")
    assert [(s["epoch"], s["iter"], s["step"]) for s in steps] == [
        (0, 3, 1), (0, 5, 2), (1, 3, 3), (1, 5, 4)
    ]  # fmt: skip
    assert _events(out, "run_end")[0]["step"] == 4
    assert [c["step"] for c in _events(out, "checkpoint")] == [2, 4]


def test_amp_bf16_on_cpu_trains_and_shm_warning_names_the_fix(tmp_path, monkeypatch, capsys):
    # An absurd per-worker need makes any /dev/shm "too small", to see the warning path.
    monkeypatch.setattr(shm, "BYTES_PER_WORKER", 1 << 60)
    out = tmp_path / "run"
    # 128 px, not 48: at 48 px P6 is 1x1 and torch 2.15's CPU bf16 conv backward then
    # intermittently gives NaN weight gradients for P7 (see README); the guard skips those.
    argv = ["--output-dir", str(out), *TINY, "--synthetic-images", "2", "--batch-size", "2",
            "--epochs", "1", "--amp", "--amp-dtype", "bf16", "--workers", "1",
            "--image-size", "128", "--min-size", "128", "--max-size", "128"]  # fmt: skip
    assert main(argv) == 0
    (start,) = _events(out, "run_start")
    assert start["amp"] == "bf16"
    (step,) = _events(out, "step")
    assert step["loss"] is not None and step["loss"] > 0
    (saved,) = _events(out, "checkpoint")
    state = torch.load(saved["path"], weights_only=True)
    assert state["optimizer"]["state"]  # momentum buffers exist: the optimizer stepped
    (warning,) = _events(out, "warning")
    assert warning["code"] == "shm_too_small" and warning["workers"] == 1
    err = capsys.readouterr().err
    assert "mount a memory-backed emptyDir at /dev/shm" in err and "--workers" in err


def test_shm_check_passes_with_enough_room(tmp_path):
    assert shm.shm_shortfall(0, 8) is None
    short = shm.shm_shortfall(4, 2, shm_path=str(tmp_path / "absent"))
    assert short["shm_bytes"] == 0 and short["wanted_bytes"] == 8 * shm.BYTES_PER_WORKER
    assert shm.FIX in short["message"]


def test_sync_bn_without_cuda_is_a_usage_error(tmp_path, capsys):
    argv = ["--output-dir", str(tmp_path), *TINY, "--synthetic-images", "2", "--sync-bn"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuops-train: error: --sync-bn") and "CUDA" in err


def test_coco_scores_perfect_and_empty_detections():
    dataset = SyntheticDetection(3, num_classes=2, image_size=32, seed=0)
    gt = ground_truth(dataset, [0, 1, 2], num_classes=2)
    perfect = [[a["image_id"], *a["bbox"], 0.9, a["category_id"]] for a in gt["annotations"]]
    assert _coco_scores(gt, perfect, [1, 2, 3]) == pytest.approx((1.0, 1.0, 1.0))
    assert _coco_scores(gt, [], [1, 2, 3]) == (0.0, 0.0, 0.0)


def test_progress_bar_only_on_a_terminal():
    assert ProgressBar.for_rank(0, io.StringIO()) is None

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = ProgressBar.for_rank(0, stream)
    assert ProgressBar.for_rank(1, stream) is None
    progress.update(0, 4, 4, 1.25)
    progress.end_line()
    assert stream.getvalue().startswith("\repoch 0 [") and "4/4 loss 1.2500" in stream.getvalue()


def test_eval_runs_and_reports_every_key(tmp_path):
    out = tmp_path / "run"
    argv = ["--output-dir", str(out), *TINY, "--synthetic-images", "2", "--batch-size", "2",
            "--epochs", "1", "--eval-at-end", "--synthetic-val-images", "3"]  # fmt: skip
    assert main(argv) == 0
    (evaluation,) = _events(out, "eval")
    assert {"epoch", "step", "map", "map_50", "map_75", "images"} <= set(evaluation)
    assert (evaluation["epoch"], evaluation["step"], evaluation["images"]) == (0, 1, 3)
    assert torch.tensor(evaluation["map"] or 0.0) >= 0


@pytest.mark.slow
def test_amp_fp16_uses_a_grad_scaler_whose_state_is_checkpointed_and_resumed(tmp_path):
    # fp16 autocast and GradScaler run on CPU too, so the scaler's path is exercised here:
    # its state goes into every checkpoint and comes back on resume. fp16 on CPU is emulated
    # and slow (a step at 128 px cost about a minute of CPU): the tiny images do.
    out = tmp_path / "run"
    argv = ["--output-dir", str(out), *TINY, "--synthetic-images", "2", "--batch-size", "2",
            "--amp", "--amp-dtype", "fp16"]  # fmt: skip
    assert main([*argv, "--epochs", "1"]) == 0
    (start,) = _events(out, "run_start")
    assert start["amp"] == "fp16"
    steps = _events(out, "step")
    assert len(steps) == 1 and steps[0]["loss"] is not None and steps[0]["loss"] > 0
    (saved,) = _events(out, "checkpoint")
    scaler_state = torch.load(saved["path"], weights_only=True)["scaler"]
    assert scaler_state["scale"] > 0 and scaler_state["_growth_tracker"] >= 0

    assert main([*argv, "--epochs", "2"]) == 0
    resumed = _events(out, "resume")
    assert resumed and resumed[-1]["epoch"] == 1
    assert _events(out, "run_end")[-1]["step"] == 2

"""Real multi-process training: torchrun, 2 CPU processes, gloo, one thread each.

The main run happens once per module (``trained`` fixture); the other tests read its output
or copy it, so the whole file costs about three short torchrun launches.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PYTHON, read_records, stdout_records

from gpuops_trainer import checkpoint as ckpt
from gpuops_trainer.models import build_model

pytestmark = pytest.mark.distributed

WORLD_SIZE = 2
EPOCHS = 6
IMAGES = 32  # 8 optimizer steps per epoch with 2 processes x 2 images
COMMON = [
    "--model", "retinanet_resnet18_fpn", "--dist-backend", "gloo", "--threads", "1",
    "--image-size", "128", "--min-size", "128", "--max-size", "128",
    "--synthetic-classes", "6", "--batch-size", "2", "--workers", "0", "--print-freq", "1",
    "--keep-checkpoints", "3",
]  # fmt: skip


@dataclass
class Run:
    output_dir: Path
    result: subprocess.CompletedProcess

    def records(self, rank: int) -> list[dict]:
        return read_records(self.output_dir / "metrics" / f"rank{rank}.jsonl")

    def events(self, rank: int, event: str) -> list[dict]:
        return [r for r in self.records(rank) if r["event"] == event]


def torchrun(output_dir: Path, *extra: str, env: dict, torchrun_args=()) -> Run:
    command = [
        PYTHON, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={WORLD_SIZE}", *torchrun_args,
        "-m", "gpuops_trainer.train", "--output-dir", str(output_dir), *COMMON, *extra,
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=600, check=False
    )
    return Run(output_dir, result)


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    # Without this, workers restarted by torchrun share the rendezvous store with the failed
    # attempt and gloo's init can pick up its stale keys and hang (seen here with torch 2.15;
    # pytorch/pytorch#135712). Launchers must set it too: see README.md.
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return env


@pytest.fixture(scope="module")
def trained(tmp_path_factory, env) -> Run:
    output_dir = tmp_path_factory.mktemp("ddp") / "run"
    run = torchrun(output_dir, "--epochs", str(EPOCHS), "--synthetic-images", str(IMAGES), env=env)
    assert run.result.returncode == 0, run.result.stderr[-4000:]
    return run


def test_every_rank_reports_start_steps_epochs_and_end(trained):
    for rank in range(WORLD_SIZE):
        records = trained.records(rank)
        assert all(r["schema"] == "gpuops.metrics/v1" for r in records)
        assert {r["rank"] for r in records} == {rank}
        assert all(r["world_size"] == WORLD_SIZE and r["attempt"] == 0 for r in records)
        (start,) = trained.events(rank, "run_start")
        assert (start["backend"], start["device"], start["start_epoch"]) == ("gloo", "cpu", 0)
        assert start["train_images"] == IMAGES and start["resumed_from"] is None
        steps = trained.events(rank, "step")
        assert [(s["epoch"], s["iter"]) for s in steps] == [
            (e, i) for e in range(EPOCHS) for i in range(8)
        ]
        assert [s["step"] for s in steps] == list(range(1, 8 * EPOCHS + 1))
        assert all(s["iters_per_epoch"] == 8 and s["images_per_s"] > 0 for s in steps)
        assert set(steps[0]["losses"]) == {"classification", "bbox_regression"}
        assert steps[0]["lr"] < steps[-1]["lr"]  # warmup
        epochs = trained.events(rank, "epoch")
        assert [e["epoch"] for e in epochs] == list(range(EPOCHS))
        (end,) = trained.events(rank, "run_end")
        assert (end["status"], end["epochs_completed"], end["step"]) == ("ok", EPOCHS, 8 * EPOCHS)
    # Only rank 0 writes checkpoints.
    assert len(trained.events(0, "checkpoint")) == EPOCHS
    assert trained.events(1, "checkpoint") == []
    # stdout carries the same records, one JSON object per line.
    lines = trained.result.stdout.splitlines()
    assert lines and all(line.startswith("{") for line in lines)
    assert len(stdout_records(trained.result.stdout)) == sum(
        len(trained.records(rank)) for rank in range(WORLD_SIZE)
    )


def test_loss_falls(trained):
    # Median over both ranks' steps: from-scratch RetinaNet has single-step loss spikes
    # that would dominate an epoch mean of 16 values.
    def median_loss(epoch: int) -> float:
        return statistics.median(
            r["loss"] for rank in range(WORLD_SIZE) for r in trained.events(rank, "step")
            if r["epoch"] == epoch
        )  # fmt: skip

    first, last = median_loss(0), median_loss(EPOCHS - 1)
    print(f"median step loss: first epoch {first:.3f}, last epoch {last:.3f}")
    assert last < 0.92 * first
    for rank in range(WORLD_SIZE):
        assert all(math.isfinite(r["loss"]) for r in trained.events(rank, "epoch"))


def test_checkpoints_are_kept_and_loadable(trained):
    paths = ckpt.list_checkpoints(trained.output_dir / "checkpoints")
    assert [p.name for p in paths] == [ckpt.checkpoint_name(e) for e in (5, 4, 3)]
    state = ckpt.load_checkpoint(paths[0])
    assert (state["epoch"], state["global_step"]) == (EPOCHS - 1, 8 * EPOCHS)
    assert state["args"]["model"] == "retinanet_resnet18_fpn"
    model = build_model("retinanet_resnet18_fpn", 6, 128, 128)
    model.load_state_dict(state["model"])  # unwrapped: no "module." prefix
    assert state["optimizer"]["state"]  # momentum buffers were saved


def test_second_run_skips_a_corrupt_checkpoint_and_resumes(trained, env, tmp_path):
    output_dir = tmp_path / "run"
    shutil.copytree(trained.output_dir, output_dir)
    newest = output_dir / "checkpoints" / ckpt.checkpoint_name(EPOCHS - 1)
    newest.write_bytes(newest.read_bytes()[:1000])  # as if the disk filled up mid-write

    run = torchrun(output_dir, "--epochs", str(EPOCHS), "--synthetic-images", str(IMAGES), env=env)
    assert run.result.returncode == 0, run.result.stderr[-4000:]
    assert "skipping checkpoint" in run.result.stderr
    (skipped,) = run.events(0, "checkpoint_skipped")
    assert skipped["path"] == str(newest)
    for rank in range(WORLD_SIZE):
        start = run.events(rank, "run_start")[-1]
        assert start["start_epoch"] == EPOCHS - 1 > 0
        resumed_from = str(output_dir / "checkpoints" / ckpt.checkpoint_name(EPOCHS - 2))
        assert start["resumed_from"] == resumed_from
        assert start["global_step"] == 8 * (EPOCHS - 1)
        resume = run.events(rank, "resume")[-1]
        assert (resume["epoch"], resume["step"]) == (EPOCHS - 1, 8 * (EPOCHS - 1))
        assert run.events(rank, "epoch")[-1]["epoch"] == EPOCHS - 1
        assert run.events(rank, "run_end")[-1]["status"] == "ok"
    # The redone epoch replaced the corrupt file with a good one.
    assert ckpt.load_checkpoint(newest)["global_step"] == 8 * EPOCHS


def test_injected_fault_fails_the_job_and_the_rank_reports_it(env, tmp_path):
    run = torchrun(
        tmp_path / "run",
        "--epochs",
        "1",
        "--synthetic-images",
        "16",
        "--inject-fault",
        "1@3",
        env=env,
    )
    assert run.result.returncode != 0
    assert "injected fault: rank 1 at global step 3" in run.result.stderr
    end = run.events(1, "run_end")[-1]
    assert end["status"] == "error" and "injected fault" in end["error"]
    assert end["step"] == 3
    assert "run_end" in run.result.stdout


def test_fault_drill_with_restart_resumes_and_finishes(env, tmp_path):
    # 16 images: 4 steps per epoch. Epoch 0 ends with a checkpoint at step 4, rank 1 fails
    # at step 5, torchrun restarts both workers, and they continue from the checkpoint.
    run = torchrun(
        tmp_path / "run",
        "--epochs",
        "2",
        "--synthetic-images",
        "16",
        "--inject-fault",
        "1@5",
        env=env,
        torchrun_args=["--max-restarts=1"],
    )
    assert run.result.returncode == 0, run.result.stderr[-4000:]
    failed, finished = run.events(1, "run_end")
    assert (failed["attempt"], failed["status"], failed["step"]) == (0, "error", 5)
    assert (finished["attempt"], finished["status"], finished["step"]) == (1, "ok", 8)
    for rank in range(WORLD_SIZE):
        restarted = run.events(rank, "run_start")[-1]
        assert (restarted["attempt"], restarted["start_epoch"]) == (1, 1)

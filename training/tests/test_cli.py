"""Argument validation: exit code 2 and one line that names the option."""

import subprocess

import pytest
from conftest import PYTHON, read_records, stdout_records

from gpuops_trainer.options import parse_args
from gpuops_trainer.train import main

TINY = [
    "--model", "retinanet_resnet18_fpn", "--image-size", "32", "--min-size", "32",
    "--max-size", "32", "--synthetic-images", "2", "--workers", "0", "--threads", "1",
]  # fmt: skip


def _usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # exactly one line, no usage block, no traceback
    return err


def test_unknown_model_exits_2_naming_the_option_and_choices(tmp_path, cpu_env):
    result = subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.train", "--output-dir", str(tmp_path), "--model", "yolo"],
        capture_output=True, text=True, env=cpu_env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "--model" in line and "'yolo'" in line
    for name in ("retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2", "retinanet_resnet18_fpn"):
        assert name in line


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--batch-size", "0"], "--batch-size"),
        (["--dist-backend", "mpi"], "--dist-backend"),
        (["--inject-fault", "one@3"], "--inject-fault"),
        (["--inject-fault", "1@3:explode"], "--inject-fault"),
        (["--min-size", "256", "--max-size", "128"], "--max-size"),
        (["--resume", "/nonexistent/checkpoint.pt"], "--resume"),
        (["--lr", "-1"], "--lr"),
        (["--clip-grad-norm", "-1"], "--clip-grad-norm"),
        (["--dataset", "imagenet"], "--dataset"),
        (["--dataset", "coco"], "--data-path"),
        (["--classes", "Cat"], "--classes"),
        (["--lr-schedule", "linear"], "--lr-schedule"),
        (["--amp-dtype", "fp8"], "--amp-dtype"),
        (["--grad-accum-steps", "0"], "--grad-accum-steps"),
        (["--dist-timeout-s", "0"], "--dist-timeout-s"),
        (["--leak-mib-per-epoch", "lots"], "--leak-mib-per-epoch"),
        (["--leak-mib-per-epoch", "1@"], "--leak-mib-per-epoch"),
        (["--slow-rank", "1"], "--slow-rank"),
        (["--slow-rank", "1@fast"], "--slow-rank"),
    ],
)
def test_bad_values_exit_2_with_one_line(capsys, tmp_path, argv, option):
    assert option in _usage_error(capsys, ["--output-dir", str(tmp_path), *argv])


def test_missing_output_dir(capsys):
    assert "--output-dir" in _usage_error(capsys, [])


def test_nccl_on_a_cpu_machine_is_a_config_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    code = main(["--output-dir", str(tmp_path), "--dist-backend", "nccl", *TINY])
    assert code == 2
    assert "--dist-backend nccl" in capsys.readouterr().err
    (end,) = list(read_records(tmp_path / "metrics" / "rank0.jsonl"))
    assert end["event"] == "run_end" and end["status"] == "error"


@pytest.mark.slow
def test_single_process_run_without_torchrun(tmp_path, cpu_env):
    result = subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.train", "--output-dir", str(tmp_path), *TINY,
         "--epochs", "1", "--batch-size", "2", "--print-freq", "1"],
        capture_output=True, text=True, env=cpu_env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("{") for line in lines)
    records = stdout_records(result.stdout)
    assert [r["event"] for r in records if r["event"] != "memory"] == [
        "dataset", "dataset", "run_start", "step", "epoch", "checkpoint", "eval", "run_end"
    ]  # fmt: skip
    assert [r["phase"] for r in records if r["event"] == "memory"] == [
        "start", "loader_start", "epoch_end", "checkpoint_write_before",
        "checkpoint_write_after", "eval_after",
    ]  # fmt: skip
    start = records[2]
    assert (start["world_size"], start["backend"], start["device"]) == (1, None, "cpu")
    # One process has no collective to wait in: its step is data and compute.
    (step,) = [r for r in records if r["event"] == "step"]
    assert step["timing"]["collective_s"] == 0 and step["timing"]["compute_s"] > 0
    assert records[-1]["status"] == "ok" and records[-1]["epochs_completed"] == 1
    assert read_records(tmp_path / "metrics" / "rank0.jsonl") == records


def test_non_finite_loss_limit_exits_4(tmp_path, capsys, monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    # An absurd learning rate without clipping makes the second step's loss NaN.
    argv = ["--output-dir", str(tmp_path), *TINY, "--batch-size", "2", "--epochs", "3",
            "--lr", "1e20", "--warmup-iters", "0", "--clip-grad-norm", "0",
            "--nonfinite-limit", "0"]  # fmt: skip
    assert main(argv) == 4
    assert "--nonfinite-limit" in capsys.readouterr().err
    end = read_records(tmp_path / "metrics" / "rank0.jsonl")[-1]
    assert end["event"] == "run_end" and end["status"] == "error"
    assert "non-finite" in end["error"]

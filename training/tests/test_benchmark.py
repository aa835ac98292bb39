"""benchmarks/train_throughput runs end to end and reports every loop it measured.

No timing is asserted (the machine is shared); the test only keeps the benchmark working
and its summary complete as the trainer changes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON

# Each test trains the reference loop and the trainer for a round.
pytestmark = pytest.mark.slow

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "train_throughput" / "run.py"


def run_benchmark(cpu_env, *args):
    result = subprocess.run(
        [PYTHON, str(BENCHMARK), "--rounds", "1", "--images", "4", *args],
        env=cpu_env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_summary_names_each_loop_with_a_rate_and_a_finite_loss(cpu_env):
    summary = run_benchmark(cpu_env, "--amp", "bf16")
    assert set(summary["images_per_s"]) == {"reference", "trainer_fp32", "trainer_amp"}
    assert all(rate > 0 for rate in summary["images_per_s"].values())
    # Same initial weights and data (in another order): bf16 autocast trains like fp32.
    losses = summary["mean_epoch_loss"]
    for name in ("trainer_fp32", "trainer_amp"):
        assert abs(losses[name] - losses["reference"]) < 0.05 * losses["reference"], losses
    rates = summary["images_per_s"]
    assert summary["trainer"] == max(("trainer_fp32", "trainer_amp"), key=rates.get)
    assert summary["amp_dtype"] == "bfloat16"
    # The memory sampling's cost is measured and set against a step.
    assert summary["memory_sample_us"] > 0 and summary["memory_sample_share_of_step"] > 0


def test_amp_off_measures_the_two_fp32_loops(cpu_env):
    summary = run_benchmark(cpu_env, "--amp", "off")
    assert set(summary["images_per_s"]) == {"reference", "trainer_fp32"}
    assert summary["trainer"] == "trainer_fp32"
    assert summary["amp_dtype"] is None


def test_the_reference_with_its_own_amp_is_measured_beside_the_fp32_pair(cpu_env):
    """On CUDA the reference's --amp is measured by default; --reference-amp on runs the same
    loop (autocast and a GradScaler) here, in the trainer's bf16."""
    summary = run_benchmark(cpu_env, "--amp", "bf16", "--reference-amp", "on")
    loops = {"reference", "reference_amp", "trainer_fp32", "trainer_amp"}
    assert set(summary["images_per_s"]) == loops
    losses = summary["mean_epoch_loss"]
    assert abs(losses["reference_amp"] - losses["reference"]) < 0.05 * losses["reference"], losses
    rates = summary["images_per_s"]
    assert summary["trainer"] in ("trainer_fp32", "trainer_amp")
    assert summary["ratio_vs_reference_amp"] == pytest.approx(
        rates[summary["trainer"]] / rates["reference_amp"], rel=0.01
    )
    # Without it, on a CPU, the fp32 pair only.
    assert run_benchmark(cpu_env, "--amp", "off")["ratio_vs_reference_amp"] is None


STEP_TIMING = BENCHMARK.parents[1] / "step_timing" / "run.py"


@pytest.mark.distributed
def test_the_step_timing_benchmark_compares_three_ddp_loops_training_the_same(cpu_env):
    result = subprocess.run(
        [PYTHON, str(STEP_TIMING), "--rounds", "1", "--images", "4", "--image-size", "64"],
        env=cpu_env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert set(summary["images_per_s"]) == {"untimed", "python_hook", "timed"}
    assert all(rate > 0 for rate in summary["images_per_s"].values())
    assert (summary["backend"], summary["world_size"]) == ("gloo", 2)
    assert len(summary["per_round_ratios"]) == 1 and summary["ratio"] > 0
    # The wrapped all-reduce averages the gradients as DDP's own does: the same training.
    losses = summary["mean_epoch_loss"]
    assert losses["timed"] == pytest.approx(losses["untimed"], rel=1e-3), losses
    assert losses["python_hook"] == pytest.approx(losses["untimed"], rel=1e-3), losses
    assert summary["marks_us_per_micro_step"] > 0

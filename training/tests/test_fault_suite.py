"""Faults a multi-day run meets, injected for real (issue: reliability under faults).

- Chaos: ranks SIGKILLed from outside at random steps, three times in one torchrun run with
  --max-restarts; the metrics' lineage proves every optimizer step of the final model was
  applied exactly once, and no restart lost more than the checkpoint interval.
- A checkpoint cut short or with flipped bytes is skipped for the previous one.
- A full checkpoint volume (a real tmpfs) ends the run with exit code 5 and a clear line, and
  the last good checkpoint stays loadable.
- Exit-code classes: the README's table is errors.py's, and a killed worker is reported.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import PYTHON, read_records

from gpuops_trainer import checkpoint as ckpt
from gpuops_trainer import errors

pytestmark = pytest.mark.distributed

README = Path(__file__).resolve().parents[1] / "README.md"
SMALL = [
    "--model", "retinanet_resnet18_fpn", "--dist-backend", "gloo", "--threads", "1",
    "--image-size", "64", "--min-size", "64", "--max-size", "64", "--synthetic-classes", "2",
    "--batch-size", "2", "--workers", "0", "--print-freq", "1", "--no-eval-at-end",
]  # fmt: skip


@pytest.fixture
def env():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    return env


def worker_pids(agent_pid):
    """{rank: pid} of the trainer processes torchrun's agent started."""
    workers = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent != agent_pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                workers[int(item[5:])] = int(entry.name)
    return workers


def latest_step(metrics_dir, attempt):
    """The highest step any rank recorded in this attempt (0 before the first)."""
    steps = [0]
    for path in Path(metrics_dir).glob("rank*.jsonl"):
        for line in path.read_text().splitlines():
            if '"event": "step"' in line or '"event":"step"' in line:
                record = json.loads(line)
                if record["attempt"] == attempt:
                    steps.append(record["step"])
    return max(steps)


def test_three_sigkills_at_random_steps_lose_nothing_beyond_the_interval_and_repeat_no_step(
    env, tmp_path
):
    seed = int(os.environ.get("GPUOPS_CHAOS_SEED", "20261122"))
    rng = random.Random(seed)
    every, epochs, images = 2, 4, 16  # 4 steps per epoch (2 ranks x 2 images), 16 in all
    total = epochs * images // 4
    kill_steps = sorted(rng.sample(range(2, total - 1), 3))
    output = tmp_path / "run"
    command = [
        PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "--max-restarts=3", "-m", "gpuops_trainer.train", "--output-dir", str(output), *SMALL,
        "--epochs", str(epochs), "--synthetic-images", str(images),
        "--checkpoint-every-steps", str(every),
    ]  # fmt: skip
    agent = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    kills = []  # (attempt, step seen, rank killed)
    try:
        for attempt, step in enumerate(kill_steps):
            deadline = time.monotonic() + 300
            while latest_step(output / "metrics", attempt) < step:
                assert agent.poll() is None, (
                    f"the run ended before step {step} of attempt {attempt}"
                )
                assert time.monotonic() < deadline, f"attempt {attempt} never reached step {step}"
                time.sleep(0.05)
            workers = worker_pids(agent.pid)
            rank = rng.choice(sorted(workers))
            os.kill(workers[rank], signal.SIGKILL)
            kills.append((attempt, step, rank))
        _out, stderr = agent.communicate(timeout=600)
    finally:
        if agent.poll() is None:
            agent.kill()
    context = f"seed {seed}, kills {kills}"
    assert agent.returncode == 0, context + "\n" + stderr[-3000:]

    by_rank = [read_records(output / "metrics" / f"rank{rank}.jsonl") for rank in (0, 1)]
    checkpoints = [(r["attempt"], r["step"]) for r in by_rank[0] if r["event"] == "checkpoint"]
    attempts = [0, 1, 2, 3]
    resumes = {}
    for records in by_rank:
        assert sorted({r["attempt"] for r in records}) == attempts, context
        for r in records:
            if r["event"] == "resume":
                # Both ranks of an attempt resume from the same checkpoint.
                assert resumes.setdefault(r["attempt"], r["step"]) == r["step"], (context, r)
        for attempt in attempts:
            start = resumes.get(attempt, 0)
            steps = [r["step"] for r in records if r["event"] == "step" and r["attempt"] == attempt]
            # Each attempt continues right after the step it resumed from, one step at a time.
            assert steps == list(range(start + 1, start + 1 + len(steps))), (
                context,
                attempt,
                steps,
            )
        # Workers stopped by torchrun after a kill may report their own end; the last
        # attempt's is the run's.
        (end_record,) = [r for r in records if r["event"] == "run_end" and r["attempt"] == 3]
        assert (end_record["status"], end_record["step"]) == ("ok", total)
    lineage = []
    for attempt in attempts:
        # A step is done when any rank recorded it: a killed rank may not have written its
        # record of a step that completed everywhere else.
        steps = sorted({r["step"] for records in by_rank for r in records
                        if r["event"] == "step" and r["attempt"] == attempt})  # fmt: skip
        if attempt == attempts[-1]:
            end = steps[-1]
        else:
            # The next attempt resumed from the newest checkpoint written before the kill
            # (from scratch when there was none yet): at least the newest one recorded (the
            # record follows the file, so a kill between them leaves a newer file unrecorded),
            # never one of a step not yet done...
            end = resumes.get(attempt + 1, 0)
            written = [step for a, step in checkpoints if a <= attempt]
            assert max(written, default=0) <= end <= steps[-1], (context, attempt, end, written)
            # ...and lost at most the checkpoint interval (a kill while the checkpoint of
            # the interval's last step is written loses the whole interval).
            assert steps[-1] - end <= every, (context, attempt, steps[-1], end)
        lineage += [step for step in steps if step <= end]
    # The final model's steps: each exactly once, none missing.
    assert lineage == list(range(1, total + 1)), context
    newest, state, skipped = ckpt.load_newest(output / "checkpoints")
    assert (
        skipped == []
        and state["global_step"] == total
        and newest.name == ckpt.checkpoint_name(total)
    )


def _state(step):
    """A complete checkpoint (every required key) of a tiny model."""
    state = {key: {} for key in ckpt.REQUIRED_KEYS}
    state.update(model={"w": torch.ones(64) * step}, epoch=0, global_step=step)
    return state


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(
            lambda data: data[:100] + bytes(b ^ 0xFF for b in data[100:400]) + data[400:],
            id="bytes-flipped",
        ),
        pytest.param(lambda data: b"", id="zero-length"),
    ],
)
def test_a_damaged_newest_checkpoint_is_skipped_with_its_reason_for_the_previous_one(
    tmp_path, damage
):
    for step in (10, 20):
        ckpt.save_checkpoint(_state(step), tmp_path, keep=5)
    newest = tmp_path / ckpt.checkpoint_name(20)
    newest.write_bytes(damage(newest.read_bytes()))
    path, state, skipped = ckpt.load_newest(tmp_path)
    assert path == tmp_path / ckpt.checkpoint_name(10) and state["global_step"] == 10
    assert [s.path for s in skipped] == [newest]
    assert skipped[0].reason.startswith("unreadable:")


@pytest.fixture
def small_volume(tmp_path):
    """A real tmpfs of a few megabytes, mounted for the test (we run as root)."""
    mount_point = tmp_path / "volume"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={VOLUME_KIB}k", "gpuops-test", str(mount_point)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"cannot mount a tmpfs for the disk-full test: {result.stderr}"
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def checkpoint_bytes_of_the_small_model():
    """Size of one checkpoint of SMALL's model: its weights plus SGD's momentum, about."""
    from gpuops_trainer.models import build_model

    model = build_model("retinanet_resnet18_fpn", num_classes=3, min_size=64, max_size=64)
    return 2 * sum(t.numel() * t.element_size() for t in model.state_dict().values())


# Room for the first checkpoint but not for a second beside it.
VOLUME_KIB = int(checkpoint_bytes_of_the_small_model() * 1.5) // 1024


def test_a_full_checkpoint_volume_exits_5_naming_it_and_keeps_the_last_checkpoint(
    env, small_volume
):
    result = subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.train", "--output-dir", str(small_volume), *SMALL,
         "--epochs", "1", "--synthetic-images", "6", "--checkpoint-every-steps", "1"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == errors.EXIT_STORAGE == 5, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if "error:" in line]
    expected = (
        r"gpuops-train: error: cannot write checkpoint checkpoint_step0*2\.pt: no space left in "
        + re.escape(str(small_volume / "checkpoints"))
        + r" \(about \d+ bytes needed, \d+ free\); the newest checkpoint, checkpoint_step0*1\.pt, "
        r"is intact\. "
        r"Free space there"
    )
    assert re.search(expected, line), line
    checkpoints = small_volume / "checkpoints"
    assert not [path for path in checkpoints.iterdir() if path.name.endswith(".tmp")]
    path, state, skipped = ckpt.load_newest(checkpoints)
    assert skipped == [] and state["global_step"] == 1 and path.name == ckpt.checkpoint_name(1)


def test_the_readme_lists_exactly_the_exit_codes_of_errors_py():
    section = README.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)}
    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert documented == defined
    assert "| 128+N |" in section


def test_a_worker_killed_without_restarts_fails_the_run_naming_the_signal(env, tmp_path):
    output = tmp_path / "run"
    agent = subprocess.Popen(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "--max-restarts=0", "-m", "gpuops_trainer.train", "--output-dir", str(output), *SMALL,
         "--epochs", "3", "--synthetic-images", "8"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while latest_step(output / "metrics", 0) < 1:
            assert agent.poll() is None and time.monotonic() < deadline, "no step was ever taken"
            time.sleep(0.05)
        os.kill(worker_pids(agent.pid)[1], signal.SIGKILL)
        _out, stderr = agent.communicate(timeout=300)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 1  # torchrun's own code for a failed worker
    assert "Signal 9 (SIGKILL)" in stderr, stderr[-3000:]

"""Faults a multi-day run meets, injected for real (issue #11, the trainer's part).

- Chaos: ranks SIGKILLed from outside at random steps, three times in one torchrun run with
  --max-restarts; the metrics' lineage proves every optimizer step of the final model was
  applied exactly once, and no restart lost more than the checkpoint interval.
- A checkpoint cut short, with flipped bytes or empty is skipped for the previous one
  (here against the resume logic; test_torchrun.py has the torchrun-level run).
- A full checkpoint volume (a real tmpfs) ends the run with exit code 5 and a clear line, and
  the last good checkpoint stays loadable; a full metrics volume does not end the run.
- Exit-code classes, one test each, as the process's parent (a container runtime) sees them;
  the README's table is errors.py's.
- benchmarks/faults/run.py runs in its smallest setting and reports its figures.
"""

from __future__ import annotations

import io
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
from conftest import PYTHON, read_records, stdout_records

from gpuops_trainer import checkpoint as ckpt
from gpuops_trainer import errors
from gpuops_trainer.distributed import DistInfo
from gpuops_trainer.metrics import MetricsWriter
from gpuops_trainer.options import parse_args
from gpuops_trainer.train import STOPPED_BY_SIGTERM, choose_checkpoint

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "training" / "README.md"
BENCHMARK = ROOT / "benchmarks" / "faults" / "run.py"
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


def children(parent_pid):
    """{pid: environ entries} of the processes whose parent is ``parent_pid``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent_pid:
                found[int(entry.name)] = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return found


def worker_pids(agent_pid):
    """{rank: pid} of the trainer processes torchrun's agent started."""
    return {
        int(item[5:]): pid
        for pid, environ in children(agent_pid).items()
        for item in environ
        if item.startswith(b"RANK=")
    }


def latest_step(metrics_dir, attempt):
    """The highest step any rank recorded in this attempt (0 before the first)."""
    steps = [0]
    for path in Path(metrics_dir).glob("rank*.jsonl"):
        for line in path.read_text().splitlines():
            if '"event":"step"' in line:
                record = json.loads(line)
                if record["attempt"] == attempt:
                    steps.append(record["step"])
    return max(steps)


def wait_for_step(agent, metrics_dir, attempt, step, polls=6000):
    # A bounded number of polls (about 5 minutes), not a clock: the test judges no timing.
    for _poll in range(polls):
        if latest_step(metrics_dir, attempt) >= step:
            return
        assert agent.poll() is None, f"the run ended before step {step} of attempt {attempt}"
        time.sleep(0.05)
    raise AssertionError(f"attempt {attempt} never reached step {step} in {polls} polls")


def start(command, env, stderr_path):
    """Start in a session of its own, so a failed test can end the whole tree (killpg).
    stderr goes to a file: a pipe nobody reads while the test polls could fill and block."""
    with open(stderr_path, "w") as stderr:
        return subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )


def stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def act_after_the_first_step(command, env, tmp_path, act, timeout=300):
    """Start COMMAND (its metrics under tmp_path/run), call ACT with the process once a rank
    has recorded step 1, wait for the run to end. Returns (process, stderr, what ACT returned)."""
    process = start(command, env, tmp_path / "stderr")
    try:
        wait_for_step(process, tmp_path / "run" / "metrics", 0, 1)
        acted = act(process)
        process.wait(timeout=timeout)
    finally:
        stop(process)
    return process, (tmp_path / "stderr").read_text(), acted


def _kill_worker_of_rank_1(agent):
    victim = worker_pids(agent.pid)[1]
    os.kill(victim, signal.SIGKILL)
    return victim


def newest_on_disk(checkpoint_dir):
    paths = ckpt.list_checkpoints(checkpoint_dir)
    return int(ckpt.CHECKPOINT_PATTERN.match(paths[0].name).group(1)) if paths else 0


@pytest.mark.distributed
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
    agent = start(command, env, tmp_path / "stderr")
    kills = []  # (attempt, step seen, rank killed)
    on_disk_at_kill = {}  # attempt: newest checkpoint file when its rank was killed
    try:
        for attempt, step in enumerate(kill_steps):
            wait_for_step(agent, output / "metrics", attempt, step)
            workers = worker_pids(agent.pid)
            rank = rng.choice(sorted(workers))
            on_disk_at_kill[attempt] = newest_on_disk(output / "checkpoints")
            os.kill(workers[rank], signal.SIGKILL)
            kills.append((attempt, step, rank))
        agent.wait(timeout=600)
    finally:
        stop(agent)
    context = f"seed {seed} (GPUOPS_CHAOS_SEED), kills (attempt, step, rank) {kills}"
    assert agent.returncode == 0, context + "\n" + (tmp_path / "stderr").read_text()[-3000:]

    # "Applied" steps, from the records (--print-freq 1: every step has one): an attempt
    # applied the steps of its step records, numbered on from its resume record's step (0:
    # from scratch). A step is in the final model unless a later attempt resumed before it.
    by_rank = [read_records(output / "metrics" / f"rank{rank}.jsonl") for rank in (0, 1)]
    checkpoints = [r for r in by_rank[0] if r["event"] == "checkpoint"]
    attempts = [0, 1, 2, 3]
    resumes = {}
    for records in by_rank:
        assert sorted({r["attempt"] for r in records}) == attempts, context
        for r in records:
            if r["event"] == "resume":
                # Both ranks of an attempt resume from the same checkpoint.
                assert resumes.setdefault(r["attempt"], r["step"]) == r["step"], (context, r)
        for attempt in attempts:
            start_step = resumes.get(attempt, 0)
            steps = [r["step"] for r in records if r["event"] == "step" and r["attempt"] == attempt]
            # Each attempt continues right after the step it resumed from, one step at a time.
            assert steps == list(range(start_step + 1, start_step + 1 + len(steps))), (
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
            # The next attempt resumed from the newest checkpoint there was: at least the
            # newest file on disk at the kill (rank 0 may finish writing a newer one before
            # torchrun stops it) and every one recorded, never one of a step not yet done...
            end = resumes.get(attempt + 1, 0)
            written = [r["step"] for r in checkpoints if r["attempt"] <= attempt]
            floor = max(on_disk_at_kill[attempt], *written, 0)
            assert floor <= end <= steps[-1], (context, attempt, end, floor)
            # ...and lost at most the checkpoint interval (a kill while the checkpoint of
            # the interval's last step is written loses the whole interval).
            assert steps[-1] - end <= every, (context, attempt, steps[-1], end)
        lineage += [step for step in steps if step <= end]
    # The final model's steps: each exactly once, none missing.
    assert lineage == list(range(1, total + 1)), context
    # Atomic writes: a kill never left a damaged checkpoint to skip, and the temp file of a
    # write cut short was removed by the next attempt.
    assert not [r for r in by_rank[0] if r["event"] == "checkpoint_skipped"], context
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == [
        ckpt.checkpoint_name(step) for step in (total - 4, total - 2, total)
    ], context
    assert all(r["bytes"] > 0 and r["seconds"] > 0 for r in checkpoints)
    newest, state, skipped = ckpt.load_newest(output / "checkpoints")
    assert skipped == [] and state["global_step"] == total


def _state(step):
    """A complete checkpoint (every required key) of a tiny model."""
    state = {key: {} for key in ckpt.REQUIRED_KEYS}
    state.update(model={"w": torch.ones(64) * step}, epoch=0, global_step=step)
    return state


def _choose(output_dir):
    """What a restarted rank 0 resumes from (no process group): path, state, records."""
    stream = io.StringIO()
    metrics = MetricsWriter(None, 0, 0, 1, attempt=1, stream=stream)
    args = parse_args(["--output-dir", str(output_dir)])
    path, state = choose_checkpoint(args, DistInfo(0, 0, 1, None, torch.device("cpu")), metrics)
    return path, state, [json.loads(line) for line in stream.getvalue().splitlines()]


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
def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning_for_the_previous_one(
    tmp_path, capsys, damage
):
    directory = tmp_path / "checkpoints"
    for step in (10, 20):
        ckpt.save_checkpoint(_state(step), directory, keep=5)
    newest = directory / ckpt.checkpoint_name(20)
    newest.write_bytes(damage(newest.read_bytes()))
    path, state, records = _choose(tmp_path)
    assert path == str(directory / ckpt.checkpoint_name(10)) and state["global_step"] == 10
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"gpuops-train: warning: skipping checkpoint {newest}: unreadable:")
    (skipped,) = records
    assert skipped["event"] == "checkpoint_skipped" and skipped["path"] == str(newest)


def test_the_temp_file_of_a_write_cut_short_is_removed_when_the_next_attempt_starts(
    tmp_path, capsys
):
    directory = tmp_path / "checkpoints"
    ckpt.save_checkpoint(_state(10), directory, keep=5)
    # What a rank 0 SIGKILLed inside save_checkpoint leaves: mkstemp's file, half written.
    partial = directory / ".checkpoint_step000000020.pt.k2x_9q4f.tmp"
    partial.write_bytes(b"PK\x03\x04" + bytes(1000))
    unrelated = directory / "notes.tmp"
    unrelated.write_text("not ours")
    path, state, _records = _choose(tmp_path)
    assert path == str(directory / ckpt.checkpoint_name(10)) and state["global_step"] == 10
    assert not partial.exists() and unrelated.exists()
    assert capsys.readouterr().err == (
        f"gpuops-train: warning: removed {partial}: a checkpoint write that never finished\n"
    )


def test_metrics_survive_a_full_metrics_volume_on_stdout(tmp_path, capsys):
    # /dev/full fails every write with ENOSPC, as a full output volume does.
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "rank0.jsonl").symlink_to("/dev/full")
    stream = io.StringIO()
    writer = MetricsWriter(tmp_path, 0, 0, 1, attempt=0, stream=stream)
    writer.emit("step", step=1)
    writer.emit("step", step=2)
    writer.close()
    assert [json.loads(line)["step"] for line in stream.getvalue().splitlines()] == [1, 2]
    (warning,) = capsys.readouterr().err.splitlines()
    assert "cannot append to" in warning and "No space left on device" in warning


def test_a_record_cut_short_keeps_its_own_line_when_the_next_attempt_appends(tmp_path):
    path = tmp_path / "metrics" / "rank0.jsonl"
    path.parent.mkdir()
    path.write_text('{"schema":"gpuops.metrics/v1","event":"step","ti')  # the volume filled up
    writer = MetricsWriter(tmp_path, 0, 0, 1, attempt=1, stream=io.StringIO())
    writer.emit("run_start")
    writer.close()
    cut, line = path.read_text().splitlines()
    assert cut.endswith('"ti') and json.loads(line)["event"] == "run_start"


@pytest.fixture
def small_volume(tmp_path):
    """A real tmpfs with room for one checkpoint of SMALL's model but not a second beside
    it (we run as root). The test fails, not skips, where it cannot be mounted."""
    from gpuops_trainer.models import build_model

    model = build_model("retinanet_resnet18_fpn", num_classes=3, min_size=64, max_size=64)
    # A checkpoint is about the weights plus SGD's momentum buffers.
    checkpoint_bytes = 2 * sum(t.numel() * t.element_size() for t in model.state_dict().values())
    mount_point = tmp_path / "volume"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={int(checkpoint_bytes * 1.5) // 1024}k",
         "gpuops-test", str(mount_point)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"cannot mount a tmpfs for the disk-full test: {result.stderr}"
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.slow
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
    end = stdout_records(result.stdout)[-1]
    assert (end["event"], end["status"]) == ("run_end", "error") and "no space" in end["error"]


def _readme_exit_codes():
    """{code: retry column} of the README's exit-code table."""
    section = README.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+|128\+N) \|.*\|([^|]*)\|$", section, re.M)
    return {code: retry.strip() for code, retry in rows}


def test_the_readme_lists_exactly_the_exit_codes_of_errors_py():
    documented = _readme_exit_codes()
    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert {int(code) for code in documented if code.isdigit()} == defined
    # Kubeflow's ExitCode policy: 1-127 permanent, 128+ retryable; the table says the same.
    assert all(documented[str(code)].startswith("no") for code in defined - {0, 1} if code < 128)
    assert all(documented[str(code)].startswith("yes") for code in defined if code >= 128)
    assert documented["128+N"].startswith("yes")


def _write_coco_without_annotations(root):
    (root / "train2017").mkdir(parents=True)


# The trainer run as a container runs it (`python -m gpuops_trainer`, one process, no
# torchrun): the exit status its parent sees, one error line, no traceback.
EXIT_CLASSES = {
    "config": (["--batch-size", "0"], errors.EXIT_CONFIG, "argument --batch-size: must be >= 1"),
    "data": (["--dataset", "coco", "--data-path", "{data}"], errors.EXIT_DATA,
             "annotation file not found: "),
    # An absurd learning rate without clipping makes the second step's loss NaN.
    "nonfinite": (["--lr", "1e20", "--warmup-iters", "0", "--clip-grad-norm", "0",
                   "--nonfinite-limit", "0", "--epochs", "3"], errors.EXIT_NONFINITE,
                  "non-finite loss/gradients for 1 consecutive steps"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(EXIT_CLASSES))
def test_each_error_class_exits_with_its_code_and_one_line(env, tmp_path, name):
    extra, code, message = EXIT_CLASSES[name]
    data = tmp_path / "coco"
    _write_coco_without_annotations(data)
    result = subprocess.run(
        [PYTHON, "-m", "gpuops_trainer", "--output-dir", str(tmp_path / "run"), *SMALL,
         "--synthetic-images", "4", "--epochs", "1",
         *[item.format(data=data) for item in extra]],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == code, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert line.startswith("gpuops-train: error: ") and message in line, line
    assert "Traceback" not in result.stderr
    if name != "config":  # a usage error stops before any record
        end = stdout_records(result.stdout)[-1]
        assert (end["event"], end["status"]) == ("run_end", "error")


def test_a_sigkilled_trainer_is_128_plus_9_to_its_shell_and_reports_nothing(env, tmp_path):
    # The kernel's OOM killer sends SIGKILL: nothing in the process can catch it, so the
    # status is the signal's. The shell here stands for a container runtime: both report
    # 128+N, which is what Kubernetes records as the container's exit code.
    output = tmp_path / "run"
    shell = start(
        ["sh", "-c", '"$@"; exit $?', "sh", PYTHON, "-m", "gpuops_trainer",
         "--output-dir", str(output), *SMALL, "--epochs", "5", "--synthetic-images", "4"],
        env, tmp_path / "stderr",
    )  # fmt: skip
    try:
        wait_for_step(shell, output / "metrics", 0, 1)
        (trainer,) = list(children(shell.pid))
        os.kill(trainer, signal.SIGKILL)
        shell.wait(timeout=60)
    finally:
        stop(shell)
    assert shell.returncode == 128 + signal.SIGKILL == 137
    events = [r["event"] for r in read_records(output / "metrics" / "rank0.jsonl")]
    assert "step" in events and "run_end" not in events


# torchrun exits 1 for any failed worker; gpuops_trainer.launch (what the collection's
# launchers run) exits with the worker's own status, as restart policies need.
LAUNCHERS = {"torch.distributed.run": 1, "gpuops_trainer.launch": 128 + signal.SIGKILL}


@pytest.mark.distributed
@pytest.mark.parametrize(("launcher", "code"), LAUNCHERS.items())
def test_a_worker_killed_without_restarts_fails_the_run_naming_the_signal(
    env, tmp_path, launcher, code
):
    agent, stderr, victim = act_after_the_first_step(
        [PYTHON, "-m", launcher, "--standalone", "--nproc_per_node=2",
         "--max-restarts=0", "-m", "gpuops_trainer.train", "--output-dir", str(tmp_path / "run"),
         *SMALL, "--epochs", "3", "--synthetic-images", "8"],
        env, tmp_path, _kill_worker_of_rank_1,
    )  # fmt: skip
    assert agent.returncode == code, stderr[-3000:]
    # torchrun's summary names the killed worker, its status and the signal.
    assert re.search(rf"exitcode\s*: -9 \(pid: {victim}\)", stderr), stderr[-3000:]
    assert f"Signal 9 (SIGKILL) received by PID {victim}" in stderr, stderr[-3000:]


@pytest.mark.distributed
def test_a_rank_whose_peer_node_died_exits_retryable_with_one_line(env, tmp_path):
    """Two agents, one process each, as two pods run it: when the other pod's worker is
    killed, this rank's collective fails, and it says so with 200, which restart policies
    retry (a traceback and exit 1 would read as a permanent error)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    output = tmp_path / "run"
    agents = []
    for node in (0, 1):
        agents.append(
            start(
                [PYTHON, "-m", "gpuops_trainer.launch", "--nnodes=2", "--nproc-per-node=1",
                 f"--node-rank={node}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                 "--rdzv-id=peer-lost", "--max-restarts=0", "-m", "gpuops_trainer.train",
                 "--output-dir", str(output), *SMALL, "--epochs", "3", "--synthetic-images", "8"],
                env, tmp_path / f"stderr-{node}",
            )
        )  # fmt: skip
    try:
        wait_for_step(agents[0], output / "metrics", 0, 1)
        victims = {
            pid for agent in agents for rank, pid in worker_pids(agent.pid).items() if rank == 1
        }
        (victim,) = victims
        os.kill(victim, signal.SIGKILL)
        for agent in agents:
            agent.wait(timeout=300)
    finally:
        for agent in agents:
            stop(agent)
    codes = sorted(agent.returncode for agent in agents)
    stderr = "".join((tmp_path / f"stderr-{node}").read_text() for node in (0, 1))
    assert codes == [128 + signal.SIGKILL, errors.EXIT_PEER_LOST], stderr[-3000:]
    (end,) = [
        r for r in read_records(output / "metrics" / "rank0.jsonl") if r["event"] == "run_end"
    ]
    assert end["status"] == "error"
    # The surviving rank reports its end either way. Its collective fails on the lost peer;
    # or, when the killed rank's agent hosted the rendezvous store, its own agent loses the
    # store first and stops it with SIGTERM (which agent hosts depends on start-up order).
    if end["error"] == STOPPED_BY_SIGTERM:
        assert "gpuops_trainer.launch: the rendezvous store is gone" in stderr, stderr[-3000:]
        assert f"gpuops-train: error: {STOPPED_BY_SIGTERM}" in stderr
    else:
        assert end["error"].startswith("a peer rank or the rendezvous was lost: "), end
        assert "gpuops-train: error: a peer rank or the rendezvous was lost: " in stderr


def test_a_sigterm_to_the_trainer_ends_with_its_run_end_and_143(env, tmp_path):
    """A pod being deleted or preempted: the container's process gets SIGTERM. The trainer
    (with DataLoader workers, which get it too when a process group is signalled) writes its
    last record and exits with the code the signal would give, so nothing reads it as a
    permanent error and the run's report says why it stopped."""
    output = tmp_path / "run"
    trainer, stderr, _signalled = act_after_the_first_step(
        [PYTHON, "-m", "gpuops_trainer", "--output-dir", str(output),
         *SMALL, "--workers", "2",  # the last --workers wins
         "--epochs", "50", "--synthetic-images", "8"],
        env, tmp_path,
        lambda trainer: os.killpg(trainer.pid, signal.SIGTERM),  # as torchrun's agent does
    )  # fmt: skip
    assert trainer.returncode == errors.EXIT_TERMINATED == 143, stderr[-3000:]
    assert [line for line in stderr.splitlines() if "error" in line] == [
        f"gpuops-train: error: {STOPPED_BY_SIGTERM}"
    ], stderr[-3000:]
    assert "Traceback" not in stderr
    end = read_records(output / "metrics" / "rank0.jsonl")[-1]
    assert (end["event"], end["status"], end["error"]) == ("run_end", "error", STOPPED_BY_SIGTERM)
    assert end["step"] >= 1


@pytest.mark.distributed
def test_a_sigterm_to_the_launcher_gives_every_rank_its_run_end(env, tmp_path):
    """kubelet's SIGTERM goes to the container's first process, the launcher: torchrun's agent
    stops its workers with SIGTERM, each writes its run_end, and the pod exits 143."""
    output = tmp_path / "run"
    agent, stderr, _signalled = act_after_the_first_step(
        [PYTHON, "-m", "gpuops_trainer.launch", "--standalone", "--nproc-per-node=2",
         "--max-restarts=0", "-m", "gpuops_trainer.train", "--output-dir", str(output), *SMALL,
         "--epochs", "50", "--synthetic-images", "8"],
        env, tmp_path, lambda agent: os.kill(agent.pid, signal.SIGTERM),
    )  # fmt: skip
    assert agent.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    for rank in (0, 1):
        end = read_records(output / "metrics" / f"rank{rank}.jsonl")[-1]
        assert (end["event"], end["error"]) == ("run_end", STOPPED_BY_SIGTERM), (rank, end)


@pytest.mark.distributed
def test_the_launcher_exits_with_the_trainers_configuration_error(env, tmp_path):
    result = subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.launch", "--standalone", "--nproc_per_node=2",
         "--max-restarts=0", "-m", "gpuops_trainer.train", "--output-dir", str(tmp_path / "run"),
         *SMALL, "--batch-size", "0"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == errors.EXIT_CONFIG == 2, result.stderr[-3000:]
    assert "gpuops-train: error: argument --batch-size" in result.stderr


@pytest.mark.distributed
def test_the_faults_benchmark_reports_its_figures_in_its_smallest_setting(env, tmp_path):
    out = tmp_path / "faults.json"
    result = subprocess.run(
        [PYTHON, str(BENCHMARK), "--rounds", "1", "--kills", "1", "--epochs", "2",
         "--images", "8", "--checkpoint-every", "1", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert json.loads(result.stdout) == summary
    assert summary["restarts"] == 1 and summary["problems"] == []
    assert summary["steps_applied_twice"] == 0
    assert summary["steps_lost_per_restart"][0] <= 1  # the checkpoint interval
    for figure in ("kill_to_first_step_s", "kill_to_restart_s", "checkpoint_write_s"):
        assert set(summary[figure]) == {"median", "max", "count"}
    assert summary["wall_ratio"] > 0 and summary["checkpoint_bytes"] > 0
    (one,) = summary["rounds_detail"]
    assert {"wall_s", "baseline_wall_s", "per_restart", "kill_steps"} <= set(one)
    (restart,) = one["per_restart"]
    assert restart["resumed_from_step"] >= restart["newest_checkpoint_at_kill"]
    # Resume restores weights, optimizer, schedule, RNG and data position exactly: the
    # killed run ends with the uninterrupted run's weights, bit for bit.
    assert one["final_weights_max_abs_diff_vs_baseline"] == 0.0

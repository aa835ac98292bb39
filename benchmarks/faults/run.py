# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Recovery of the trainer from SIGKILLed ranks, against the same run without faults.

Each round runs the trainer twice under ``torchrun --standalone --max-restarts``, on CPU
(gloo, one thread per process) with synthetic data and a checkpoint every N steps: once
undisturbed (the baseline) and once with K ranks SIGKILLed from outside, each at a random
step (seeded), one per attempt. From the metrics records and the kill times it reports the
restarts, the optimizer steps each restart lost (redone from the checkpoint), the seconds
from each kill to the first step after the resume, the wall time against the baseline's,
the checkpoint write times, and whether the final model equals the baseline's. Which run
goes first alternates by round, so machine load hits both alike. Prints JSON; exits 1 when a
run failed or the lineage audit found a step lost or applied twice.

    .venv/bin/python benchmarks/faults/run.py [--rounds 1] [--kills 3] [--seed N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from gpuops_trainer import checkpoint as ckpt

WORLD_SIZE = 2
BATCH_SIZE = 2


def parse_cli(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="baseline + chaos pairs")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per chaos run")
    parser.add_argument("--seed", type=int, default=20261122, help="round i uses seed + i")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--images", type=int, default=16, help="synthetic images (2 ranks x 2: images/4 steps)"
    )
    parser.add_argument("--checkpoint-every", type=int, default=2, metavar="STEPS")
    parser.add_argument("--model", default="retinanet_resnet18_fpn")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--keep-dir", default=None, help="keep the runs here (default: a temp dir)")
    cli = parser.parse_args(argv)
    cli.total_steps = cli.epochs * (cli.images // (WORLD_SIZE * BATCH_SIZE))
    # Kills at distinct steps of 2..total-2: after the first step, before the last.
    if cli.kills < 1 or cli.total_steps - 3 < cli.kills:
        parser.error(f"--kills: 1 to {max(cli.total_steps - 3, 0)} with {cli.total_steps} steps")
    return cli


def trainer_command(cli, output: Path) -> list[str]:
    size = str(cli.image_size)
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={WORLD_SIZE}", f"--max-restarts={cli.kills}",
        "-m", "gpuops_trainer.train", "--output-dir", str(output),
        "--model", cli.model, "--dist-backend", "gloo", "--threads", "1",
        "--image-size", size, "--min-size", size, "--max-size", size,
        "--synthetic-classes", "2", "--synthetic-images", str(cli.images),
        "--batch-size", str(BATCH_SIZE), "--workers", "0", "--epochs", str(cli.epochs),
        # One record per step: the lineage audit needs every step's.
        "--print-freq", "1", "--no-eval-at-end",
        "--checkpoint-every-steps", str(cli.checkpoint_every),
    ]  # fmt: skip


def trainer_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    # See training/README.md: restarted gloo workers can hang on the failed attempt's store.
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    return env


def read_records(metrics_dir: Path) -> list[dict]:
    records = []
    for path in sorted(metrics_dir.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line being written right now
    return records


def latest_step(metrics_dir: Path, attempt: int) -> int:
    steps = [r["step"] for r in read_records(metrics_dir) if r["event"] == "step" and r["attempt"] == attempt]
    return max(steps, default=0)


def worker_pids(agent_pid: int) -> dict[int, int]:
    """{rank: pid} of the trainer processes torchrun's agent started (its children)."""
    workers = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent != agent_pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        for item in environ:
            if item.startswith(b"RANK="):
                workers[int(item[5:])] = int(entry.name)
    return workers


def run_trainer(cli, output: Path, kill_steps: list[int], rng: random.Random) -> dict:
    """One torchrun run; SIGKILL a random rank of attempt k at step kill_steps[k]."""
    metrics_dir = output / "metrics"
    output.mkdir(parents=True)
    kills = []
    with open(output / "torchrun.stderr", "w") as stderr:  # a file: a full pipe would block torchrun
        started = time.perf_counter()
        # A session of its own: a run that overstays is ended with its workers (killpg).
        agent = subprocess.Popen(
            trainer_command(cli, output),
            env=trainer_env(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + cli.timeout
            for attempt, step in enumerate(kill_steps):
                while latest_step(metrics_dir, attempt) < step:
                    if agent.poll() is not None or time.monotonic() > deadline:
                        return {
                            "returncode": agent.poll(),
                            "error": f"attempt {attempt} never reached step {step}",
                        }
                    time.sleep(0.02)
                workers = worker_pids(agent.pid)
                rank = rng.choice(sorted(workers))
                on_disk = [int(ckpt.CHECKPOINT_PATTERN.match(p.name).group(1))
                           for p in ckpt.list_checkpoints(output / "checkpoints")]  # fmt: skip
                os.kill(workers[rank], signal.SIGKILL)
                kills.append({"attempt": attempt, "rank": rank, "step_seen": step, "time": time.time(),
                              "newest_checkpoint_on_disk": max(on_disk, default=0)})  # fmt: skip
            try:
                returncode = agent.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                return {"returncode": None, "error": f"still running after {cli.timeout} s"}
        finally:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        wall = time.perf_counter() - started
    return {
        "returncode": returncode,
        "error": None,
        "wall_s": wall,
        "kills": kills,
        "records": read_records(metrics_dir),
    }


def audit(run: dict, total: int) -> dict:
    """Restart figures and the lineage of the final model, from the records and kill times."""
    records = run["records"]
    attempts = sorted({r["attempt"] for r in records})

    def of(attempt, event):
        return [r for r in records if r["attempt"] == attempt and r["event"] == event]

    resumed = {a: (of(a, "resume") or [{"step": 0}])[0]["step"] for a in attempts}
    steps = {a: sorted({r["step"] for r in of(a, "step")}) for a in attempts}
    # A step of an attempt is in the final model unless a later attempt resumed from before it.
    lineage = []
    for a in attempts:
        cut = min((resumed[later] for later in attempts if later > a), default=total)
        lineage += [s for s in steps[a] if s <= cut]
    restarts = []
    for kill in run["kills"]:
        after = kill["attempt"] + 1
        if after not in steps:
            continue
        last_done = max(steps[kill["attempt"]], default=0)
        restarts.append({
            "attempt": after,
            "killed_rank": kill["rank"],
            "killed_at_step": kill["step_seen"],
            "last_step_done": last_done,
            "newest_checkpoint_at_kill": kill["newest_checkpoint_on_disk"],
            "resumed_from_step": resumed[after],
            "steps_lost": last_done - resumed[after],
            # Kill -> torchrun noticed, stopped the other rank, restarted both, rendezvous,
            # imports, checkpoint loaded (run_start) -> first step done.
            "kill_to_restart_s": round(min(r["time"] for r in of(after, "run_start")) - kill["time"], 3),
            "kill_to_first_step_s": round(min(r["time"] for r in of(after, "step")) - kill["time"], 3),
        })  # fmt: skip
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    return {
        "restarts": len(attempts) - 1,
        "per_restart": restarts,
        "steps_applied_twice": sorted({s for s in lineage if lineage.count(s) > 1}),
        "steps_missing": sorted(set(range(1, total + 1)) - set(lineage)),
        "checkpoint_write_s": [round(r["seconds"], 4) for r in checkpoints],
        "checkpoint_bytes": max((r["bytes"] for r in checkpoints), default=None),
    }


def max_weight_difference(output: Path, baseline: Path) -> float:
    """Largest absolute difference between the two runs' final model weights."""
    _path, state, _skipped = ckpt.load_newest(output / "checkpoints")
    _path, reference, _skipped = ckpt.load_newest(baseline / "checkpoints")
    return max(
        (state["model"][k].double() - v.double()).abs().max().item()
        for k, v in reference["model"].items()
        if v.is_floating_point()
    )


def summarise(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3), "count": len(values)}


def main(argv=None) -> int:
    cli = parse_cli(argv)
    if cli.keep_dir:
        return measure(cli, Path(cli.keep_dir))
    with tempfile.TemporaryDirectory(prefix="gpuops-faults-") as workdir:
        return measure(cli, Path(workdir))


def measure(cli, workdir: Path) -> int:
    rounds, problems = [], []
    for index in range(cli.rounds):
        seed = cli.seed + index
        rng = random.Random(seed)
        kill_steps = sorted(rng.sample(range(2, cli.total_steps - 1), cli.kills))
        runs = {}
        order = ("baseline", "chaos") if index % 2 == 0 else ("chaos", "baseline")
        for name in order:
            steps = kill_steps if name == "chaos" else []
            runs[name] = run_trainer(cli, workdir / f"round{index}" / name, steps, rng)
            run = runs[name]
            if run["error"] or run["returncode"] != 0:
                problems.append(
                    f"round {index} ({name}, seed {seed}): {run['error'] or 'exit'} {run['returncode']}"
                )
        if problems:
            break
        chaos = audit(runs["chaos"], cli.total_steps)
        baseline = audit(runs["baseline"], cli.total_steps)
        if chaos["steps_applied_twice"] or chaos["steps_missing"] or chaos["restarts"] != cli.kills:
            problems.append(f"round {index} (seed {seed}): lineage or restarts wrong: {chaos}")
        rounds.append({
            "seed": seed,
            "kill_steps": kill_steps,
            "wall_s": round(runs["chaos"]["wall_s"], 2),
            "baseline_wall_s": round(runs["baseline"]["wall_s"], 2),
            "wall_ratio": round(runs["chaos"]["wall_s"] / runs["baseline"]["wall_s"], 3),
            **chaos,
            "baseline_checkpoint_write_s": baseline["checkpoint_write_s"],
            # 0.0: the killed and restarted run trained exactly the uninterrupted one's model.
            "final_weights_max_abs_diff_vs_baseline": max_weight_difference(
                workdir / f"round{index}" / "chaos", workdir / f"round{index}" / "baseline"
            ),
        })  # fmt: skip

    per_restart = [r for one in rounds for r in one["per_restart"]]
    writes = [s for one in rounds for s in one["checkpoint_write_s"] + one["baseline_checkpoint_write_s"]]
    summary = {
        "scenario": {
            "world_size": WORLD_SIZE,
            "model": cli.model,
            "image_size": cli.image_size,
            "images": cli.images,
            "batch_size": BATCH_SIZE,
            "epochs": cli.epochs,
            "total_steps": cli.total_steps,
            "checkpoint_every_steps": cli.checkpoint_every,
            "kills_per_run": cli.kills,
            "rounds": cli.rounds,
            "device": "cpu (gloo, 1 thread/rank)",
        },  # fmt: skip
        "torch": torch.__version__,
        "restarts": sum(one["restarts"] for one in rounds),
        "steps_lost_per_restart": [r["steps_lost"] for r in per_restart],
        "steps_applied_twice": sum(len(one["steps_applied_twice"]) for one in rounds),
        "kill_to_first_step_s": summarise([r["kill_to_first_step_s"] for r in per_restart])
        if per_restart
        else None,
        "kill_to_restart_s": summarise([r["kill_to_restart_s"] for r in per_restart])
        if per_restart
        else None,
        "wall_ratio": round(statistics.median(one["wall_ratio"] for one in rounds), 3) if rounds else None,
        "checkpoint_write_s": summarise(writes) if writes else None,
        "checkpoint_bytes": rounds[0]["checkpoint_bytes"] if rounds else None,
        "rounds_detail": rounds,
        "problems": problems,
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "workdir": str(workdir) if cli.keep_dir else None,
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if cli.out:
        Path(cli.out).write_text(text + "\n")
    for problem in problems:
        print(f"faults benchmark: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time the NCCL log parser against ``grep -c NCCL`` on a generated 1024-rank job log.

Writes a log of the requested size into a temporary directory (NCCL 2.21-style INFO
lines of every rank, interleaved, between torchrun training output with the prefixes
collectors add), then runs ``grep -c NCCL`` and the parser (``parse_nccl_logs`` in a
fresh Python process) on the same file, after reading it once so both find it in the
page cache. Prints a JSON summary: wall-clock seconds of each, their ratio, the
parser's peak RSS (measured with wait4 on its process) and what it found.

    .venv/bin/python benchmarks/parse_speed/run.py --size 256MiB
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
from fleet import GPUS_PER_NODE, rank_init_lines  # noqa: E402 - the one generator of a rank's init

DEV_COLLECTIONS = REPO_ROOT / ".build" / "dev-collections"

UNITS = {"B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text):
    text = text.strip().upper()
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * UNITS[unit])
    return int(text)


def training_line(rank, step, rng):
    """A line of ordinary training output, with the prefixes collectors add now and then."""
    node = rank // GPUS_PER_NODE
    text = "[rank%d]: step %d loss %.4f lr %.2e grad_norm %.3f tokens/s %.1f" % (
        rank,
        step,
        rng.uniform(1.5, 3.0),
        rng.uniform(1e-5, 3e-4),
        rng.uniform(0.1, 2.0),
        rng.uniform(2000, 4000),
    )
    kind = rng.random()
    if kind < 0.3:
        return "[pod/trainer-worker-%d/pytorch] 2025-05-01T10:%02d:%02d.%06dZ %s" % (
            node,
            step // 60 % 60,
            step % 60,
            rng.randrange(10**6),
            text,
        )
    if kind < 0.35:
        return (
            "[rank%d]:[W501 10:00:00.000000000 ProcessGroupGloo.cpp:12] Warning: data loader is slow" % rank
        )
    return text


def generate(path, size, nranks, nccl_share, seed):
    """Write at least ``size`` bytes, ``nccl_share`` of them in NCCL lines; return counts.

    The log ends after a whole communicator round, so it may run over ``size`` by up to
    one round (about 16 MiB at 1024 ranks).
    """
    rng = random.Random(seed)
    written = nccl_bytes = other_bytes = lines = nccl_lines = 0
    step = 0
    round_index = 0
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        while written < size:
            # One communicator initialising on every rank, the ranks' lines interleaved.
            pending = [rank_init_lines(rank, nranks, round_index, rng) for rank in range(nranks)]
            cursors = [0] * nranks
            active = list(range(nranks))
            batch = []
            # A round always finishes: a log cut mid-init would report every rank as stuck.
            while active:
                rank = active[rng.randrange(len(active))]
                line = pending[rank][cursors[rank]] + "\n"
                cursors[rank] += 1
                if cursors[rank] == len(pending[rank]):
                    active.remove(rank)
                batch.append(line)
                nccl_bytes += len(line)
                nccl_lines += 1
                written += len(line)
                # Keep the share of NCCL bytes near the target with training output.
                while nccl_share < 1 and nccl_bytes > nccl_share * (nccl_bytes + other_bytes):
                    other = training_line(rng.randrange(nranks), step, rng) + "\n"
                    step += 1
                    batch.append(other)
                    other_bytes += len(other)
                    written += len(other)
                if len(batch) >= 4096:
                    handle.write("".join(batch))
                    lines += len(batch)
                    batch = []
            handle.write("".join(batch))
            lines += len(batch)
            round_index += 1
    return {
        "bytes": os.path.getsize(path),
        "lines": lines,
        "nccl_lines": nccl_lines,
        "communicator_rounds": round_index,
    }


def run_measured(command):
    """Run a command; return (wall seconds, peak RSS in MiB, stdout, CPU seconds)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    stdout = process.stdout.read()
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):  # grep -c exits 1 when it counts nothing
        raise SystemExit("%s failed with %d" % (command[0], process.returncode))
    return wall, usage.ru_maxrss / 1024.0, stdout, usage.ru_utime + usage.ru_stime


def best_of(commands, repeat):
    """Run the commands in turn ``repeat`` times; per command, the fastest run and the least CPU.

    Taking turns lets a change in the machine's load hit every command alike.
    """
    runs = [[] for _command in commands]
    for _repeat in range(repeat):
        for command, measured in zip(commands, runs, strict=True):
            measured.append(run_measured(command))
    return [(min(measured), min(run[3] for run in measured)) for measured in runs]


PARSER_SCRIPT = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import collect_sources
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import parse_nccl_logs
started = time.perf_counter()
result = parse_nccl_logs(collect_sources(paths=[sys.argv[2]]))
print(json.dumps({
    "parse_s": round(time.perf_counter() - started, 3),
    "lines": result["lines"],
    "nccl_lines": result["nccl_lines"],
    "nranks": result["nranks"],
    "init_complete_ranks": len(result["init_complete_ranks"]),
    "transport": result["transport"],
    "gdr": result["gdr"],
    "p2p_types": result["p2p_types"],
    "errors": len(result["errors"]),
}))
"""


# The least any Python parser of this log does: read it and count its lines, as the
# parser does (8 MiB chunks, bytes.count). Timed beside grep to show how much of the
# parser's time is spent before it looks at a single NCCL line.
COUNT_LINES_SCRIPT = """
import sys
lines = 0
with open(sys.argv[1], "rb") as handle:
    for chunk in iter(lambda: handle.read(8 << 20), b""):
        lines += chunk.count(b"\\n")
print(lines)
"""


def ensure_dev_collection():
    """Make ``ansible_collections.gpuops.training`` importable from this checkout, as tests do."""
    link = DEV_COLLECTIONS / "ansible_collections" / "gpuops" / "training"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(REPO_ROOT, link.parent), link)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--size", default="1GiB", help="log size, e.g. 256MiB or 1GiB (default 1GiB)")
    parser.add_argument("--ranks", type=int, default=1024, help="ranks in the job (default 1024)")
    parser.add_argument(
        "--nccl-share", type=float, default=0.5, help="share of the log's bytes in NCCL lines (default 0.5)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="time each command this many times, keep the best"
    )
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--dir", help="where to write the log (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--log", help="time this log (one kept with --keep) instead of writing a new one")
    args = parser.parse_args(argv)

    ensure_dev_collection()
    if args.log:
        log = pathlib.Path(args.log)
        args.keep = True
    else:
        workdir = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="nccl-parse-speed-"))
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / ("job-%dranks.log" % args.ranks)
    try:
        started = time.perf_counter()
        if args.log:
            generated = dict.fromkeys(("lines", "nccl_lines", "communicator_rounds"), None)
            generated["bytes"] = os.path.getsize(log)
            args.nccl_share = None  # whatever it was written with
        else:
            generated = generate(log, parse_size(args.size), args.ranks, args.nccl_share, args.seed)
        generate_s = time.perf_counter() - started
        with open(log, "rb") as handle:  # warm the page cache so neither command pays for the disk
            while handle.read(1 << 24):
                pass
        (grep, grep_cpu), (python, python_cpu), (count, count_cpu) = best_of(
            [
                ["grep", "-c", "NCCL", str(log)],
                [sys.executable, "-c", PARSER_SCRIPT, str(DEV_COLLECTIONS), str(log)],
                [sys.executable, "-c", COUNT_LINES_SCRIPT, str(log)],
            ],
            args.repeat,
        )
        found = json.loads(python[2])
        summary = {
            "log_bytes": generated["bytes"],
            "log_lines": generated["lines"],
            "nccl_lines_written": generated["nccl_lines"],
            "nccl_share": args.nccl_share,
            "ranks": args.ranks,
            "communicator_rounds": generated["communicator_rounds"],
            "generate_s": round(generate_s, 1),
            "grep_s": round(grep[0], 3),
            "grep_count": int(grep[2].strip() or 0),
            "parser_s": round(python[0], 3),
            "parser_parse_only_s": found.pop("parse_s"),
            "ratio_to_grep": round(python[0] / grep[0], 2),
            "grep_cpu_s": round(grep_cpu, 3),
            "parser_cpu_s": round(python_cpu, 3),
            "cpu_ratio_to_grep": round(python_cpu / grep_cpu, 2),
            "parser_peak_rss_mib": round(python[1], 1),
            "count_lines_s": round(count[0], 3),
            "count_lines_cpu_s": round(count_cpu, 3),
            "count_lines_ratio_to_grep": round(count[0] / grep[0], 2),
            "parser_mib_per_s": round(generated["bytes"] / (1 << 20) / python[0], 1),
            "found": found,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "load_average": [round(value, 2) for value in os.getloadavg()],
        }
        print(json.dumps(summary, indent=2))
        return 0
    finally:
        if args.log:
            pass
        elif args.keep:
            print("log kept at %s" % log, file=sys.stderr)
        elif not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())

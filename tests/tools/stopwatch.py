"""Time the parts of `make test` and print them as one table at the end.

    stopwatch.py --log FILE run NAME -- COMMAND...   run COMMAND, append "NAME seconds status"
    stopwatch.py --log FILE table                     print every part of the log, in order

`run` exits with COMMAND's status, so a recipe stays as strict as without it. The parts of
`make test` run side by side (the harness lane, the checks then the host's tests, and Molecule,
with the builds they need): the table gives each part's own wall-clock time, the CPU time of
its process tree (the command and every process reaped under it: a daemon such as a harness's
API server counts only when the part stopped and reaped it), its start offset from the first part, and the
whole run from the first start to the last end. On 2 cores the parts compete for the CPU, so
the CPU column, not the wall-clock one, says which part to make cheaper.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def run(log: str, name: str, command: list[str]) -> int:
    started = time.time()
    cpu_seconds = 0.0
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        print("stopwatch: cannot run %s: %s" % (command[0], error), file=sys.stderr)
        status = 127
    else:
        # wait4 rather than wait: the child's rusage covers it and every descendant it reaped.
        _pid, wait_status, usage = os.wait4(child.pid, 0)
        child.returncode = status = os.waitstatus_to_exitcode(wait_status)
        cpu_seconds = usage.ru_utime + usage.ru_stime
    ended = time.time()
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write("%s\t%.3f\t%.3f\t%d\t%.1f\n" % (name, started, ended, status, cpu_seconds))
    return status if status >= 0 else 128 - status


def read(log: str) -> list[tuple[str, float, float, int, float | None]]:
    """The log's rows; a row from before the CPU column has None there."""
    rows = []
    try:
        with open(log, encoding="utf-8") as stream:
            for line in stream:
                fields = line.rstrip("\n").split("\t")
                if len(fields) in (4, 5):
                    cpu = float(fields[4]) if len(fields) == 5 else None
                    rows.append((fields[0], float(fields[1]), float(fields[2]), int(fields[3]), cpu))
    except FileNotFoundError:
        pass
    return rows


def minutes(seconds: float) -> str:
    return "%d min %02d s" % divmod(round(seconds), 60)


def table(log: str) -> str:
    rows = read(log)
    if not rows:
        return "stopwatch: no part was timed (%s is empty)" % log
    first = min(row[1] for row in rows)
    last = max(row[2] for row in rows)
    width = max(len(row[0]) for row in rows)
    row_format = "%-*s  %12s  %12s  %12s  %s"
    lines = [row_format % (width, "part", "time", "cpu time", "started at", "result")]
    for name, started, ended, status, cpu in sorted(rows, key=lambda row: row[1]):
        result = "ok" if status == 0 else "FAILED (exit %d)" % status
        cpu_text = "-" if cpu is None else minutes(cpu)
        lines.append(
            row_format % (width, name, minutes(ended - started), cpu_text, minutes(started - first), result)
        )
    counted = [row[4] for row in rows if row[4] is not None]
    lines.append(
        row_format
        % (width, "whole run", minutes(last - first), minutes(sum(counted)) if counted else "-", "", "")
    )
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time the parts of make test.")
    parser.add_argument("--log", required=True)
    commands = parser.add_subparsers(dest="command", required=True)
    timed = commands.add_parser("run")
    timed.add_argument("name")
    timed.add_argument("argv", nargs=argparse.REMAINDER)
    commands.add_parser("table")
    args = parser.parse_args(argv)
    if args.command == "table":
        print(table(args.log))
        return 0
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        parser.error("run needs a command after --")
    return run(args.log, args.name, command)


if __name__ == "__main__":
    sys.exit(main())

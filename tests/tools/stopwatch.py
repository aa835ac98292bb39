"""Time the parts of `make test` and print them as one table at the end.

    stopwatch.py --log FILE run NAME -- COMMAND...   run COMMAND, append "NAME seconds status"
    stopwatch.py --log FILE table                     print every part of the log, in order

`run` exits with COMMAND's status, so a recipe stays as strict as without it. The parts of
`make test` run side by side (the harness lane, the checks then the host's tests, and Molecule,
with the builds they need): the table gives each part's own wall-clock time, its start offset
from the first part, and the whole run from the first start to the last end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def run(log: str, name: str, command: list[str]) -> int:
    started = time.time()
    try:
        status = subprocess.call(command)
    except OSError as error:
        print("stopwatch: cannot run %s: %s" % (command[0], error), file=sys.stderr)
        status = 127
    ended = time.time()
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write("%s\t%.3f\t%.3f\t%d\n" % (name, started, ended, status))
    return status


def read(log: str) -> list[tuple[str, float, float, int]]:
    rows = []
    try:
        with open(log, encoding="utf-8") as stream:
            for line in stream:
                fields = line.rstrip("\n").split("\t")
                if len(fields) == 4:
                    rows.append((fields[0], float(fields[1]), float(fields[2]), int(fields[3])))
    except FileNotFoundError:
        pass
    return rows


def minutes(seconds: float) -> str:
    return "%d min %02d s" % divmod(round(seconds), 60)


def table(log: str) -> str:
    rows = read(log)
    if not rows:
        return "stopwatch: no part was timed (%s is empty)" % log
    first = min(started for _name, started, _ended, _status in rows)
    last = max(ended for _name, _started, ended, _status in rows)
    width = max(len(name) for name, *_rest in rows)
    lines = ["%-*s  %12s  %12s  %s" % (width, "part", "time", "started at", "result")]
    for name, started, ended, status in sorted(rows, key=lambda row: row[1]):
        result = "ok" if status == 0 else "FAILED (exit %d)" % status
        lines.append(
            "%-*s  %12s  %12s  %s" % (width, name, minutes(ended - started), minutes(started - first), result)
        )
    lines.append("%-*s  %12s" % (width, "whole run", minutes(last - first)))
    return "\n".join(lines)


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

"""tests/tools/stopwatch.py: the table of parts make test prints at its end."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("stopwatch", REPO_ROOT / "tests" / "tools" / "stopwatch.py")
stopwatch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stopwatch)


def test_a_timed_part_keeps_its_commands_exit_status_and_the_table_names_every_part(tmp_path, capsys):
    log = str(tmp_path / "times.tsv")
    assert stopwatch.main(["--log", log, "run", "unit", "--", sys.executable, "-c", "pass"]) == 0
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    assert stopwatch.main(["--log", log, "run", "lane one", "--", *failing]) == 3
    assert stopwatch.main(["--log", log, "table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["part", "time", "cpu", "time", "started", "at", "result"]
    assert lines[1].startswith("unit ") and lines[1].endswith("ok")
    assert lines[2].startswith("lane one ") and lines[2].endswith("FAILED (exit 3)")
    assert lines[3].startswith("whole run")


def test_the_cpu_column_counts_the_grandchildren_a_part_waited_for(tmp_path):
    log = str(tmp_path / "times.tsv")
    # The part itself sleeps; a process it starts and waits for burns about half a second.
    burner = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    parent = (
        "import subprocess, sys, time; subprocess.run([sys.executable, '-c', %r]); time.sleep(0.2)" % burner
    )
    assert stopwatch.main(["--log", log, "run", "burn", "--", sys.executable, "-c", parent]) == 0
    (row,) = stopwatch.read(log)
    name, _started, _ended, status, cpu = row
    assert (name, status) == ("burn", 0)
    # The burner's half second of CPU is counted, though only its parent was waited for.
    assert cpu >= 0.5


def test_a_log_from_before_the_cpu_column_is_still_read(tmp_path):
    log = tmp_path / "times.tsv"
    log.write_text("unit\t100.000\t160.000\t0\nlane\t100.000\t220.000\t0\t90.0\n")
    table = stopwatch.table(str(log)).splitlines()
    assert table[1].split()[:5] == ["unit", "1", "min", "00", "s"] and " - " in table[1]
    assert "1 min 30 s" in table[2]
    assert table[3].split()[:6] == ["whole", "run", "2", "min", "00", "s"]


def test_an_empty_log_says_so(tmp_path):
    assert "no part was timed" in stopwatch.table(str(tmp_path / "none.tsv"))

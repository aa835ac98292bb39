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
    assert lines[0].split() == ["part", "time", "started", "at", "result"]
    assert lines[1].startswith("unit ") and lines[1].endswith("ok")
    assert lines[2].startswith("lane one ") and lines[2].endswith("FAILED (exit 3)")
    assert lines[3].startswith("whole run")


def test_an_empty_log_says_so(tmp_path):
    assert "no part was timed" in stopwatch.table(str(tmp_path / "none.tsv"))

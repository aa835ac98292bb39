"""make help lists every target the Makefile declares, so that none is found only by reading it."""

from __future__ import annotations

import pathlib
import re
import subprocess

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def declared_targets():
    text = (REPO_ROOT / "Makefile").read_text().replace("\\\n", " ")
    return {name for line in re.findall(r"^\.PHONY:(.*)$", text, re.MULTILINE) for name in line.split()}


def test_make_help_lists_every_declared_target():
    help_text = subprocess.run(
        ["make", "--no-print-directory", "-s", "-C", str(REPO_ROOT), "help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = set(re.findall(r"^make (\S+) +- ", help_text, re.MULTILINE))
    assert "check" in listed
    assert listed == declared_targets() - {"help"}

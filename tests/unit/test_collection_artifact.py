"""What goes into the collection's tarball and its changelog, checked before sanity does it
minutes later (ansible-test reads every file the tarball carries, and its changelog test
rejects a fragment whose entries are not plain strings)."""

from __future__ import annotations

import fnmatch
import pathlib
import subprocess
import sys

import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_ignored_top_level_directory_stays_out_of_the_tarball():
    """A run's state (.harness, .harness-molecule, runs, ...) is git-ignored and must not be
    packaged: the harness's HTTP cache alone made sanity report 30,000 problems."""
    ignored = [
        line.strip().strip("/")
        for line in (REPO_ROOT / ".gitignore").read_text().splitlines()
        if line.strip().endswith("/") and "/" not in line.strip().strip("/")
    ]
    build_ignore = set(yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["build_ignore"])
    allowed_in_tarball = {"__pycache__"}  # covered by the "*/__pycache__" pattern
    assert sorted(set(ignored) - build_ignore - allowed_in_tarball) == []
    # Every harness's directory, a helper's own included, by one pattern in both files.
    for harness in (".harness", ".harness-molecule", ".harness-simulated", ".harness-helper"):
        assert any(fnmatch.fnmatch(harness, pattern) for pattern in ignored), harness
        assert any(fnmatch.fnmatch(harness, pattern) for pattern in build_ignore), harness


def test_the_changelog_fragments_pass_antsibull_changelog_lint():
    lint = subprocess.run(
        [str(pathlib.Path(sys.executable).with_name("antsibull-changelog")), "lint"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0 and lint.stdout.strip() == "", lint.stdout + lint.stderr

"""Run the collection's playbooks the way a user does: ansible-playbook from the repository."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent


class PlaybookRun:
    def __init__(self, completed: subprocess.CompletedProcess):
        self.rc = completed.returncode
        self.output = completed.stdout

    def __repr__(self):  # shown by pytest when an assertion about the run fails
        return f"PlaybookRun(rc={self.rc}, output=...{self.output[-3000:]})"


@pytest.fixture(scope="session")
def run_playbook():
    """Return a function running a playbook with extra vars; the collection must be installed."""
    collections = REPO_ROOT / ".collections" / "ansible_collections" / "gpuops" / "training"
    if not (collections / "MANIFEST.json").exists():
        pytest.fail("the collection is not installed into .collections: run `make collection` first")

    def run(
        playbook: str, inventory: str, extra_vars: dict | None = None, timeout: int = 1200
    ) -> PlaybookRun:
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        command = [str(BIN / "ansible-playbook"), "-i", inventory, playbook]
        if extra_vars:
            command += ["--extra-vars", json.dumps(extra_vars)]
        completed = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        return PlaybookRun(completed)

    return run

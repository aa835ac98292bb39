"""Run the collection's playbooks the way a user does: ansible-playbook from the repository."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from figures import TALLY  # noqa: E402
from playbook_runner import REPO_ROOT, ansible_playbook  # noqa: E402


@pytest.fixture(scope="session")
def run_playbook():
    """Return a function running a playbook with extra vars against the installed collection."""
    collections = REPO_ROOT / ".collections"
    if not (collections / "ansible_collections" / "gpuops" / "training" / "MANIFEST.json").exists():
        pytest.fail("the collection is not installed into .collections: run `make collection` first")

    def run(
        playbook: str,
        inventory: str,
        extra_vars: dict | None = None,
        timeout: int = 1200,
        extra_env: dict[str, str] | None = None,
    ):
        args = ["-i", inventory, playbook]
        if extra_vars:
            args += ["--extra-vars", json.dumps(extra_vars)]
        return ansible_playbook(*args, collections_path=collections, timeout=timeout, extra_env=extra_env)

    return run


def pytest_terminal_summary(terminalreporter):
    """The security figures: playbook runs searched for the test secrets, and leaks found."""
    if TALLY["playbook runs searched for secrets"]:
        terminalreporter.write_sep("-", "secret figures")
        terminalreporter.write_line(
            "playbook runs at -vvv searched: %d, secret searches: %d, run files readable by others "
            "searched: %d, secrets leaked: %d"
            % (
                TALLY["playbook runs searched for secrets"],
                TALLY["secret searches"],
                TALLY["shared run files searched"],
                TALLY["secrets leaked"],
            )
        )

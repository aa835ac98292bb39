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


# What marks a test's tier (pyproject.toml) without a mark in every module: a test that uses
# the harness needs a real control plane (slow); one that uses a real two-rank torchrun run of
# the trainer is distributed.
TIER_FIXTURES = {"k8s_cluster": pytest.mark.slow, "trainer_rank_logs": pytest.mark.distributed}


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture in set(getattr(item, "fixturenames", ())) & TIER_FIXTURES.keys():
            item.add_marker(TIER_FIXTURES[fixture])


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

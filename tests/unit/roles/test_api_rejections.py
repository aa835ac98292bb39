"""A rejected object is reported the same way by every role: the server's own message, read
by the collection's k8s_api_error_message filter (or the k8s_apply_report action, which names
every rejected object of one apply call with it), not parsed out of the error in Jinja."""

from __future__ import annotations

import pathlib

import pytest

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
TASK_FILES = sorted(ROLES.glob("*/tasks/*.yml"))


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda path: str(path.relative_to(ROLES)))
def test_no_task_parses_the_api_servers_error_itself(path):
    text = path.read_text()
    assert "regex_search('[{]" not in text and "| from_json).message" not in text


def test_the_roles_read_the_servers_message_with_the_filter_or_the_report():
    readers = ("gpuops.training.k8s_api_error_message", "gpuops.training.k8s_apply_report")
    users = [path for path in TASK_FILES if any(reader in path.read_text() for reader in readers)]
    assert {path.parent.parent.name for path in users} >= {
        "secondary_networks",
        "training_namespace",
        "training_job",
    }

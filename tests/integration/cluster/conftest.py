"""Fixtures for the cluster roles' tests against the real test control plane.

The harness fixtures come from tests/harness/pytest_plugin.py (imported, not listed in
`pytest_plugins`, which pytest refuses below the top-level conftest). Playbooks run with
this working tree's roles and plugins: .build/dev-collections (made by tests/conftest.py)
links ansible_collections/gpuops/training to the repository.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))

from pytest_plugin import k8s_cluster, k8s_namespace  # noqa: E402

__all__ = ["k8s_cluster", "k8s_namespace", "run_role"]

BIN = pathlib.Path(sys.executable).parent
DEV_COLLECTIONS = REPO_ROOT / ".build" / "dev-collections"


class RoleRun:
    def __init__(self, completed: subprocess.CompletedProcess):
        self.rc = completed.returncode
        self.output = completed.stdout

    def __repr__(self):  # shown by pytest when an assertion about the run fails
        return f"RoleRun(rc={self.rc}, output=...{self.output[-4000:]})"


@pytest.fixture(scope="session")
def run_role():
    """Run one role of this working tree on localhost with variables; returns a RoleRun."""
    if not (DEV_COLLECTIONS / "ansible_collections" / "gpuops" / "training").exists():
        pytest.fail("tests/conftest.py should have created .build/dev-collections")

    def run(role: str, role_vars: dict, *options: str, timeout: int = 300) -> RoleRun:
        play = [
            {
                "name": "Run " + role,
                "hosts": "localhost",
                "gather_facts": False,
                "roles": [{"role": "gpuops.training." + role}],
            }
        ]
        with tempfile.TemporaryDirectory(prefix="gpuops-role-") as workdir:
            playbook = pathlib.Path(workdir) / "play.yml"
            playbook.write_text(yaml.safe_dump(play))
            variables = pathlib.Path(workdir) / "vars.yml"
            variables.write_text(yaml.safe_dump(role_vars))
            env = dict(
                os.environ,
                ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
                ANSIBLE_COLLECTIONS_PATH=str(DEV_COLLECTIONS),
                ANSIBLE_NOCOLOR="1",
                ANSIBLE_FORCE_COLOR="0",
                PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            )
            command = [
                str(BIN / "ansible-playbook"),
                "-i",
                "localhost,",
                "-c",
                "local",
                "-e",
                "ansible_python_interpreter=" + sys.executable,
                "-e",
                "@" + str(variables),
                *options,
                str(playbook),
            ]
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
        return RoleRun(completed)

    return run

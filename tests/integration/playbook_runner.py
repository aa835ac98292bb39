"""Run ansible-playbook the way a user does, from the repository, and keep its output."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent


class PlaybookRun:
    def __init__(self, completed: subprocess.CompletedProcess):
        self.rc = completed.returncode
        self.output = completed.stdout

    def __repr__(self):  # shown by pytest when an assertion about the run fails
        return f"PlaybookRun(rc={self.rc}, output=...{self.output[-4000:]})"

    def reported(self, key: str) -> list[str]:
        """Every entry of the lists the run printed under KEY, in order: for example the
        ``changed_objects`` of the roles' gpuops.training.k8s_apply_report tasks."""
        entries = []
        for match in re.finditer(r"^( *)%s:\n((?:\1- .*\n)*)" % re.escape(key), self.output, re.MULTILINE):
            entries += [line.strip()[2:] for line in match.group(2).splitlines()]
        return entries


def ansible_playbook(
    *args: str, collections_path: pathlib.Path, timeout: int, extra_env: dict[str, str] | None = None
) -> PlaybookRun:
    """Run ``ansible-playbook ARGS`` from the repository root with the given collections path
    (and EXTRA_ENV added to this process's environment)."""
    env = dict(
        os.environ,
        **(extra_env or {}),
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(collections_path),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(completed)


# This working tree as a collection (tests/conftest.py creates the link).
DEV_COLLECTIONS = REPO_ROOT / ".build" / "dev-collections"


def run_role_locally(role: str, variables: dict, *options: str, timeout: int = 300) -> PlaybookRun:
    """Run one role of this working tree on localhost (local connection) with variables."""
    if not (DEV_COLLECTIONS / "ansible_collections" / "gpuops" / "training").exists():
        raise RuntimeError("tests/conftest.py should have created .build/dev-collections")
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
        playbook.write_text(json.dumps(play))  # JSON is YAML
        variables_file = pathlib.Path(workdir) / "vars.json"
        variables_file.write_text(json.dumps(dict(variables, ansible_python_interpreter=sys.executable)))
        return ansible_playbook(
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "@" + str(variables_file),
            *options,
            str(playbook),
            collections_path=DEV_COLLECTIONS,
            timeout=timeout,
        )

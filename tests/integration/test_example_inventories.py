"""Every example inventory parses, sets only variables the roles declare, and every playbook
passes --syntax-check against it: an example that drifted from the roles fails here.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
INVENTORIES = sorted(path.name for path in (REPO_ROOT / "inventories").iterdir() if path.is_dir())
PLAYBOOKS = sorted(path.name for path in (REPO_ROOT / "playbooks").glob("*.yml"))
ROLES = sorted(
    path.name for path in (REPO_ROOT / "roles").iterdir() if (path / "meta" / "argument_specs.yml").exists()
)
# Variables the examples may set that belong to Ansible or the playbooks, not to a role.
NOT_ROLE_VARIABLES = ("ansible_", "training_hosts")


def env():
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"),
        ANSIBLE_NOCOLOR="1",
        PATH="%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")),
    )


def declared_options():
    options = {}
    for role in ROLES:
        spec = yaml.safe_load((REPO_ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
        for name in spec["argument_specs"]["main"]["options"]:
            options[name] = role
    return options


def test_there_are_examples_for_each_kind_of_user():
    assert {"local", "baremetal-ssh"} <= set(INVENTORIES)


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_the_inventory_parses_and_sets_only_declared_role_variables(inventory):
    result = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", "inventories/" + inventory, "--list"],
        cwd=REPO_ROOT, env=env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "[WARNING]" not in result.stderr, result.stderr
    listed = json.loads(result.stdout)
    variables = set()
    for host_vars in listed["_meta"]["hostvars"].values():
        variables |= set(host_vars)
    options = declared_options()
    prefixes = tuple(sorted({role + "_" for role in ROLES}))
    unknown = sorted(
        name
        for name in variables
        if name.startswith(prefixes) and name not in options and not name.startswith(NOT_ROLE_VARIABLES)
    )
    # training_job_* host variables read per node by the ssh launcher.
    per_node = {"training_job_socket_ifname", "training_job_node_addr", "training_job_rdzv_host"}
    assert set(unknown) <= per_node, "variables no role declares: %s" % unknown


@pytest.mark.parametrize("playbook", PLAYBOOKS)
@pytest.mark.parametrize("inventory", INVENTORIES)
def test_every_playbook_passes_syntax_check(inventory, playbook):
    argv = [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "inventories/" + inventory]
    result = subprocess.run(
        [*argv, "playbooks/" + playbook],
        cwd=REPO_ROOT, env=env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr

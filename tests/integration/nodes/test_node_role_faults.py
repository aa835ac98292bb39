"""The node roles when the node is not as they left it (issue: reliability under faults).

A drop-in a person edited by hand is shown in --diff and replaced; a malformed file of
the same name does not crash the role; `state: absent` leaves the node as it was before
the role first ran, the node's own file included. The roles run through ansible-playbook
on this machine against a temporary directory (tests/integration/playbook_runner.py).
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from playbook_runner import run_role_locally  # noqa: E402

KEPT_SUFFIX = ".gpuops-original"


class NodeRole:
    def __init__(self, name, dir_variable, file_name, managed_line, hand_edited_line, kept_apart=False):
        self.name, self.dir_variable, self.file_name = name, dir_variable, file_name
        self.managed_line = managed_line  # a line of the role's file a person might edit,
        self.hand_edited_line = hand_edited_line  # and what they made of it
        # CRI-O reads every file of its drop-in directory: the node's own file is kept in a
        # directory beside it, not next to the role's file.
        self.kept_apart = kept_apart

    def kept(self, directory):
        """Where the node's own file of that name is kept while the role's replaces it."""
        if self.kept_apart:
            return directory.parent / (directory.name + ".gpuops-originals") / (self.file_name + KEPT_SUFFIX)
        return directory / (self.file_name + KEPT_SUFFIX)

    def run(self, directory, *options, **variables):
        run = run_role_locally(self.name, {self.dir_variable: str(directory), **variables}, *options)
        return run.rc, run.output


ROLES = [
    NodeRole(
        "crio_limits",
        "crio_limits_dropin_dir",
        "99-ulimits.conf",
        '\t"memlock=-1:-1",',
        '\t"memlock=64:64",',
        kept_apart=True,
    ),
    NodeRole(
        "containerd_limits",
        "containerd_limits_dropin_dir",
        "99-gpuops-limits.conf",
        "LimitMEMLOCK=infinity",
        "LimitMEMLOCK=65536",
    ),
    NodeRole(
        "host_limits",
        "host_limits_dir",
        "90-gpuops-training.conf",
        "root  -  memlock  unlimited",
        "root - memlock 64",
    ),
]
ROLE_IDS = [role.name for role in ROLES]


def snapshot(directory):
    """Every file of the directory: name -> (bytes, mode)."""
    return {
        path.name: (path.read_bytes(), path.stat().st_mode & 0o7777) for path in sorted(directory.iterdir())
    }


def changed(output):
    return int(output.rsplit("changed=", 1)[1].split()[0])


@pytest.fixture
def node_dir(tmp_path):
    directory = tmp_path / "conf.d"
    directory.mkdir()
    (directory / "10-site.conf").write_text("# the site's own file, never touched\n")
    return directory


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_a_hand_edited_file_is_shown_in_diff_and_replaced_without_being_kept(node_dir, role):
    rc, output = role.run(node_dir)
    assert rc == 0, output
    target = node_dir / role.file_name
    written = target.read_text()
    assert role.managed_line in written.splitlines(), written
    hand_edited = written.replace(role.managed_line, role.hand_edited_line, 1)
    assert hand_edited != written
    target.write_text(hand_edited)

    rc, output = role.run(node_dir, "--check", "--diff")
    assert rc == 0, output
    assert "-" + role.hand_edited_line in output, output
    assert "+" + role.managed_line in output, output
    assert target.read_text() == hand_edited  # check mode wrote nothing

    rc, output = role.run(node_dir)
    assert rc == 0 and changed(output) == 1, output
    assert target.read_text() == written
    # The hand-edited file was the role's own (it carries the marker): no copy is kept of it.
    assert not role.kept(node_dir).exists()


FOREIGN_FILE = b"# the node's own settings\n[crio.runtime]\npids_limit = 4096\n"
MALFORMED_FILES = {
    "binary-garbage": b"\x00\xff\xfe not toml [[[ = \n\x80\x81",
    "empty-file": b"",
    "truncated-toml": b"[crio.runtime\ndefault_ulimits = [\n",
}


# Every role with the node's own file; the malformed ones with one role (the code is shared).
@pytest.mark.parametrize(
    ("role", "original"),
    [pytest.param(role, FOREIGN_FILE, id=role.name + "-foreign-file") for role in ROLES]
    + [
        pytest.param(ROLES[0], content, id="crio_limits-" + name) for name, content in MALFORMED_FILES.items()
    ],
)
def test_state_absent_puts_back_the_file_the_node_had(node_dir, role, original):
    target = node_dir / role.file_name
    target.write_bytes(original)
    os.chmod(target, 0o640)
    before = snapshot(node_dir)

    rc, output = role.run(node_dir)
    assert rc == 0, output  # a malformed file of that name does not crash the role
    assert role.managed_line in target.read_text().splitlines()
    kept = role.kept(node_dir)
    assert (kept.read_bytes(), kept.stat().st_mode & 0o7777) == (original, 0o640)
    # Nothing but the role's file is in the directory the program reads.
    assert sorted(path.name for path in node_dir.iterdir()) == sorted(
        ["10-site.conf", role.file_name] + ([] if role.kept_apart else [kept.name])
    )

    rc, output = role.run(node_dir)
    assert rc == 0 and changed(output) == 0, output  # the copy is made once

    rc, output = role.run(node_dir, "--check", **{role.name + "_state": "absent"})
    assert rc == 0 and changed(output) >= 1, output
    assert kept.exists() and role.managed_line in target.read_text()

    rc, output = role.run(node_dir, **{role.name + "_state": "absent"})
    assert rc == 0 and changed(output) >= 1, output
    assert snapshot(node_dir) == before
    assert not kept.parent.exists() or kept.parent == node_dir  # the keeping directory is gone

    rc, output = role.run(node_dir, **{role.name + "_state": "absent"})
    assert rc == 0 and changed(output) == 0, output


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_present_then_absent_on_a_node_without_the_file_leaves_it_as_it_was(node_dir, role):
    before = snapshot(node_dir)
    rc, output = role.run(node_dir)
    assert rc == 0 and (node_dir / role.file_name).exists(), output
    assert not role.kept(node_dir).exists()
    rc, output = role.run(node_dir, **{role.name + "_state": "absent"})
    assert rc == 0, output
    assert snapshot(node_dir) == before


@pytest.mark.parametrize("role", ROLES, ids=ROLE_IDS)
def test_a_directory_where_the_file_belongs_fails_naming_it_and_changes_nothing(node_dir, role):
    (node_dir / role.file_name).mkdir()
    before = snapshot_names = sorted(path.name for path in node_dir.iterdir())
    rc, output = role.run(node_dir)
    assert rc == 2, output
    assert "%s is not a regular file" % (node_dir / role.file_name) in output, output
    assert sorted(path.name for path in node_dir.iterdir()) == before == snapshot_names
    assert list((node_dir / role.file_name).iterdir()) == []

"""The node roles run by ansible-playbook on this machine, against files in a temp dir.

Bad limits must stop the role in its first task, naming the entry, before any file
exists; check mode with --diff must show the change and write nothing. The roles and
plugins come from the working tree (tests/conftest.py links it as a collection).
"""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from playbook_runner import run_role_locally  # noqa: E402


def run_role(role, variables, *options):
    """Run ROLE on this machine; returns its exit code and output."""
    run = run_role_locally(role, variables, *options)
    return run.rc, run.output


ROLE_TARGETS = {
    "crio_limits": lambda out: {"crio_limits_dropin_dir": str(out)},
    "containerd_limits": lambda out: {"containerd_limits_dropin_dir": str(out)},
    "host_limits": lambda out: {"host_limits_dir": str(out)},
}


@pytest.mark.parametrize(
    ("role", "bad", "named"),
    [
        ("crio_limits", {"crio_limits_ulimits": ["memlock=-1", "nofile=65536:65536"]}, ["'memlock=-1'"]),
        (
            "crio_limits",
            {"crio_limits_ulimits": ["noproc=1048576:1048576"]},
            ["'noproc=1048576:1048576'", "nproc"],
        ),
        ("crio_limits", {"crio_limits_ulimits": ["nofile=-5:-5"]}, ["'nofile=-5:-5'", "negative value -5"]),
        (
            "containerd_limits",
            {"containerd_limits_ulimits": ["memlock=-1", "stack=1:0"]},
            ["'memlock=-1'", "'stack=1:0'"],
        ),
        (
            "host_limits",
            {"host_limits_entries": [{"domain": "*", "type": "-", "item": "memlock", "value": -7}]},
            ["negative value -7", "item: memlock"],
        ),
    ],
)
def test_bad_limits_fail_in_the_first_task_and_change_nothing(tmp_path, role, bad, named):
    out = tmp_path / "out"
    rc, output = run_role(role, {**ROLE_TARGETS[role](out), **bad})
    assert rc == 2, output
    assert "changed=0" in output and "failed=1" in output, output
    # Only argument validation and the failing check ran: ok=1 is the argument spec task.
    assert "ok=1 " in output, output
    for word in named:
        assert word in output, output
    assert not out.exists()


def test_check_mode_shows_the_diff_and_writes_nothing_then_the_real_run_is_idempotent(tmp_path):
    out = tmp_path / "crio.conf.d"
    variables = {"crio_limits_dropin_dir": str(out)}
    rc, output = run_role("crio_limits", variables, "--check", "--diff")
    assert rc == 0, output
    assert '+\t"memlock=-1:-1",' in output
    assert "changed=2" in output  # the directory and the drop-in
    assert not out.exists()

    rc, output = run_role("crio_limits", variables)
    assert rc == 0 and "changed=2" in output, output
    assert (out / "99-ulimits.conf").read_text().count("memlock=-1:-1") == 1
    # No CRI-O here: the handler says so instead of restarting.
    assert "crio.service does not exist on this node" in output

    rc, output = run_role("crio_limits", variables)
    assert rc == 0 and "changed=0" in output, output

    rc, output = run_role("crio_limits", {**variables, "crio_limits_state": "absent"}, "--check")
    assert rc == 0 and "changed=1" in output, output
    assert (out / "99-ulimits.conf").exists()

    rc, output = run_role("crio_limits", {**variables, "crio_limits_state": "absent"})
    assert rc == 0 and "changed=1" in output, output
    assert not (out / "99-ulimits.conf").exists()


def test_host_limits_check_mode_and_run(tmp_path):
    out = tmp_path / "limits.d"
    out.mkdir()
    rc, output = run_role("host_limits", {"host_limits_dir": str(out)}, "--check", "--diff")
    assert rc == 0 and "changed=1" in output, output
    assert "+root  -  memlock  unlimited" in output
    assert list(out.iterdir()) == []
    rc, output = run_role("host_limits", {"host_limits_dir": str(out)})
    assert rc == 0, output
    assert (out / "90-gpuops-training.conf").stat().st_mode & 0o777 == 0o644


def test_crio_limits_without_crictl_fails_before_any_change_when_it_would_prove(tmp_path):
    out = tmp_path / "crio.conf.d"
    variables = {
        "crio_limits_dropin_dir": str(out),
        # A restart command makes the role restart CRI-O, and so prove the new limits with crictl.
        "crio_limits_restart_command": ["true"],
        "crio_limits_crictl": str(tmp_path / "no-crictl"),
    }
    rc, output = run_role("crio_limits", variables)
    assert rc == 2, output
    assert "changed=0" in output, output
    assert "crio_limits_crictl (%s) does not run on this node" % (tmp_path / "no-crictl") in output, output
    assert "or set crio_limits_verify to false" in output, output
    assert not out.exists()

    # Without the proof the drop-in is written and the command restarts CRI-O.
    rc, output = run_role("crio_limits", {**variables, "crio_limits_verify": False})
    assert rc == 0 and "changed=3" in output, output  # the directory, the drop-in, the restart
    assert "TASK [gpuops.training.crio_limits : Restart CRI-O with crio_limits_restart_command]" in output
    assert (out / "99-ulimits.conf").exists()

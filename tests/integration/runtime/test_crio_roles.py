"""crio_limits and preflight against a real CRI-O (tests/integration/runtime/conftest.py).

The roles run through ansible-playbook on this machine (local connection) as on a node:
crio_limits writes the drop-in into the test CRI-O's drop-in directory and restarts it with
its restart command (crio_service.py, what systemd is on a real node); preflight reads the
same CRI-O. What a new container gets is read by the tests themselves too, through crictl
and /proc, not only through the collection's probe.

The figures come from the test CRI-O: its daemon at 64 KiB soft memlock and, as hard limit,
the host's (`ceiling`), which runc cannot exceed without CAP_SYS_RESOURCE.
"""

from __future__ import annotations

import glob
import os
import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from playbook_runner import run_role_locally  # noqa: E402

pytestmark = pytest.mark.slow

RLIMIT_REASON = "error setting rlimit type 8: operation not permitted"
CRIO_REMEDY = "apply gpuops.training.crio_limits (or machineconfig_limits on OpenShift)"
NODE_OWN_FILE = b"# the node's own settings\n[crio.runtime]\npids_limit = 4096\n"


def changed(output):
    return int(output.rsplit("changed=", 1)[1].split()[0])


def files_of(*directories):
    """Every file under the directories: path -> (bytes, mode)."""
    found = {}
    for directory in directories:
        for path in sorted(pathlib.Path(directory).rglob("*")):
            if path.is_file():
                found[str(path)] = (path.read_bytes(), path.stat().st_mode & 0o7777)
    return found


def snapshot_dirs():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "gpuops-crio-limits-*")))


def run_crio_limits(crio, *options, **variables):
    return run_role_locally("crio_limits", crio.role_variables(**variables), *options, timeout=600)


def test_crio_limits_gives_new_containers_the_hosts_hard_memlock_and_a_second_run_changes_nothing(fresh_crio):
    crio = fresh_crio
    ceiling = crio.ceiling
    daemon_before = crio.daemon_pid()
    assert crio.fresh_container_limits(0)["memlock"] == ("65536", str(ceiling))

    run = run_crio_limits(crio, crio_limits_ulimits=["memlock=%d:%d" % (ceiling, ceiling)])
    assert run.rc == 0, run
    assert changed(run.output) == 2, run  # the drop-in and the restart
    assert "as uid 0: memlock %d:%d" % (ceiling, ceiling) in run.output, run
    assert "as uid 65534: memlock %d:%d" % (ceiling, ceiling) in run.output, run
    assert crio.daemon_pid() != daemon_before  # restarted through crio_limits_restart_command
    # Read by the test itself: containers get the drop-in's limit while the daemon keeps its own.
    for uid in (0, 65534):
        assert crio.fresh_container_limits(uid)["memlock"] == (str(ceiling), str(ceiling))
    assert crio.daemon_limits()["memlock"] == ("65536", str(ceiling))

    daemon_after = crio.daemon_pid()
    run = run_crio_limits(crio, crio_limits_ulimits=["memlock=%d:%d" % (ceiling, ceiling)])
    assert run.rc == 0 and changed(run.output) == 0, run
    assert crio.daemon_pid() == daemon_after  # no restart


@pytest.mark.parametrize("previous", ["the-roles-own-drop-in", "no-drop-in", "the-nodes-own-file"])
def test_a_limit_above_the_hosts_hard_limit_is_taken_back_and_named(fresh_crio, previous):
    crio = fresh_crio
    ceiling = crio.ceiling
    dropin = crio.runtime.config_dir / "99-ulimits.conf"
    keep_dir = crio.runtime.originals_dir
    if previous == "the-roles-own-drop-in":
        run = run_crio_limits(crio, crio_limits_ulimits=["memlock=%d:%d" % (ceiling, ceiling)])
        assert run.rc == 0, run
        memlock_before = (str(ceiling), str(ceiling))
    elif previous == "the-nodes-own-file":
        dropin.write_bytes(NODE_OWN_FILE)
        dropin.chmod(0o640)
        crio.service("restart")
        memlock_before = ("65536", str(ceiling))
    else:
        memlock_before = ("65536", str(ceiling))
    before = files_of(crio.runtime.config_dir, keep_dir)
    temporary_before = snapshot_dirs()

    run = run_crio_limits(crio, crio_limits_ulimits=["memlock=-1:-1"])

    assert run.rc == 2, run
    # The limit, the host's hard limit and CRI-O's reason, in the failure.
    named = "memlock=-1:-1 cannot be applied: this host's hard memlock limit is %d bytes" % ceiling
    assert named in run.output, run
    assert RLIMIT_REASON in run.output, run
    assert (
        "the previous drop-in is back" if previous != "no-drop-in" else "it is removed (the node had none)"
    ) in run.output, run
    assert "and creates containers again" in run.output, run
    # Nothing half applied, nothing lost: the files are as they were, byte for byte and mode.
    assert files_of(crio.runtime.config_dir, keep_dir) == before
    assert not keep_dir.exists()
    assert snapshot_dirs() == temporary_before
    # CRI-O runs the previous configuration and creates containers with it.
    assert crio.fresh_container_limits(65534)["memlock"] == memlock_before


def test_preflight_judges_crio_by_what_a_fresh_container_gets(fresh_crio):
    crio = fresh_crio
    ceiling = crio.ceiling
    needed_kib = ceiling // 1024
    variables = crio.preflight_variables(
        preflight_min_memlock_kib=str(needed_kib), preflight_login_user="", preflight_set_stats=False
    )

    # No drop-in: containers inherit the daemon's 64 KiB, as root and as any other uid.
    run = run_role_locally("preflight", variables, timeout=600)
    assert run.rc == 2, run
    need = "need %d KiB: %s" % (needed_kib, CRIO_REMEDY)
    for line in (
        "memlock of crio's containers is 64 KiB (the daemon's own, inherited: default_ulimits is empty), "
        + need,
        "memlock of a fresh crio container as uid 0 is 64 KiB, " + need,
        "memlock of a fresh crio container as uid 65534 is 64 KiB, " + need,
    ):
        assert line in run.output, run

    # With the drop-in the daemon keeps 64 KiB, but every new container gets the ceiling:
    # judged by default_ulimits and the fresh containers, the node passes.
    run = run_crio_limits(crio, crio_limits_ulimits=["memlock=%d:%d" % (ceiling, ceiling)])
    assert run.rc == 0, run
    assert crio.daemon_limits()["memlock"] == ("65536", str(ceiling))
    run = run_role_locally("preflight", variables, "-v", timeout=600)
    assert run.rc == 0, run
    assert "judged_by: default_ulimits in " in run.output, run
    for check in ("memlock_crio", "memlock_crio_container_uid_0", "memlock_crio_container_uid_65534"):
        assert "name: %s\n" % check in run.output, run

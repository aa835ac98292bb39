"""cri_probe.py: the daemon behind an endpoint, crictl's words, and the judgement of limits."""

# ruff: noqa: E501 - the expected lines are compared whole, as users read them.

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.cri_probe import (
    ProbeError,
    container_memlock,
    crictl_reason,
    explain_unapplied,
    find_crictl,
    has_capability,
    images_named_pause,
    judge_expected,
    listening_socket_inodes,
    mismatches,
    probe_limits,
    rlimit_named,
    socket_path,
    summary_lines,
)
from ansible_collections.gpuops.training.plugins.module_utils.ulimits import parse_runtime_ulimit

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "cri"
REASON = (
    "creating container: rpc error: code = Unknown desc = container create failed: "
    "error setting rlimit type 8: operation not permitted"
)
DAEMON = {
    "pid": 812,
    "cap_sys_resource": False,
    "limits": {
        "memlock": {"soft": 65536, "hard": 8388608, "unit": "bytes"},
        "nproc": {"soft": 96365, "hard": 96365, "unit": "processes"},
        "nofile": {"soft": 1048576, "hard": 1048576, "unit": "files"},
    },
}


def limits(memlock=(8388608, 8388608), nofile=(65536, 65536)):
    return {
        "memlock": {"soft": memlock[0], "hard": memlock[1], "unit": "bytes"},
        "nofile": {"soft": nofile[0], "hard": nofile[1], "unit": "files"},
    }


def test_socket_paths_of_endpoints():
    assert socket_path("unix:///var/run/crio/crio.sock") == "/var/run/crio/crio.sock"
    assert socket_path("/run/crio.sock") == "/run/crio.sock"
    assert socket_path("tcp://127.0.0.1:1") is None
    assert socket_path("unix://") is None


def test_only_listening_sockets_bound_to_the_path_count(tmp_path):
    path = tmp_path / "crio.sock"
    table = (
        "Num       RefCount Protocol Flags    Type St Inode Path\n"
        "0000: 00000002 00000000 00010000 0001 01 4242 %s\n"
        "0000: 00000003 00000000 00000000 0001 03 5151 %s\n"  # a connection, not the listener
        "0000: 00000002 00000000 00010000 0001 01 6161 /run/other.sock\n"
        "0000: 00000002 00000000 00010000 0001 01 7171\n"  # an unnamed socket
        "garbage\n" % (path, path)
    )
    assert listening_socket_inodes(table, str(path)) == {"4242"}


def test_cap_sys_resource_is_bit_24_of_capeff():
    assert has_capability("CapEff:\t000001ffffffffff\n", 24) is True
    assert has_capability("Name: crio\nCapEff:\t000001fffeffffff\n", 24) is False
    assert has_capability("", 24) is False


# crictl's stderr when runc cannot set an rlimit: CRI-O v1.36.3, runc 1.1.5, crictl v1.36.0
# with memlock=-1:-1 on a host whose root lacks CAP_SYS_RESOURCE (recorded on this project's machines).
CRICTL_RLIMIT_STDERR = (FIXTURES / "create-rlimit-memlock.stderr").read_text()


def test_the_runtimes_words_lose_the_log_lines_quoted_in_them():
    assert crictl_reason(CRICTL_RLIMIT_STDERR) == (
        "creating container: rpc error: code = Unknown desc = container create failed: runc create failed: "
        "unable to start container process: error during container init: error setting rlimits for ready "
        "process: error setting rlimit type 8: operation not permitted"
    )


def test_crictls_fatal_line_gives_the_runtimes_words():
    stderr = 'time="2026-11-25T10:00:00Z" level=fatal msg="%s"\n' % REASON.replace('"', '\\"')
    assert crictl_reason(stderr) == REASON
    assert crictl_reason('level=fatal msg="say \\"no\\""') == 'say "no"'
    assert crictl_reason("  plain text\n") == "plain text"


def test_the_rlimit_a_runtime_error_names():
    assert rlimit_named(REASON) == "memlock"
    assert rlimit_named("error setting rlimit type 6: operation not permitted") == "nproc"
    assert rlimit_named("error setting rlimit type 99") == ""
    assert rlimit_named("no such image") == ""


def test_a_limit_above_the_daemons_hard_limit_is_named_with_the_ceiling_and_the_reason():
    expected = [parse_runtime_ulimit("nproc=1048576:1048576"), parse_runtime_ulimit("memlock=-1:-1")]
    lines = explain_unapplied(expected, REASON, DAEMON)
    # The limit the runtime named comes first.
    assert lines == [
        "memlock=-1:-1 cannot be applied: this host's hard memlock limit is 8388608 bytes, the CRI-O daemon's, "
        "and runc cannot raise a limit above it without CAP_SYS_RESOURCE, which the daemon lacks here; set "
        "memlock=8388608:8388608 or lower, or raise the hard limit CRI-O starts with (LimitMEMLOCK= in its systemd unit)",
        "nproc=1048576:1048576 cannot be applied: this host's hard nproc limit is 96365 processes, the CRI-O "
        "daemon's, and runc cannot raise a limit above it without CAP_SYS_RESOURCE, which the daemon lacks here; "
        "set nproc=96365:96365 or lower, or raise the hard limit CRI-O starts with (LimitNPROC= in its systemd unit)",
        "CRI-O said: " + REASON,
    ]


def test_a_refusal_with_no_limit_above_the_ceiling_keeps_the_runtimes_words():
    expected = [parse_runtime_ulimit("memlock=65536:65536")]
    assert explain_unapplied(expected, REASON, DAEMON) == [
        "the runtime could not set memlock",
        "CRI-O said: " + REASON,
    ]
    assert explain_unapplied(expected, "cannot set hugetlb limit", {}) == [
        "CRI-O said: cannot set hugetlb limit"
    ]


def test_mismatches_name_the_limit_the_uid_and_both_values():
    expected = [parse_runtime_ulimit("memlock=-1:-1"), parse_runtime_ulimit("nofile=65536:65536")]
    containers = [
        {"uid": 0, "limits": limits(memlock=("unlimited", "unlimited"))},
        {"uid": 65534, "limits": {"memlock": {"soft": 65536, "hard": 8388608, "unit": "bytes"}}},
    ]
    assert mismatches(expected, containers) == [
        "memlock: configured unlimited:unlimited, a new container as uid 65534 gets 65536:8388608",
        "nofile: configured nofile=65536:65536, but /proc/PID/limits of the container as uid 65534 has no nofile line",
    ]
    assert summary_lines(expected, containers[:1]) == [
        "as uid 0: memlock unlimited:unlimited, nofile 65536:65536"
    ]
    assert summary_lines([], containers[1:]) == ["as uid 65534: memlock 65536:8388608"]


def facts(**changes):
    base = {
        "answering": True,
        "error": "",
        "reason": "",
        "daemon": DAEMON,
        "default_ulimits": [],
        "default_ulimits_source": "",
        "containers": [],
    }
    base.update(changes)
    return base


def test_the_memlock_a_container_gets_comes_from_default_ulimits_or_else_the_daemon():
    assert container_memlock(
        facts(default_ulimits=["memlock=-1:-1"], default_ulimits_source="/d/99.conf")
    ) == (
        {"soft": "unlimited", "hard": "unlimited"},
        "default_ulimits in /d/99.conf",
    )
    # go-units' one-value form sets soft and hard.
    assert container_memlock(facts(default_ulimits=["memlock=1048576"], default_ulimits_source="/m"))[0] == {
        "soft": 1024,
        "hard": 1024,
    }
    assert container_memlock(facts()) == (
        {"soft": 64, "hard": 8192},
        "the daemon's own, inherited: default_ulimits is empty",
    )
    assert container_memlock(facts(default_ulimits=["nofile=1:1"]))[1] == (
        "the daemon's own, inherited: default_ulimits sets no memlock"
    )
    assert container_memlock(facts(daemon={}))[0] is None


def test_judgement_of_what_the_containers_got():
    expected = ["memlock=8388608:8388608"]
    assert judge_expected(expected, facts(containers=[{"uid": 0, "limits": limits()}])) == []
    assert judge_expected(
        expected, facts(error="CRI-O does not answer at unix:///x: gone", answering=False)
    ) == ["CRI-O does not answer at unix:///x: gone"]
    assert judge_expected(["memlock=-1:-1"], facts(error="creating failed", reason=REASON))[0].startswith(
        "a new container cannot start: memlock=-1:-1 cannot be applied: this host's hard memlock limit is 8388608 bytes"
    )
    lines = judge_expected(
        expected,
        facts(
            containers=[{"uid": 0, "limits": limits(memlock=(65536, 8388608))}],
            default_ulimits=["memlock=65536:8388608"],
            default_ulimits_source="/d/zz.conf",
        ),
    )
    assert lines == [
        "memlock: configured 8388608:8388608, a new container as uid 0 gets 65536:8388608",
        "CRI-O's default_ulimits is ['memlock=65536:8388608'], from /d/zz.conf (the last file CRI-O reads that sets it)",
    ]


def test_images_named_pause_come_from_crictl_images_json():
    listing = '{"images": [{"repoTags": ["localhost/x/busybox:1", "localhost/site/pause:3.10"]}, {"repoTags": null}]}'
    assert images_named_pause(listing) == ["localhost/site/pause:3.10"]
    assert images_named_pause("not json") == []


@pytest.mark.parametrize("name", ["", "-rf", "a b", "crictl\x00", "crictl\n"])
def test_crictl_names_that_cannot_be_a_command_are_refused(name):
    assert find_crictl(lambda *args, **kwargs: "/usr/bin/x", name) is None


def test_crictl_is_looked_up_in_the_path_first(tmp_path):
    asked = []

    def get_bin_path(name, opt_dirs=None):
        asked.append(opt_dirs)
        return "/from/extra/dirs" if opt_dirs else None

    assert find_crictl(get_bin_path, "crictl") == "/from/extra/dirs"
    assert asked == [None, ["/usr/local/bin", "/usr/bin"]]
    executable = tmp_path / "crictl"
    executable.write_text("#!/bin/sh\n")
    assert find_crictl(get_bin_path, str(executable)) is None  # not executable
    executable.chmod(0o755)
    assert find_crictl(get_bin_path, str(executable)) == str(executable)


PROC_LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max open files            1024                 4096                 files
Max locked memory         8388608              8388608              bytes
"""


class ScriptedCrictl:
    """crictl whose create fails as when kubelet stopped the sandbox, FAILURES times."""

    def __init__(self, failures, reason="CreateContainer failed as the sandbox was stopped: 6f1a"):
        self.failures = failures
        self.reason = reason
        self.pods = 0
        self.removed = []

    def run(self, *args):
        verb = args[0]
        if verb == "runp":
            self.pods += 1
            return 0, "pod-%d\n" % self.pods, ""
        if verb == "create":
            if self.pods <= self.failures:
                return (
                    1,
                    "",
                    'level=fatal msg="creating container: rpc error: code = Unknown desc = %s"' % self.reason,
                )
            return 0, "ctr-%d\n" % self.pods, ""
        if verb == "inspect":
            return 0, '{"info": {"pid": 4242}}', ""
        if verb == "rmp":
            self.removed.append(args[-1])
        return 0, "", ""

    def check(self, what, *args):
        rc, out, err = self.run(*args)
        if rc != 0:
            raise ProbeError("%s failed: %s" % (what, crictl_reason(err)), crictl_reason(err))
        return out


@pytest.fixture
def proc_root(tmp_path):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "limits").write_text(PROC_LIMITS)
    return tmp_path


def test_a_probe_pod_that_kubelet_stopped_is_started_again_and_every_pod_removed(proc_root):
    crictl = ScriptedCrictl(failures=3)
    (container,) = probe_limits(crictl, "pause", ["/pause"], [0], proc_root=str(proc_root))
    assert container["uid"] == 0 and container["limits"]["memlock"]["soft"] == 8388608
    assert crictl.pods == 4 and crictl.removed == ["pod-1", "pod-2", "pod-3", "pod-4"]


def test_a_runtime_that_cannot_create_the_container_is_not_tried_again(proc_root):
    crictl = ScriptedCrictl(failures=10, reason="error setting rlimit type 8: operation not permitted")
    with pytest.raises(ProbeError, match="rlimit type 8"):
        probe_limits(crictl, "pause", ["/pause"], [0], proc_root=str(proc_root))
    assert crictl.pods == 1


def test_the_probe_gives_up_after_its_attempts_with_the_runtimes_reason(proc_root):
    crictl = ScriptedCrictl(failures=99)
    with pytest.raises(ProbeError, match="sandbox was stopped"):
        probe_limits(crictl, "pause", ["/pause"], [0], proc_root=str(proc_root), attempts=3)
    assert crictl.pods == 3

"""container_limits_info as Ansible runs it, against a CRI-O node made of files and a fake crictl."""

# ruff: noqa: E501 - the expected failure lines are compared whole, as users read them.

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.modules import container_limits_info

RLIMIT_FAILURE = (
    "creating container: rpc error: code = Unknown desc = container create failed: "
    "error setting rlimit type 8: operation not permitted"
)


@pytest.fixture
def node(fake_crio, monkeypatch):
    monkeypatch.setattr(container_limits_info, "PROC_ROOT", str(fake_crio.proc))
    return fake_crio


def arguments(node, **extra):
    return {
        "runtime_endpoint": node.endpoint,
        "crio_config_file": str(node.config_file),
        "crio_config_dir": str(node.config_dir),
        "wait_timeout": 1,
        **extra,
    }


def test_containers_with_the_configured_limits_pass_and_the_pod_is_removed(run_module, node):
    (node.config_dir / "99-ulimits.conf").write_text(
        '[crio.runtime]\ndefault_ulimits = ["memlock=8388608:8388608"]\n'
    )
    node.containers_get("8388608")
    run = run_module(
        container_limits_info.main,
        arguments(node, expect_ulimits=["memlock=8388608:8388608"]),
        check_mode=True,
    )
    assert run.exit_code == 0, run.result
    result = run.result
    assert (result["changed"], result["ok"], result["problems"]) == (False, True, [])
    assert result["summary"] == ["as uid 0: memlock 8388608:8388608", "as uid 65534: memlock 8388608:8388608"]
    assert result["default_ulimits"] == ["memlock=8388608:8388608"]
    assert result["default_ulimits_source"] == str(node.config_dir / "99-ulimits.conf")
    assert result["image"] == "localhost/site/pause:3.10"
    # The daemon is the process listening on the endpoint's socket, with its own limits.
    assert result["daemon"]["pid"] == 812
    assert result["daemon"]["limits"]["memlock"] == {"soft": 65536, "hard": 8388608, "unit": "bytes"}
    assert result["daemon"]["cap_sys_resource"] is False
    assert [container["memlock_kib"] for container in result["containers"]] == [
        {"soft": 8192, "hard": 8192},
        {"soft": 8192, "hard": 8192},
    ]
    # Host network, a pid namespace of its own, each uid, CRI-O's pause_command.
    assert [
        (config["linux"]["security_context"]["run_as_user"]["value"], config["command"])
        for config in node.created_containers()
    ] == [(0, ["/pause"]), (65534, ["/pause"])]
    assert node.created_containers()[0]["linux"]["security_context"]["namespace_options"] == {
        "network": 2,
        "pid": 1,
    }
    commands = [call[0] for call in node.calls()]
    assert commands == [
        "version",
        "inspecti",
        "runp",
        "create",
        "start",
        "inspect",
        "create",
        "start",
        "inspect",
        "stopp",
        "rmp",
    ]


def test_a_limit_runc_cannot_raise_fails_naming_it_the_host_limit_and_the_reason(run_module, node):
    (node.config_dir / "99-ulimits.conf").write_text('[crio.runtime]\ndefault_ulimits = ["memlock=-1:-1"]\n')
    node.scenario(create_error=RLIMIT_FAILURE)
    run = run_module(
        container_limits_info.main, arguments(node, expect_ulimits=["memlock=-1:-1", "nofile=1024:1024"])
    )
    assert run.failed
    assert run.result["msg"] == (
        "a new container cannot start: memlock=-1:-1 cannot be applied: this host's hard memlock limit is "
        "8388608 bytes, the CRI-O daemon's, and runc cannot raise a limit above it without CAP_SYS_RESOURCE, "
        "which the daemon lacks here; set memlock=8388608:8388608 or lower, or raise the hard limit CRI-O "
        "starts with (LimitMEMLOCK= in its systemd unit); CRI-O said: " + RLIMIT_FAILURE
    )
    assert run.result["reason"] == RLIMIT_FAILURE
    assert [call[0] for call in node.calls()][-2:] == ["stopp", "rmp"]


def test_a_container_without_the_configured_limit_fails_naming_where_default_ulimits_comes_from(
    run_module, node
):
    (node.config_dir / "99-ulimits.conf").write_text('[crio.runtime]\ndefault_ulimits = ["memlock=-1:-1"]\n')
    # A later drop-in wins, whatever its name: CRI-O reads every file there.
    (node.config_dir / "99-ulimits.conf.bak").write_text("[crio.runtime]\ndefault_ulimits = []\n")
    node.containers_get("65536", "8388608")
    node.scenario(pids={"1000": 2000})
    run = run_module(
        container_limits_info.main, arguments(node, expect_ulimits=["memlock=-1:-1"], uids=[1000])
    )
    assert run.failed
    assert run.result["msg"].splitlines() == [
        "memlock: configured unlimited:unlimited, a new container as uid 1000 gets 65536:8388608",
        "CRI-O's default_ulimits is [], from %s (the last file CRI-O reads that sets it)"
        % (node.config_dir / "99-ulimits.conf.bak"),
    ]


def test_a_runtime_that_does_not_answer_fails_naming_the_endpoint(run_module, node):
    node.scenario(answering=False)
    run = run_module(container_limits_info.main, arguments(node))
    assert run.failed
    assert run.result["msg"] == (
        "CRI-O does not answer at %s: validate service connection: dial unix /run/crio/crio.sock: connect: "
        "no such file or directory" % node.endpoint
    )
    assert run.result["answering"] is False


def test_an_image_the_node_lacks_is_named(run_module, node):
    run = run_module(container_limits_info.main, arguments(node, image="localhost/absent:1"))
    assert run.failed
    assert run.result["msg"] == (
        'the image localhost/absent:1 is not on the node (no such image "localhost/absent:1" present); give one it has'
    )


def test_without_pause_image_in_the_configuration_the_runtimes_pause_image_is_used(run_module, node):
    node.config_file.unlink()
    node.containers_get("65536")
    run = run_module(container_limits_info.main, arguments(node, uids=[0]))
    assert run.exit_code == 0, run.result
    assert run.result["image"] == "localhost/site/pause:3.10"
    assert run.result["config_files"] == []
    assert [call[:2] for call in node.calls()][:2] == [["version"], ["images", "-o"]]
    # No pause_command to give: the image's own command runs.
    assert "command" not in node.created_containers()[0]


def test_report_only_mode_succeeds_with_the_problems(run_module, node):
    node.scenario(runp_error="pod sandbox: cannot set hugetlb limit")
    run = run_module(container_limits_info.main, arguments(node, fail_on_problems=False))
    assert run.exit_code == 0
    assert run.result["ok"] is False
    assert run.result["problems"] == [
        "a new container cannot start: CRI-O said: pod sandbox: cannot set hugetlb limit"
    ]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"expect_ulimits": ["memlock=-1"]}, "expect_ulimits: ulimit entry 'memlock=-1' is malformed"),
        ({"uids": [-1]}, "uids: a uid is an integer from 0 to 4294967295"),
        ({"wait_timeout": 0}, "wait_timeout: must be at least 1 second"),
        ({"crictl": "/nonexistent/crictl"}, "crictl: /nonexistent/crictl is not an executable on this node"),
    ],
)
def test_bad_arguments_are_refused_naming_them(run_module, node, extra, named):
    run = run_module(container_limits_info.main, arguments(node, **extra))
    assert run.failed
    assert run.result["msg"].startswith(named), run.result["msg"]
    assert node.calls() == []

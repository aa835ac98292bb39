"""nccl_log_info as Ansible runs it: arguments in, JSON out."""

from __future__ import annotations

import pathlib

from ansible_collections.gpuops.training.plugins.modules import nccl_log_info

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
INIT = "h{node}:{pid}:1 [0] NCCL INFO comm 0x{rank} rank {rank} nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"


def test_a_socket_run_passes_when_sockets_are_expected(run_module):
    run = run_module(
        nccl_log_info.main,
        {
            "paths": ["socket-*.log"],
            "base_dir": str(FIXTURES),
            "expect": {"nccl_used": True, "nranks": 4, "transport": "Socket"},
        },
    )
    assert run.exit_code == 0
    assert run.result["ok"] is True
    assert run.result["changed"] is False
    assert run.result["failures"] == []
    assert run.result["init_complete_ranks"] == [0, 1, 2, 3]
    assert run.result["transport"] == "Socket"
    assert run.result["errors"] == []


def test_a_tcp_fallback_fails_an_ib_expectation_with_the_remedy(run_module):
    run = run_module(
        nccl_log_info.main,
        {
            "paths": [str(FIXTURES / "socket-fallback-ib-profile.log")],
            "expect": {"transport": "IB", "gdr": True},
        },
    )
    assert run.failed
    message = run.result["msg"]
    assert message.startswith(
        "NCCL check failed:\n- transport: expected IB, found Socket (NCCL fell back to TCP"
    )
    for text in (
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "secondary_networks",
        "\n- gdr: expected GPUDirect RDMA",
    ):
        assert text in message
    assert run.result["ok"] is False
    assert run.result["transport"] == "Socket"


def test_classified_errors_fail_only_when_no_errors_is_expected(run_module):
    args = {"pod_logs": [{"name": "worker-0", "log": (FIXTURES / "ibv-reg-mr-memlock.log").read_text()}]}
    run = run_module(nccl_log_info.main, args)
    # Neither rank reached Init COMPLETE: a result that lists missing ranks never passes.
    assert run.failed and run.result["missing_ranks"] == [0, 1]
    assert run.result["failures"] == [
        "init_complete_ranks: expected ranks 0-1 to reach Init COMPLETE, ranks 0, 1 did not on host "
        "gpu-node-a (read those ranks' logs: they hung or failed during NCCL init)"
    ]
    assert [error["kind"] for error in run.result["errors"]] == ["memory_registration", "system_error"]
    assert run.result["errors"][0]["lines"][0].startswith(
        "worker-0:14: gpu-node-a:41:59 [0] misc/ibvwrap.cc:190"
    )

    run = run_module(nccl_log_info.main, dict(args, expect={"no_errors": True}))
    assert run.failed
    assert "no_errors: expected none, found memory_registration" in run.result["msg"]
    assert "gpuops.training.crio_limits" in run.result["msg"]


def test_missing_ranks_are_named(run_module):
    content = INIT.format(node=0, pid=1, rank=0)
    run = run_module(nccl_log_info.main, {"content": content, "expect": {"nranks": 2}})
    assert run.failed
    assert run.result["msg"] == (
        "NCCL check failed:\n- init_complete_ranks: expected ranks 0-1 to reach Init COMPLETE, "
        "rank 1 did not (read those ranks' logs: they hung or failed during NCCL init)"
    )
    assert run.result["missing_ranks"] == [1]


def test_check_mode_reads_the_same(run_module):
    content = "\n".join(INIT.format(node=rank, pid=rank + 1, rank=rank) for rank in range(2))
    run = run_module(nccl_log_info.main, {"content": content, "expect": {"nranks": 2}}, check_mode=True)
    assert run.exit_code == 0
    assert run.result["changed"] is False
    assert run.result["init_complete_ranks"] == [0, 1]
    assert run.result["hosts"] == ["h0", "h1"]


def test_a_bad_path_is_named(run_module, tmp_path):
    missing = tmp_path / "nope.log"
    run = run_module(nccl_log_info.main, {"paths": [str(missing)]})
    assert run.failed
    assert run.result["msg"] == "paths: %s does not exist" % missing


def test_no_source_at_all_is_an_error(run_module):
    run = run_module(nccl_log_info.main, {})
    assert run.failed
    assert run.result["msg"] == "one of paths, content or pod_logs is required"


def test_a_warn_level_run_passes_and_says_what_was_not_verifiable(run_module):
    log = '{"event":"run_start","rank":0}\nepoch 0 loss 1.2\n'
    expect = {"nccl_used": True, "nranks": 2, "transport": "IB", "no_errors": True}
    run = run_module(
        nccl_log_info.main, {"pod_logs": [{"name": "w-0", "log": log}], "expect": dict(expect, debug="WARN")}
    )
    assert run.exit_code == 0 and run.result["ok"] is True
    (statement,) = run.result["unverifiable"]
    assert "nccl_used, nranks, transport" in statement and "NCCL_DEBUG=WARN prints no INFO lines" in statement
    failed = run_module(nccl_log_info.main, {"pod_logs": [{"name": "w-0", "log": log}], "expect": expect})
    assert failed.failed and failed.result["unverifiable"] == []

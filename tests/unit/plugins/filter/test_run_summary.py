"""The run_summary filter: what summary.json says about a run."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.run_summary import FilterModule

run_summary = FilterModule().filters()["run_summary"]

RUN = {
    "run_id": "r1",
    "launcher": "local",
    "run_dir": "/runs/r1",
    "world_size": 2,
    "rc": 0,
    "timed_out": False,
    "started": 100.0,
    "ended": 160.5,
    "log_paths": ["/runs/r1/logs/**/*.log"],
}
TRAINING = {
    "failures": [],
    "ranks": [{"rank": 0, "status": "ok"}, {"rank": 1, "status": "ok"}],
    "ranks_reporting": [0, 1],
    "backend": "gloo",
    "epochs": [{"epoch": 0, "loss": 2.0}, {"epoch": 1, "loss": 1.0}],
    "loss": {"first": 2.0, "last": 1.0, "fell": True},
    "checkpoints": [{"path": "/ck/1.pt"}],
    "restarts": 0,
}
NO_NCCL = {"failures": [], "nccl_used": False}


def test_a_passing_gloo_run_says_nccl_was_not_used():
    summary = run_summary(RUN, TRAINING, NO_NCCL)
    assert summary["verdict"] == "passed"
    assert summary["duration_s"] == 60.5
    assert summary["checkpoints"] == {"count": 1, "last": {"path": "/ck/1.pt"}}
    assert summary["nccl"]["used"] is False
    assert summary["nccl"]["statement"] == (
        "NCCL was not used: the run used the gloo backend, so there is no NCCL transport to verify."
    )


def test_an_nccl_run_states_its_transport():
    nccl = {
        "failures": [],
        "nccl_used": True,
        "nccl_version": "2.21.5",
        "nranks": 2,
        "init_complete_ranks": [0, 1],
        "transport": "IB",
        "gdr": True,
    }
    summary = run_summary(RUN, dict(TRAINING, backend="nccl"), nccl)
    assert summary["nccl"]["statement"] == (
        "NCCL 2.21.5: 2 of 2 ranks reached Init COMPLETE, transport IB with GPUDirect RDMA."
    )


def test_an_nccl_run_with_info_lines_off_passes_saying_the_transport_was_not_verifiable():
    statement = "not verifiable: nccl_used, transport (...): NCCL_DEBUG=WARN prints no INFO lines. Set ..."
    nccl = {"failures": [], "nccl_used": False, "unverifiable": [statement]}
    summary = run_summary(RUN, dict(TRAINING, backend="nccl"), nccl)
    assert summary["verdict"] == "passed"
    assert summary["nccl"]["verifiable"] is False and summary["nccl"]["unverifiable"] == [statement]
    assert summary["nccl"]["statement"] == "NCCL transport " + statement
    assert run_summary(RUN, TRAINING, NO_NCCL)["nccl"]["verifiable"] is True


def test_a_launcher_failure_fails_the_verdict_even_when_logs_look_fine():
    summary = run_summary(dict(RUN, rc=1), TRAINING, NO_NCCL)
    assert summary["verdict"] == "failed"
    assert summary["failures"] == ["the launcher exited with code 1"]


def test_a_timeout_is_the_first_failure():
    summary = run_summary(
        dict(RUN, rc=124, timed_out=True, timeout_s=60), dict(TRAINING, failures=["x"]), NO_NCCL
    )
    assert summary["failures"] == ["the launcher stopped the run after its timeout of 60 s", "x"]


def test_log_check_failures_are_collected():
    summary = run_summary(RUN, dict(TRAINING, failures=["rank 1 failed"]), dict(NO_NCCL, failures=["no IB"]))
    assert summary["failures"] == ["rank 1 failed", "no IB"]


@pytest.mark.parametrize("bad", [None, "text", ["list"]])
def test_inputs_that_are_not_dicts_are_rejected_with_their_name(bad):
    with pytest.raises(AnsibleFilterError, match="run_summary: training must be a dict"):
        run_summary(RUN, bad, NO_NCCL)


def test_the_newest_evaluation_is_reported():
    evaluations = [
        {"event": "eval", "epoch": 1, "step": 8, "map": 0.01, "map_50": 0.05, "map_75": 0.0, "images": 8},
        {"event": "eval", "epoch": 3, "step": 16, "map": 0.04, "map_50": 0.12, "map_75": 0.01, "images": 8},
    ]
    summary = run_summary(RUN, dict(TRAINING, evaluations=evaluations), NO_NCCL)
    assert summary["evaluation"] == {
        "epoch": 3,
        "step": 16,
        "map": 0.04,
        "map_50": 0.12,
        "map_75": 0.01,
        "images": 8,
    }
    assert run_summary(RUN, TRAINING, NO_NCCL)["evaluation"] is None


def test_pods_whose_log_could_not_be_read_are_named_first_with_their_node_and_reason():
    run = dict(
        RUN,
        unreadable_logs=[
            {
                "pod": "w-3",
                "node": "gpu-07",
                "status": "unreadable",
                "reason": "the pod or its log is gone (404)",
            },
            {
                "pod": "w-5",
                "node": "gpu-09",
                "status": "partial",
                "reason": "the pod is gone; its early copy is all there is",
            },
        ],
    )
    training = dict(TRAINING, failures=["rank 1 never reported"])
    summary = run_summary(run, training, NO_NCCL)
    assert summary["verdict"] == "failed"
    assert summary["failures"] == [
        "pod w-3 (node gpu-07): its log could not be read: the pod or its log is gone (404); "
        "its ranks are judged without it",
        "rank 1 never reported",
    ]
    assert summary["warnings"][0] == (
        "pod w-5 (node gpu-09): part of its log could not be read: "
        "the pod is gone; its early copy is all there is"
    )


def test_without_a_history_the_summary_says_none_and_a_skipped_one_is_none_too():
    assert run_summary(RUN, TRAINING, NO_NCCL)["history"] is None
    assert run_summary(RUN, TRAINING, NO_NCCL, history={"skipped": True, "changed": False})["history"] is None
    with pytest.raises(AnsibleFilterError, match="run_summary: history must be a dict, got str"):
        run_summary(RUN, TRAINING, NO_NCCL, history="flagged")


def test_a_gpu_the_history_flagged_is_a_warning_and_differs_on_its_rank():
    ranks = [dict(rank, local_rank=rank["rank"], node="node-a") for rank in TRAINING["ranks"]]
    flagged = {"node": "node-a", "device": "GPU 1", "key": "w", "value": 4.0, "median": 5.0,
               "below_median_percent": 20.0, "samples": 3, "reason": "node-a GPU 1: 20 % below",
               "remedy": "check it", "flagged": True, "source": "training",
               "metric": "images_per_s"}  # fmt: skip
    judged = [dict(flagged, device="GPU 0", flagged=False, median=None), flagged]
    history = {"judged": judged, "flagged": [flagged], "files": ["f"]}
    summary = run_summary(RUN, dict(TRAINING, ranks=ranks), NO_NCCL, history=history)
    assert summary["history"]["gpus_judged"] == 2 and summary["history"]["gpus_with_history"] == 1
    (row,) = summary["history"]["flagged"]
    assert row["rank"] == 1 and row["reason"] in summary["warnings"] and summary["verdict"] == "passed"
    assert [(group["node"], group["ranks"], group["what"]) for group in summary["differs"]] == [
        ("node-a", "1", "20% below this GPU's own median")
    ]

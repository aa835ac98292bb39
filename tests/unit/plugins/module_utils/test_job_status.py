"""job_status: phases of Jobs, PyTorchJobs, MPIJobs and TrainJobs, pod states, verdicts and messages.

Fixtures under tests/unit/fixtures/jobs: those whose comment says "harness" were read from the
test harness's API server (kube-controller-manager, kube-scheduler, kwok, Training Operator);
the others are written by hand in the API's form for what kwok does not simulate.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils import job_status
from ansible_collections.gpuops.training.plugins.module_utils.job_status import (
    container_kills,
    describe_kill,
    describe_pod,
    judge,
    merge_pod_states,
    parse_time,
    pod_counts,
    pod_state,
    timeout_message,
    workload_phase,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "jobs"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


@pytest.mark.parametrize(
    ("kind", "fixture", "phase", "detail"),
    [
        (
            "Job",
            "job-complete.yaml",
            "Succeeded",
            "CompletionsReached: Reached expected number of succeeded pods",
        ),
        (
            "Job",
            "job-failed-backoff.yaml",
            "Failed",
            "BackoffLimitExceeded: Job has reached the specified backoff limit",
        ),
        ("Job", "job-pending-unschedulable.yaml", "Running", ""),
        ("PyTorchJob", "pytorchjob-succeeded.yaml", "Succeeded", None),
        ("PyTorchJob", "pytorchjob-failed.yaml", "Failed", None),
        ("PyTorchJob", "pytorchjob-running.yaml", "Running", ""),
        ("PyTorchJob", "pytorchjob-restarting.yaml", "Running", None),
        ("TrainJob", "trainjob-created.yaml", "Pending", ""),
        ("TrainJob", "trainjob-running.yaml", "Running", ""),
        ("TrainJob", "trainjob-complete.yaml", "Succeeded", "JobsCompleted: jobs have been completed"),
        ("TrainJob", "trainjob-failed.yaml", "Failed", None),
        ("MPIJob", "mpijob-created.yaml", "Pending", "MPIJobCreated: MPIJob nt-ok is created."),
        ("MPIJob", "mpijob-running.yaml", "Running", ""),
        ("MPIJob", "mpijob-workers-unschedulable.yaml", "Running", ""),
        (
            "MPIJob",
            "mpijob-succeeded.yaml",
            "Succeeded",
            "MPIJobSucceeded: MPIJob nt-ok is successfully completed.",
        ),
        (
            "MPIJob",
            "mpijob-failed.yaml",
            "Failed",
            "MPIJobMPIJobFailed: MPIJob nt-fail is failed because 1 Launcher replica(s) failed.",
        ),
    ],
)
def test_workload_phases(kind, fixture, phase, detail):
    found_phase, found_detail = workload_phase(kind, load(fixture))
    assert found_phase == phase
    if detail is not None:
        assert found_detail == detail


def test_a_failed_pytorchjob_says_why_and_a_restarting_one_too():
    assert workload_phase("PyTorchJob", load("pytorchjob-failed.yaml"))[1] == (
        "PyTorchJobFailed: Job rn-ptjfail has failed because it has reached the specified backoff limit"
    )
    assert (
        "restarting because 1 Worker replica(s) failed"
        in workload_phase("PyTorchJob", load("pytorchjob-restarting.yaml"))[1]
    )


def test_a_job_that_only_reached_its_failure_target_is_not_finished_yet():
    job = load("job-failed-backoff.yaml")
    job["status"]["conditions"] = [c for c in job["status"]["conditions"] if c["type"] != "Failed"]
    assert workload_phase("Job", job)[0] == "Running"


def test_a_missing_workload_and_an_unknown_kind():
    assert workload_phase("Job", None) == ("NotFound", "")
    with pytest.raises(ValueError, match="kind must be one of Job, MPIJob, PyTorchJob, TrainJob"):
        workload_phase("XGBoostJob", {})


def test_an_mpijob_reads_like_a_pytorchjob():
    done = {"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded", "message": "completed."}
    succeeded = {"status": {"conditions": [
        {"type": "Created", "status": "True"}, {"type": "Running", "status": "False"}, done,
    ]}}  # fmt: skip
    assert workload_phase("MPIJob", succeeded)[0] == "Succeeded"
    running = {
        "status": {
            "conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]
        }
    }
    assert workload_phase("MPIJob", running) == ("Running", "")


def test_a_failed_mpijob_names_its_launchers_exit_code():
    job, launcher = load("mpijob-failed.yaml"), load("pod-mpijob-launcher-failed.yaml")
    verdict = judge("MPIJob", "nt-fail", "nt-cap", job, [launcher], parse_time("2026-11-22T14:06:00Z"))
    assert verdict["finished"] and not verdict["succeeded"]
    assert verdict["message"] == (
        "MPIJob nt-cap/nt-fail failed (MPIJobMPIJobFailed: MPIJob nt-fail is failed because 1 Launcher "
        "replica(s) failed.); failed pods: nt-fail-launcher: Failed on gpu-node-0, Error: container "
        "mpi-launcher exited with code 3 (Error)"
    )


def test_an_mpijob_whose_workers_cannot_be_placed_runs_its_launcher_and_names_the_workers():
    job = load("mpijob-workers-unschedulable.yaml")
    pods = [load("pod-mpijob-launcher-running.yaml"), load("pod-mpijob-worker-unschedulable.yaml")]
    now = parse_time(pods[1]["metadata"]["creationTimestamp"]) + 20
    verdict = judge("MPIJob", "nt-stuck", "nt-cap", job, pods, now, expected_pods=3)
    assert (verdict["phase"], verdict["finished"]) == ("Running", False)
    assert verdict["counts"] == {
        "pending": 1, "running": 1, "succeeded": 0, "failed": 0, "unknown": 0, "total": 2,
    }  # fmt: skip
    (stuck,) = verdict["stuck_pods"]
    assert stuck.startswith(
        "nt-stuck-worker-0: Pending for 20 s, Unschedulable: "
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )
    message = timeout_message(verdict, 20)
    assert message.startswith("MPIJob nt-cap/nt-stuck did not finish within 20 s: it is Running; "), message
    assert "nt-stuck-worker-0: Pending for 20 s, Unschedulable" in message
    assert "nt-stuck-launcher: Running" in message


def test_an_unschedulable_pod_is_stuck_with_the_schedulers_reason():
    pod = load("pod-unschedulable.yaml")
    now = parse_time(pod["metadata"]["creationTimestamp"]) + 45
    state = pod_state(pod, now, slow_after=120)
    assert state["phase"] == "Pending" and state["stuck"] and state["slow"]
    assert state["reason"] == "Unschedulable"
    assert state["detail"].startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    assert state["age_s"] == 45
    assert describe_pod(state).startswith(
        "rn-pending-0-77jrl: Pending for 45 s, Unschedulable: "
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )


def test_image_pull_and_crash_loops_are_stuck_and_named():
    state = pod_state(load("pod-image-pull-backoff.yaml"), None)
    assert state["stuck"] and state["reason"] == "ImagePullBackOff"
    assert (
        state["detail"] == 'container pytorch: Back-off pulling image "registry.example/gpuops-trainer:tpyo"'
    )
    state = pod_state(load("pod-crash-loop.yaml"), None)
    assert state["stuck"] and state["reason"] == "CrashLoopBackOff" and state["restarts"] == 4
    assert state["exit_code"] == 2 and "(last exit code 2, Error)" in state["detail"]


def test_a_failed_pod_names_its_container_and_exit_code():
    state = pod_state(load("pod-failed-exit-3.yaml"), None)
    assert state["phase"] == "Failed" and state["exit_code"] == 3
    assert state["detail"] == "container trainer exited with code 3 (Error)"
    assert not state["stuck"]


def test_an_oom_killed_pod_is_named_with_the_reason_the_exit_code_and_its_limit():
    pod = load("pod-oom-killed.yaml")
    state = pod_state(pod, None)
    assert state["phase"] == "Failed" and state["exit_code"] == 137 and state["reason"] == "OOMKilled"
    assert state["detail"] == (
        "container trainer exited with code 137 (OOMKilled: the kernel's OOM killer stopped it at "
        "its memory limit of 4Gi)"
    )
    assert (
        state["kills"]
        == container_kills(pod)
        == [
            {
                "pod": "rn-3f9a1c-1-q8w2e",
                "namespace": "training",
                "container": "trainer",
                "exit_code": 137,
                "reason": "OOMKilled",
                "oom_killed": True,
                "previous": False,
                "finished_at": parse_time("2026-11-22T05:03:41Z"),
                "restarts": 0,
                "memory_limit": "4Gi",
            }
        ]
    )
    verdict = judge("Job", "rn-3f9a1c", "training", load("job-failed-backoff.yaml"), [pod], None)
    assert (
        "failed pods: rn-3f9a1c-1-q8w2e: Failed on gpu-node-1, OOMKilled: container trainer exited with "
        "code 137 (OOMKilled: the kernel's OOM killer stopped it at its memory limit of 4Gi)"
    ) in verdict["message"]


def test_a_pod_restarted_after_an_oom_kill_says_so_and_keeps_the_kill():
    state = pod_state(load("pod-oom-killed-restarted.yaml"), None)
    assert state["phase"] == "Running" and state["reason"] == "Restarted"
    assert state["detail"] == (
        "restarted 1 times, the last time after exit code 137 (OOMKilled: the kernel's OOM killer "
        "stopped it at its memory limit of 8Gi)"
    )
    (kill,) = state["kills"]
    assert kill["previous"] and kill["container"] == "pytorch" and kill["restarts"] == 1
    assert describe_kill(kill) == (
        "pod training/rn-3f9a1c-worker-0: the previous container pytorch exited with code 137 "
        "(OOMKilled: the kernel's OOM killer stopped it at its memory limit of 8Gi)"
    )


def test_a_sigkill_without_oomkilled_is_a_kill_too_and_says_what_sends_it():
    state = pod_state(load("pod-sigkilled-crash-loop.yaml"), None)
    assert state["stuck"] and state["reason"] == "CrashLoopBackOff" and state["exit_code"] == 137
    assert state["detail"].endswith(
        "(last exit code 137, killed by SIGKILL (the kernel's OOM killer sends it when memory runs out))"
    )
    (kill,) = state["kills"]
    assert not kill["oom_killed"] and kill["previous"] and kill["memory_limit"] is None


@pytest.mark.parametrize("fixture", ["pod-failed-exit-3.yaml", "pod-crash-loop.yaml", "pod-succeeded.yaml"])
def test_other_exits_are_no_kills(fixture):
    assert container_kills(load(fixture)) == []
    assert pod_state(load(fixture), None)["kills"] == []


def test_a_restarted_running_pod_and_a_succeeded_pod():
    state = pod_state(load("pod-running.yaml"), None)
    assert state["phase"] == "Running" and state["restarts"] == 1 and state["reason"] == "Restarted"
    assert not state["stuck"] and not state["slow"]
    state = pod_state(load("pod-succeeded.yaml"), None)
    assert state["phase"] == "Succeeded" and state["reason"] == "" and state["node"].startswith("gpu-node-")


def test_a_pending_pod_is_slow_only_after_slow_after():
    pod = load("pod-succeeded.yaml")
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    created = parse_time(pod["metadata"]["creationTimestamp"])
    assert not pod_state(pod, created + 10, slow_after=30)["slow"]
    assert pod_state(pod, created + 30, slow_after=30)["slow"]


def test_counts_skip_pods_that_are_gone():
    states = [
        {"name": "a", "phase": "Pending"},
        {"name": "b", "phase": "Succeeded"},
        {"name": "c", "phase": "Failed", "gone": True},
    ]
    assert pod_counts(states) == {
        "pending": 1,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
        "unknown": 0,
        "total": 2,
    }


def test_pods_seen_before_are_remembered_when_gone():
    merged = merge_pod_states(
        [{"name": "a", "phase": "Failed"}, {"name": "b", "phase": "Running"}],
        [{"name": "b", "phase": "Succeeded"}],
    )
    assert merged == [{"name": "b", "phase": "Succeeded"}, {"name": "a", "phase": "Failed", "gone": True}]


def test_a_running_job_with_an_unschedulable_pod_reports_progress_and_times_out_naming_it():
    pod = load("pod-unschedulable.yaml")
    now = parse_time(pod["metadata"]["creationTimestamp"]) + 30
    verdict = judge(
        "Job",
        "rn-pending",
        "gl-cap",
        load("job-pending-unschedulable.yaml"),
        [pod],
        now,
        expected_pods=2,
        slow_after=20,
    )
    assert not verdict["finished"] and verdict["phase"] == "Running"
    assert verdict["counts"]["pending"] == 1
    assert verdict["progress"].startswith(
        "Job gl-cap/rn-pending: Running; pods: 1 pending, 0 running, 0 succeeded, 0 failed "
        "of 2 expected (1 not created yet); "
        "slow: rn-pending-0-77jrl: Pending for 30 s, Unschedulable: 0/2 nodes are available"
    )
    message = timeout_message(verdict, 600)
    assert message.startswith(
        "Job gl-cap/rn-pending did not finish within 600 s: it is Running; stuck pods: rn-pending-0-77jrl"
    )
    assert "Insufficient nvidia.com/gpu" in message


def test_a_failed_job_names_the_failed_pods():
    verdict = judge(
        "Job", "rn-fail", "gl-cap", load("job-failed-backoff.yaml"), [load("pod-failed-exit-3.yaml")], None
    )
    assert verdict["finished"] and not verdict["succeeded"]
    assert verdict["message"] == (
        "Job gl-cap/rn-fail failed (BackoffLimitExceeded: Job has reached the specified backoff limit); "
        "failed pods: rn-fail-0-mmt6j: Failed on gpu-node-0, Error: "
        "container trainer exited with code 3 (Error)"
    )


def test_a_failed_pytorchjob_whose_pods_were_deleted_names_them_from_earlier_reads():
    earlier = judge(
        "PyTorchJob",
        "rn-ptjfail",
        "gl-cap",
        load("pytorchjob-running.yaml"),
        [load("pod-failed-exit-3.yaml")],
        None,
    )
    verdict = judge(
        "PyTorchJob",
        "rn-ptjfail",
        "gl-cap",
        load("pytorchjob-failed.yaml"),
        [],
        None,
        previous=earlier["pods"],
    )
    assert verdict["finished"] and verdict["phase"] == "Failed"
    assert "rn-fail-0-mmt6j: Failed (last seen; the pod is gone)" in verdict["message"]
    assert "exited with code 3" in verdict["message"]
    # Why they are gone, since cleanPodPolicy None did not keep them.
    assert verdict["message"].endswith(
        "(the PyTorchJob's pods were deleted: the Training Operator deletes every pod of a job that "
        "reaches its backoffLimit or deadline, whatever its cleanPodPolicy, and their logs with them)"
    )


REAL_NODE_JOB = ("PyTorchJob", "retinanet-fc4bcd", "rn-ae0363")


def real_node_pods(worker_1_phase):
    worker_0 = load("pod-real-node-pytorchjob-worker-0-peer-lost.yaml")
    worker_1 = load("pod-real-node-pytorchjob-worker-1-oom-killed-phase-running.yaml")
    worker_1["status"]["phase"] = worker_1_phase
    return [worker_0, worker_1]


def test_a_failed_workload_settles_while_a_pod_still_reads_running_and_not_after():
    # As read on the real node: worker 0 failed (its peer was lost) and the job with it, while
    # worker 1, OOM-killed a second earlier, still read Running.
    job = load("pytorchjob-failed.yaml")
    verdict = judge(*REAL_NODE_JOB, job, real_node_pods("Running"), None)
    assert verdict["phase"] == "Failed" and job_status.settling(verdict)
    settled = judge(*REAL_NODE_JOB, job, real_node_pods("Failed"), None)
    assert not job_status.settling(settled)
    # Gone pods are not waited for, nor is a workload that has not failed.
    gone = judge(*REAL_NODE_JOB, job, [], None, previous=verdict["pods"])
    assert not job_status.settling(gone)
    running = judge(*REAL_NODE_JOB, load("pytorchjob-running.yaml"), real_node_pods("Running"), None)
    assert not job_status.settling(running)


def test_failed_pods_are_named_in_the_order_they_failed_the_cause_first():
    # worker 1 was OOM-killed at 10:07:45, worker 0 lost its peer at 10:07:46: worker 1 first,
    # although worker 0 sorts first by name.
    verdict = judge(*REAL_NODE_JOB, load("pytorchjob-failed.yaml"), real_node_pods("Failed"), None)
    failed = verdict["message"].split("; failed pods: ", 1)[1]
    assert failed.startswith(
        "retinanet-fc4bcd-worker-1: Failed on real-node-0, OOMKilled: container pytorch exited with code 137 "
        "(OOMKilled: the kernel's OOM killer stopped it at its memory limit of 2Gi); "
        "retinanet-fc4bcd-worker-0: Failed on real-node-0, Error: "
        "container pytorch exited with code 200 (Error: the trainer's code for a lost peer: another rank "
        "failed first)"
    ), failed
    assert "pods were deleted" not in verdict["message"]


@pytest.mark.parametrize("peer_lost_delay_s", [0, -1, -3], ids=["same-second", "1s-earlier", "3s-earlier"])
def test_a_pod_that_lost_its_peer_comes_after_the_cause_whatever_its_finish_time(peer_lost_delay_s):
    # As CI saw on the real node: the rank that lost its peer exits at once, while torchrun's
    # agent in the OOM-killed pod notices its worker's death later - the same second or after.
    worker_0, worker_1 = real_node_pods("Failed")
    finished = "2026-11-26T10:07:%02dZ" % (45 + peer_lost_delay_s)
    worker_0["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = finished
    verdict = judge(*REAL_NODE_JOB, load("pytorchjob-failed.yaml"), [worker_0, worker_1], None)
    failed = verdict["message"].split("; failed pods: ", 1)[1]
    assert failed.startswith("retinanet-fc4bcd-worker-1: Failed on real-node-0, OOMKilled"), failed
    assert "; retinanet-fc4bcd-worker-0: Failed on real-node-0, Error" in failed


def test_the_peer_lost_exit_code_is_the_trainers():
    from gpuops_trainer import errors

    assert job_status.PEER_LOST_EXIT_CODE == errors.EXIT_PEER_LOST


def test_a_succeeded_workload_has_no_message():
    verdict = judge(
        "PyTorchJob",
        "rn-ptj",
        "gl-cap",
        load("pytorchjob-succeeded.yaml"),
        [load("pod-succeeded.yaml")],
        None,
        expected_pods=1,
    )
    assert verdict["finished"] and verdict["succeeded"] and verdict["message"] == ""
    assert (
        verdict["progress"]
        == "PyTorchJob gl-cap/rn-ptj: Succeeded; pods: 0 pending, 0 running, 1 succeeded, 0 failed "
        "of 1 expected"
    )


def test_a_trainjob_without_pods_times_out_asking_for_its_controller():
    verdict = judge("TrainJob", "rn-tj", "gl-cap", load("trainjob-created.yaml"), [], None, expected_pods=2)
    assert verdict["progress"].endswith("of 2 expected (2 not created yet)")
    message = timeout_message(verdict, 60)
    assert message == (
        "TrainJob gl-cap/rn-tj did not finish within 60 s: it is Pending; no pod was created "
        "(is the Kubeflow Trainer controller running, and does the namespace's quota admit the pods?)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22T05:00:00Z", 1795323600.0),
        ("2026-11-22T05:00:00.123456789Z", 1795323600.123456),
        ("2026-11-22T05:00:00+00:00", 1795323600.0),
        ("", None),
        (None, None),
        ("yesterday", None),
    ],
)
def test_parse_time(text, expected):
    assert parse_time(text) == expected


def test_stuck_reasons_are_the_ones_waiting_does_not_heal():
    assert "ContainerCreating" not in job_status.STUCK_REASONS
    assert {"ImagePullBackOff", "CrashLoopBackOff", "CreateContainerConfigError"} <= set(
        job_status.STUCK_REASONS
    )


@pytest.mark.parametrize(
    ("kind", "fixture", "detail"),
    [
        (
            "PyTorchJob",
            "pytorchjob-kueue-suspended.yaml",
            "queued in Kueue's LocalQueue gpu-queue, not admitted yet; "
            "PyTorchJobSuspended: PyTorchJob rn-7c21d0 is suspended.",
        ),
        # Before the controller's first condition, the spec says it.
        ("Job", "job-kueue-just-created.yaml", "queued in Kueue's LocalQueue gpu-queue, not admitted yet"),
    ],
)
def test_a_workload_waiting_for_kueue_reads_suspended_naming_its_queue(kind, fixture, detail):
    assert workload_phase(kind, load(fixture)) == ("Suspended", detail)


def test_a_workload_kueue_did_not_admit_times_out_naming_the_queue_not_missing_pods():
    workload = load("pytorchjob-kueue-suspended.yaml")
    verdict = judge("PyTorchJob", "rn-7c21d0", "training", workload, [], None, expected_pods=2)
    assert (verdict["phase"], verdict["queue"], verdict["finished"]) == ("Suspended", "gpu-queue", False)
    assert verdict["progress"].startswith(
        "PyTorchJob training/rn-7c21d0: Suspended (queued in Kueue's LocalQueue gpu-queue, not admitted yet;"
    )
    message = timeout_message(verdict, 60)
    assert "Kueue did not admit it" in message and "LocalQueue gpu-queue" in message
    assert "no pod was created" not in message


def test_without_the_queue_label_a_suspended_spec_is_not_read_as_queued():
    job = load("job-kueue-just-created.yaml")
    del job["metadata"]["labels"]
    assert workload_phase("Job", job) == ("Pending", "")
    assert judge("Job", "rn-5e0b44", "training", job, [], None)["queue"] is None

"""training_job_wait: polls a Job, PyTorchJob, MPIJob or TrainJob and its pods, with a deadline and
windows."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.training.plugins.module_utils import k8s_client
from ansible_collections.gpuops.training.plugins.module_utils.job_status import parse_time
from ansible_collections.gpuops.training.plugins.modules import training_job_wait

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "jobs"
SELECTOR = "gpuops.training/run-id=rn-20261122T050000Z"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


@pytest.fixture
def cluster(monkeypatch):
    """A fake clock and a sequence of (workload, pods) reads, or (workload, pods, Warning Events);
    the last one repeats."""
    state = {"now": parse_time("2026-11-22T09:18:10Z"), "reads": [], "sleeps": [], "event_reads": 0}

    def list_events(api, namespace):
        state["event_reads"] += 1
        if isinstance(state.get("events_error"), Exception):
            raise state["events_error"]
        return state["current"][2] if len(state["current"]) > 2 else []

    def read_workload(api, kind, namespace, name):
        state["reads"].append((kind, namespace, name))
        sequence = state["sequence"]
        state["current"] = sequence.pop(0) if len(sequence) > 1 else sequence[0]
        if isinstance(state["current"], Exception):
            raise state["current"]
        return state["current"][0]

    def sleep(seconds):
        state["sleeps"].append(seconds)
        state["now"] += seconds

    monkeypatch.setattr(k8s_client, "api_client", lambda kubeconfig, context, pool_size=None: object())
    monkeypatch.setattr(training_job_wait, "read_workload", read_workload)
    monkeypatch.setattr(training_job_wait, "list_pods", lambda api, namespace, selector: state["current"][1])
    monkeypatch.setattr(training_job_wait, "list_events", list_events)
    monkeypatch.setattr(training_job_wait.time, "sleep", sleep)
    monkeypatch.setattr(training_job_wait.time, "time", lambda: state["now"])
    return state


def args(**extra):
    base = {
        "kind": "Job",
        "name": "rn-pending",
        "namespace": "gl-cap",
        "pod_selector": SELECTOR,
        "expected_pods": 2,
    }
    base.update(extra)
    return base


def test_waits_until_the_job_completes(run_module, cluster):
    running = load("job-pending-unschedulable.yaml")
    cluster["sequence"] = [
        (running, []),
        (running, [load("pod-succeeded.yaml")]),
        (load("job-complete.yaml"), [load("pod-succeeded.yaml")]),
    ]
    run = run_module(training_job_wait.main, args(timeout=60, poll_interval=2))
    assert run.exit_code == 0, run.result
    assert run.result["finished"] and run.result["succeeded"] and not run.result["timed_out"]
    assert run.result["phase"] == "Succeeded"
    assert run.result["counts"]["succeeded"] == 1
    assert len(cluster["reads"]) == 3 and cluster["sleeps"] == [2, 2]


def test_a_failed_job_fails_the_task_naming_the_pod(run_module, cluster):
    cluster["sequence"] = [(load("job-failed-backoff.yaml"), [load("pod-failed-exit-3.yaml")])]
    run = run_module(training_job_wait.main, args(name="rn-fail"))
    assert run.failed
    assert run.result["msg"].startswith("Job gl-cap/rn-fail failed (BackoffLimitExceeded")
    assert "exited with code 3 (Error)" in run.result["msg"]


def test_the_deadline_ends_the_wait_naming_the_stuck_pods(run_module, cluster):
    cluster["sequence"] = [(load("job-pending-unschedulable.yaml"), [load("pod-unschedulable.yaml")])]
    started = cluster["now"]
    run = run_module(
        training_job_wait.main, args(timeout=30, poll_interval=7, started=started, fail_on_failure=False)
    )
    assert run.exit_code == 0 and not run.failed
    result = run.result
    assert result["finished"] and result["timed_out"] and not result["succeeded"]
    assert result["message"].startswith(
        "Job gl-cap/rn-pending did not finish within 30 s: it is Running; "
        "stuck pods: rn-pending-0-77jrl: Pending for 30 s, "
        "Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )
    # The last sleep is cut short so that the last read happens at the deadline, never after.
    assert cluster["sleeps"] == [7, 7, 7, 7, 2] and cluster["now"] == started + 30
    assert result["remaining"] == 0


def test_a_window_returns_progress_before_the_end(run_module, cluster):
    cluster["sequence"] = [(load("job-pending-unschedulable.yaml"), [load("pod-unschedulable.yaml")])]
    run = run_module(
        training_job_wait.main,
        args(timeout=600, window=10, poll_interval=5, slow_after=5, fail_on_failure=False),
    )
    result = run.result
    assert not result["finished"] and not result["timed_out"]
    assert result["progress"].startswith(
        "Job gl-cap/rn-pending: Running; pods: 1 pending, 0 running, 0 succeeded, 0 failed of 2 expected"
    )
    assert result["slow_pods"] and result["stuck_pods"]
    assert cluster["now"] - parse_time("2026-11-22T09:18:10Z") == 10


def test_pods_seen_in_an_earlier_window_are_still_named(run_module, cluster):
    earlier = [
        dict(
            training_job_wait.judge("PyTorchJob", "x", "ns", None, [load("pod-failed-exit-3.yaml")], None)[
                "pods"
            ][0]
        )
    ]
    cluster["sequence"] = [(load("pytorchjob-failed.yaml"), [])]
    run = run_module(
        training_job_wait.main,
        args(kind="PyTorchJob", name="rn-ptjfail", seen_pods=earlier, fail_on_failure=False),
    )
    assert "rn-fail-0-mmt6j: Failed (last seen; the pod is gone)" in run.result["message"]


def test_read_errors_and_bad_arguments_fail(run_module, cluster):
    cluster["sequence"] = [training_job_wait.ReadError("cannot read Job gl-cap/rn: 403 Forbidden")]
    run = run_module(training_job_wait.main, args())
    assert run.failed and run.result["msg"] == "cannot read Job gl-cap/rn: 403 Forbidden"
    run = run_module(training_job_wait.main, args(poll_interval=0))
    assert run.failed and "poll_interval at least 1 second" in run.result["msg"]


def test_an_mpijob_that_failed_fails_the_task_naming_the_launchers_exit_code(run_module, cluster):
    cluster["sequence"] = [
        (load("mpijob-running.yaml"), [load("pod-mpijob-launcher-running.yaml")]),
        (load("mpijob-failed.yaml"), [load("pod-mpijob-launcher-failed.yaml")]),
    ]
    run = run_module(
        training_job_wait.main,
        args(kind="MPIJob", name="nt-fail", namespace="nt-cap", expected_pods=3, poll_interval=1),
    )
    assert run.failed
    assert run.result["msg"].startswith("MPIJob nt-cap/nt-fail failed (MPIJobMPIJobFailed: ")
    assert (
        "nt-fail-launcher: Failed on gpu-node-0, Error: container mpi-launcher exited with code 3"
        in (run.result["msg"])
    )
    assert cluster["reads"][0] == ("MPIJob", "nt-cap", "nt-fail")


def test_an_mpijob_whose_workers_never_schedule_ends_at_the_deadline_naming_them(run_module, cluster):
    pods = [load("pod-mpijob-launcher-running.yaml"), load("pod-mpijob-worker-unschedulable.yaml")]
    cluster["sequence"] = [(load("mpijob-workers-unschedulable.yaml"), pods)]
    cluster["now"] = parse_time(pods[1]["metadata"]["creationTimestamp"])
    run = run_module(
        training_job_wait.main,
        args(
            kind="MPIJob",
            name="nt-stuck",
            namespace="nt-cap",
            timeout=20,
            poll_interval=5,
            fail_on_failure=False,
        ),
    )
    result = run.result
    assert result["finished"] and result["timed_out"] and not result["succeeded"]
    assert result["message"].startswith(
        "MPIJob nt-cap/nt-stuck did not finish within 20 s: it is Running; stuck pods: nt-stuck-worker-0: "
        "Pending for 20 s, Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )
    assert "nt-stuck-launcher: Running" in result["message"]


def test_an_mpijob_is_read_from_the_training_operators_api(monkeypatch):
    calls = []

    class CustomObjectsApi:
        def __init__(self, api):
            pass

        def get_namespaced_custom_object(self, *args):
            calls.append(args)
            return load("mpijob-running.yaml")

    monkeypatch.setattr(training_job_wait.client, "CustomObjectsApi", CustomObjectsApi)
    job = training_job_wait.read_workload(object(), "MPIJob", "nt-cap", "nt-ok")
    assert calls == [("kubeflow.org", "v1", "nt-cap", "mpijobs", "nt-ok")]
    assert job["kind"] == "MPIJob"


# --------------------------------------------------------------------------------------
# the stuck time: refusals and stuck pods end the wait before the deadline
# --------------------------------------------------------------------------------------

STUCK = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "stuck"


def stuck_fixture(name):
    return yaml.safe_load((STUCK / name).read_text())


def quota_reads():
    """The harness's Indexed Job whose second pod the quota refuses: (job, pods, Events)."""
    return (
        stuck_fixture("job-quota.yaml"),
        stuck_fixture("job-quota-pods.yaml"),
        stuck_fixture("job-quota-events.yaml"),
    )


FIRST_REFUSAL = parse_time("2026-11-29T03:34:57Z")


def quota_args(**extra):
    return args(name="rn-quota", namespace="st-quota", expected_pods=2, **extra)


def test_a_quota_refusal_ends_the_wait_at_the_stuck_time_naming_the_quota_and_the_remedy(run_module, cluster):
    cluster["now"] = FIRST_REFUSAL + 2
    cluster["sequence"] = [quota_reads()]
    run = run_module(
        training_job_wait.main,
        quota_args(timeout=3600, stuck_timeout=15, poll_interval=5, started=FIRST_REFUSAL),
    )
    assert run.failed
    result = run.result
    assert result["finished"] and result["stuck"] and not result["timed_out"] and not result["succeeded"]
    # Read at 2, 7, 12 and 17 s after the first refusal: ended at the first read past 15 s.
    assert cluster["sleeps"] == [5, 5, 5] and cluster["now"] == FIRST_REFUSAL + 17
    message = result["msg"]
    assert message.startswith(
        "Job st-quota/rn-quota is stuck: it has not gone on for 17 s (stuck_timeout 15 s)"
    )
    assert "exceeded quota: gpus, requested: requests.nvidia.com/gpu=1" in message
    assert "to go on, raise the hard limits of ResourceQuota gpus in namespace st-quota" in message
    assert result["message"] == message
    (condition,) = result["stuck_conditions"]
    assert (condition["kind"], condition["cause"], condition["for_s"]) == ("refused", "quota", 17)
    assert cluster["event_reads"] == 4


def test_without_a_stuck_time_the_refusal_waits_for_the_deadline_and_reads_no_events(run_module, cluster):
    cluster["now"] = FIRST_REFUSAL + 3600
    cluster["sequence"] = [quota_reads()]
    run = run_module(
        training_job_wait.main,
        quota_args(timeout=30, stuck_timeout=0, poll_interval=10, fail_on_failure=False),
    )
    result = run.result
    assert result["finished"] and result["timed_out"] and not result["stuck"]
    assert result["message"].startswith("Job st-quota/rn-quota did not finish within 30 s: it is Running")
    assert result["stuck_conditions"] == [] and cluster["event_reads"] == 0


def test_a_refusal_that_clears_before_the_stuck_time_ends_nothing(run_module, cluster):
    job, pods, events = quota_reads()
    second = dict(pods[0], metadata=dict(pods[0]["metadata"], name="rn-quota-1-later"))
    # Refused for 10 s, then the quota is freed, both pods run, past the stuck time, and the Job completes.
    complete = dict(job, status={"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 2})
    cluster["now"] = FIRST_REFUSAL + 5
    cluster["sequence"] = [
        (job, pods, events),
        (job, pods + [second], events),
        (job, pods + [second], events),
        (job, pods + [second], events),
        (complete, pods + [second], events),
    ]
    run = run_module(training_job_wait.main, quota_args(timeout=3600, stuck_timeout=12, poll_interval=5))
    assert run.exit_code == 0, run.result
    assert run.result["succeeded"] and not run.result["stuck"]
    assert cluster["now"] == FIRST_REFUSAL + 25
    # Events are read while a pod is missing, not once every pod runs.
    assert cluster["event_reads"] == 1


def test_windowed_calls_measure_the_stuck_time_from_the_servers_times(run_module, cluster):
    """A role calls again per window: the second call, which began after the first refusal plus the
    stuck time minus its window, still ends at the stuck time - not a stuck time after its own start."""
    cluster["sequence"] = [quota_reads()]
    cluster["now"] = FIRST_REFUSAL + 1
    first = run_module(
        training_job_wait.main,
        quota_args(timeout=3600, stuck_timeout=20, window=10, poll_interval=5, fail_on_failure=False),
    )
    assert not first.result["finished"] and not first.result["stuck"]
    assert "stuck 11 s of 20 s: Job st-quota/rn-quota" in first.result["progress"]
    second = run_module(
        training_job_wait.main,
        quota_args(timeout=3600, stuck_timeout=20, window=10, poll_interval=5, fail_on_failure=False),
    )
    assert second.result["finished"] and second.result["stuck"]
    assert cluster["now"] == FIRST_REFUSAL + 21


def test_pods_the_scheduler_cannot_place_end_the_wait_without_the_right_to_read_events(
    run_module, cluster, monkeypatch
):
    warned = []
    monkeypatch.setattr(AnsibleModule, "warn", lambda self, message: warned.append(message))
    (pod,) = stuck_fixture("job-unschedulable-pods.yaml")
    cluster["sequence"] = [(stuck_fixture("job-unschedulable.yaml"), [pod], [])]
    cluster["events_error"] = training_job_wait.ReadError("cannot list the Events in st-ops: 403 Forbidden")
    cluster["now"] = parse_time("2026-11-29T03:34:58Z")
    run = run_module(
        training_job_wait.main,
        args(name="rn-pending", namespace="st-ops", expected_pods=1, stuck_timeout=20, poll_interval=5),
    )
    assert run.failed and run.result["stuck"]
    assert (
        "pod st-ops/rn-pending-c8ns9: not scheduled for 20 s (Unschedulable: 0/2 nodes are available: 2 "
        in (run.result["msg"])
    )
    assert "to go on, free cpu on the nodes" in run.result["msg"]
    # Asked once, then left alone, with a warning that says what is not seen.
    assert cluster["event_reads"] == 1
    assert warned == [
        "cannot list the Events in st-ops: 403 Forbidden: pods refused at admission are not seen before the "
        "deadline"
    ]


def test_a_negative_stuck_time_is_refused(run_module, cluster):
    cluster["sequence"] = [quota_reads()]
    run = run_module(training_job_wait.main, quota_args(stuck_timeout=-1))
    assert run.failed and "stuck_timeout must be 0 or more" in run.result["msg"]
    assert cluster["reads"] == []

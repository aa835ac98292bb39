"""stuck: admission refusals, pods the scheduler cannot place and containers that cannot start,
dated from the server's times, with the remedy; and the verdict that ends a wait at the stuck time.

Fixtures under tests/unit/fixtures/stuck: those whose comment says "harness" were read from the
test harness's API server (the Job controller, the scheduler, the Training Operator, kwok); the
others are written by hand in the API's form (a kubelet's image pulls, OpenShift's SCC admission),
each saying where its words come from.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils import stuck
from ansible_collections.gpuops.training.plugins.module_utils.job_status import judge, parse_time

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "stuck"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


def quota_case():
    return load("job-quota.yaml"), load("job-quota-pods.yaml"), load("job-quota-events.yaml")


# --------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------


def test_a_controllers_refusal_is_read_from_its_event_in_the_servers_words():
    event = load("job-quota-events.yaml")[0]
    assert stuck.refusal_text(event) == (
        'pods "rn-quota-1-87j6r" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1"
    )
    (operator,) = load("pytorchjob-limitrange-events.yaml")
    assert operator["reason"] == "FailedCreatePod"
    assert stuck.refusal_text(operator).startswith(
        'pods "rn-limits-worker-0" is forbidden: [maximum cpu usage'
    )


def test_an_mpijobs_refusal_is_its_mpijobfailed_event_not_the_empty_failedcreatepod():
    empty, failed = sorted(load("mpijob-quota-cleared-events.yaml"), key=lambda event: event["reason"])
    assert (empty["reason"], empty["message"].strip()) == ("FailedCreatePod", "Created worker pod:")
    assert stuck.refusal_text(empty) is None
    assert failed["reason"] == "MPIJobFailed"
    assert stuck.refusal_text(failed).startswith(
        'pods "nt-quota-worker-0" is forbidden: exceeded quota: gpus'
    )


@pytest.mark.parametrize(
    "event",
    [
        {"type": "Normal", "reason": "SuccessfulCreate", "message": "Created pod: rn-0-abcde"},
        {"type": "Warning", "reason": "FailedScheduling", "message": "0/2 nodes are available: ..."},
        {"type": "Normal", "reason": "FailedCreate", "message": "Error creating: x"},
        {
            "type": "Warning",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        },
        None,
        "text",
    ],
)
def test_other_events_are_no_refusals(event):
    assert stuck.refusal_text(event) is None


def test_event_times_read_core_and_events_api_forms():
    counted = load("pytorchjob-limitrange-events.yaml")[0]
    assert stuck.event_times(counted) == (
        parse_time(counted["firstTimestamp"]),
        parse_time(counted["lastTimestamp"]),
    )
    assert counted["count"] > 1 and stuck.event_times(counted)[1] > stuck.event_times(counted)[0]
    # The scheduler writes through events.k8s.io/v1: no firstTimestamp, an eventTime.
    scheduled = load("job-unschedulable-events.yaml")[0]
    assert scheduled["firstTimestamp"] is None
    assert stuck.event_times(scheduled) == (parse_time(scheduled["eventTime"]),) * 2
    series = {
        "eventTime": "2026-11-29T03:00:00.5Z",
        "series": {"count": 4, "lastObservedTime": "2026-11-29T03:02:00Z"},
    }
    assert stuck.event_times(series) == (
        parse_time("2026-11-29T03:00:00.5Z"),
        parse_time("2026-11-29T03:02:00Z"),
    )
    # As the Python client serializes them.
    client = {"firstTimestamp": "2026-11-29T03:34:57+00:00", "lastTimestamp": "2026-11-29T03:35:03+00:00"}
    assert stuck.event_times(client) == (
        parse_time("2026-11-29T03:34:57Z"),
        parse_time("2026-11-29T03:35:03Z"),
    )
    assert stuck.event_times({}) == (None, None)


# --------------------------------------------------------------------------------------
# remedies
# --------------------------------------------------------------------------------------


def test_each_refusal_gets_its_cause_and_remedy_from_real_messages():
    messages = {
        stuck.refusal_text(event)
        .split('" is forbidden: ', 1)[0]
        .split('"')[1]
        .rsplit("-", 1)[0]: stuck.refusal_text(event)
        for event in load("admission-refusals-events.yaml")
    }
    pod_security, service_account, priority = messages["psa"], messages["nosa"], messages["noprio"]
    assert stuck.refusal_cause(pod_security) == "podsecurity"
    assert "Pod Security level baseline:latest refuses the pods: label the namespace st-adm" in (
        stuck.refusal_remedy(pod_security, "st-adm")
    )
    assert "pod-security.kubernetes.io/enforce" in stuck.refusal_remedy(pod_security, "st-adm")
    assert stuck.refusal_cause(service_account) == "serviceaccount"
    assert stuck.refusal_remedy(service_account, "st-adm").startswith(
        "create the ServiceAccount trainer in namespace st-adm (the training_namespace role creates trainer)"
    )
    assert stuck.refusal_cause(priority) == "priorityclass"
    assert stuck.refusal_remedy(priority).startswith("create the PriorityClass gpu-training")


def test_a_quota_refusal_names_the_quota_and_what_to_do():
    text = stuck.refusal_text(load("job-quota-events.yaml")[0])
    assert stuck.refusal_cause(text) == "quota"
    assert stuck.refusal_remedy(text, "st-quota") == (
        "raise the hard limits of ResourceQuota gpus in namespace st-quota, free what other workloads there "
        "hold, or ask for less per pod (kubectl describe resourcequota gpus -n st-quota)"
    )
    must = 'pods "x" is forbidden: failed quota: compute: must specify limits.cpu for: trainer'
    assert stuck.refusal_cause(must) == "quota"
    assert "ResourceQuota compute" in stuck.refusal_remedy(must, "training")


@pytest.mark.parametrize(
    "text",
    [
        stuck.refusal_text(load("pytorchjob-limitrange-events.yaml")[0]),
        'pods "lrpod-rwd2z" is forbidden: [maximum memory usage per Pod is 4Gi, but limit is 16Gi, '
        "maximum cpu usage per Container is 2, but limit is 4]",
        'pods "psa-wv62n" is forbidden: maximum memory usage per Pod is 4Gi.  No limit is specified',
    ],
)
def test_a_limitrange_refusal_says_to_size_within_it(text):
    assert stuck.refusal_cause(text) == "limitrange"
    remedy = stuck.refusal_remedy(text, "st-lr")
    assert remedy.startswith("size the pods within the namespace's LimitRange")
    assert "kubectl describe limitrange -n st-lr" in remedy


def test_an_openshift_scc_refusal_says_to_run_training_namespace_and_use_its_serviceaccount():
    (event,) = load("openshift-scc-refusal-events.yaml")
    text = stuck.refusal_text(event)
    assert stuck.refusal_cause(text) == "scc"
    remedy = stuck.refusal_remedy(text, "training")
    assert "restricted-v2 refuses IPC_LOCK" in remedy
    assert "run the training_namespace role" in remedy and "ServiceAccount (trainer)" in remedy


def test_a_webhook_refusal_names_the_webhook_and_others_fall_back_to_the_message():
    # The form of the API server's message for a validating webhook's denial.
    text = 'admission webhook "validate.kyverno.svc-fail" denied the request: policy require-labels: no team'
    assert stuck.refusal_cause(text) == "webhook"
    assert "admission webhook validate.kyverno.svc-fail refuses" in stuck.refusal_remedy(text)
    assert stuck.refusal_cause('Pod "x" is invalid: spec.containers[0].image: Required value') == "other"
    assert (
        stuck.refusal_remedy("anything")
        == "change what the API server's message names, so that it admits the pods"
    )


@pytest.mark.parametrize(
    ("message", "remedies"),
    [
        (
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. no new claims to deallocate, "
            "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
            ["free nvidia.com/gpu on the nodes (other pods hold it) or add nodes that have it, or ask"],
        ),
        (
            "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated "
            "taint {node-role.kubernetes.io/control-plane: }. preemption: 0/3 nodes are available: 1 "
            "Insufficient cpu.",
            ["free cpu, memory on the nodes", "tolerate the nodes' taints"],
        ),
        (
            "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 2 node(s) were "
            "unschedulable. preemption: not eligible",
            ["make the pods' node selector and affinity match labels", "uncordon the cordoned nodes"],
        ),
        (
            "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints.",
            ["relax the spreading"],
        ),
        (
            "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            ["bind the PersistentVolumeClaims"],
        ),
        ("", ["free or add nodes that fit the pods, or ask for less per pod"]),
    ],
)
def test_a_scheduling_refusal_gets_a_remedy_per_reason(message, remedies):
    remedy = stuck.scheduling_remedy(message)
    for expected in remedies:
        assert expected in remedy, remedy


def test_container_remedies_by_reason_and_message():
    assert "is not on node real-node-0 and its pull policy is Never" in stuck.container_remedy(
        "ErrImageNeverPull", "", "localhost/x:1", "real-node-0"
    )
    denied = stuck.container_remedy("ErrImagePull", "unauthorized: authentication required", "r.example/p:1")
    assert denied.startswith("give the pods an image pull Secret whose credentials the registry accepts")
    missing = stuck.container_remedy("ErrImagePull", "manifest unknown: manifest unknown", "r.example/p:1")
    assert missing == "fix the image name or tag: the registry has no image r.example/p:1"
    unreachable = stuck.container_remedy(
        "ImagePullBackOff", "dial tcp [::1]:443: connect: connection refused", "x"
    )
    assert unreachable.startswith("let the nodes reach the registry of image x")
    assert "not a valid image name" in stuck.container_remedy("InvalidImageName", "", "Bad:Name")
    assert stuck.container_remedy("CreateContainerConfigError", 'secret "hub" not found') == (
        "create the Secret hub the pods reference, with the keys they name, or fix the reference"
    )
    assert "ConfigMap training/cfg" in stuck.container_remedy(
        "CreateContainerConfigError", "couldn't find key token in ConfigMap training/cfg"
    )
    assert "container runtime cannot create or start" in stuck.container_remedy("CreateContainerError", "x")


# --------------------------------------------------------------------------------------
# conditions
# --------------------------------------------------------------------------------------


def test_a_job_whose_second_pod_the_quota_refuses_is_refused_since_the_first_refusal():
    job, pods, events = quota_case()
    (condition,) = stuck.stuck_conditions("Job", "rn-quota", "st-quota", job, pods, events, expected_pods=2)
    assert condition["kind"] == "refused" and condition["cause"] == "quota"
    assert condition["object"] == "Job st-quota/rn-quota" and condition["reason"] == "FailedCreate"
    # Dated from the first refusal after the newest pod (created the same second), the words the last one's.
    assert condition["since"] == parse_time("2026-11-29T03:34:57Z")
    assert condition["detail"].startswith('pods "rn-quota-1-blrrl" is forbidden: exceeded quota: gpus')
    # Without the count of pods to expect, a refusal after the newest pod still says one is missing.
    assert stuck.stuck_conditions("Job", "rn-quota", "st-quota", job, pods, events) == [condition]


def test_a_refusal_clears_once_every_pod_is_there_or_a_pod_came_after_it():
    job, pods, events = quota_case()
    second = dict(pods[0], metadata=dict(pods[0]["metadata"], name="rn-quota-1-zzzzz"))
    assert stuck.stuck_conditions("Job", "rn-quota", "st-quota", job, pods + [second], events, 2) == []
    # The MPIJob's worker 0 was refused, then created when the quota was freed: nothing holds it.
    mpijob, workers, refusals = (
        load("mpijob-quota-cleared.yaml"),
        load("mpijob-quota-cleared-pods.yaml"),
        load("mpijob-quota-cleared-events.yaml"),
    )
    assert any(stuck.refusal_text(event) for event in refusals)
    assert stuck.stuck_conditions("MPIJob", "nt-quota", "st-ops", mpijob, workers, refusals) == []


def test_a_pod_that_failed_or_is_being_deleted_does_not_count_as_there():
    job, pods, events = quota_case()
    failed = dict(pods[0], status=dict(pods[0]["status"], phase="Failed"))
    (condition,) = stuck.stuck_conditions("Job", "rn-quota", "st-quota", job, [failed], events, 1)
    assert condition["cause"] == "quota"


def test_refusals_of_another_object_or_an_older_namesake_are_not_this_workloads():
    job, pods, events = quota_case()
    other = dict(job, metadata=dict(job["metadata"], uid="another-uid"))
    assert stuck.stuck_conditions("Job", "rn-quota", "st-quota", other, pods, events, 2) == []
    # Without uids, by kind and name, and only Events no older than the object.
    bare = [dict(event, involvedObject={"kind": "Job", "name": "rn-quota"}) for event in events]
    younger = dict(job, metadata={"name": "rn-quota", "creationTimestamp": "2026-11-29T04:00:00Z"})
    assert stuck.stuck_conditions("Job", "rn-quota", "st-quota", younger, [], bare, 2) == []
    older = dict(job, metadata={"name": "rn-quota", "creationTimestamp": "2026-11-29T03:00:00Z"})
    assert stuck.stuck_conditions("Job", "rn-quota", "st-quota", older, [], bare, 2)[0]["cause"] == "quota"
    assert stuck.stuck_conditions("PyTorchJob", "rn-quota", "st-quota", older, [], bare, 2) == []


def test_a_pytorchjob_the_limitrange_refuses_holds_since_its_first_refusal_with_no_pod():
    job = load("pytorchjob-limitrange.yaml")
    events = load("pytorchjob-limitrange-events.yaml")
    (condition,) = stuck.stuck_conditions("PyTorchJob", "rn-limits", "st-lr", job, [], events, 2)
    assert condition["cause"] == "limitrange"
    assert condition["since"] == parse_time(events[0]["firstTimestamp"])
    assert condition["object"] == "PyTorchJob st-lr/rn-limits"


def test_a_trainjobs_refusals_are_those_of_its_jobsets_jobs():
    job, _pods, events = quota_case()
    trainjob = {
        "metadata": {
            "name": "rn",
            "namespace": "st-quota",
            "uid": "t-1",
            "creationTimestamp": "2026-11-29T03:30:00Z",
        }
    }
    child = [dict(event, involvedObject=dict(event["involvedObject"], name="rn-node-0")) for event in events]
    (condition,) = stuck.stuck_conditions("TrainJob", "rn", "st-quota", trainjob, [], child, 2)
    assert condition["object"] == "TrainJob st-quota/rn" and condition["cause"] == "quota"
    unrelated = [
        dict(event, involvedObject=dict(event["involvedObject"], name="other-node-0")) for event in events
    ]
    assert stuck.stuck_conditions("TrainJob", "rn", "st-quota", trainjob, [], unrelated, 2) == []


def test_an_unschedulable_pod_holds_since_its_podscheduled_transition_and_clears_when_scheduled():
    job = load("job-unschedulable.yaml")
    (pod,) = load("job-unschedulable-pods.yaml")
    (condition,) = stuck.stuck_conditions(
        "Job", "rn-pending", "st-ops", job, [pod], load("job-unschedulable-events.yaml")
    )
    assert condition["kind"] == "unschedulable"
    assert condition["object"] == "pod st-ops/rn-pending-c8ns9"
    assert condition["since"] == parse_time("2026-11-29T03:34:58Z")
    assert condition["detail"].startswith("0/2 nodes are available: 2 Insufficient cpu.")
    assert condition["remedy"].startswith("free cpu on the nodes")
    scheduled = dict(
        pod,
        status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    )
    assert stuck.stuck_conditions("Job", "rn-pending", "st-ops", job, [scheduled], []) == []
    gated = dict(
        pod,
        status={
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        },
    )
    assert stuck.stuck_conditions("Job", "rn-pending", "st-ops", job, [gated], []) == []


def test_an_image_pull_back_off_holds_since_the_first_failed_pull_naming_pod_node_image_and_why():
    case = load("pod-image-pull-backoff.yaml")
    (condition,) = stuck.stuck_conditions(
        "PyTorchJob", "rn-5c1e0a", "training", {}, [case["pod"]], case["events"]
    )
    assert condition["kind"] == "container" and condition["cause"] == "image"
    assert condition["object"] == "pod training/rn-5c1e0a-worker-0 on node real-node-0"
    assert condition["reason"] == "ImagePullBackOff"
    assert condition["since"] == parse_time("2026-11-29T03:40:03Z")
    assert condition["detail"].startswith(
        'container pytorch (image localhost/gpuops-trainer:not-built): Back-off pulling image "localhost/'
    )
    assert "connection refused" in condition["detail"]
    assert condition["remedy"].startswith(
        "let the nodes reach the registry of image localhost/gpuops-trainer:not-built"
    )
    # Without its Events, since the pod was scheduled.
    (bare,) = stuck.stuck_conditions("PyTorchJob", "rn-5c1e0a", "training", {}, [case["pod"]], [])
    assert bare["since"] == parse_time("2026-11-29T03:40:01Z")


def test_an_older_kubelets_bare_back_off_takes_the_reason_from_the_last_failed_pull():
    case = load("pod-image-pull-backoff.yaml")
    pod = case["pod"]
    waiting = {
        "reason": "ImagePullBackOff",
        "message": 'Back-off pulling image "localhost/gpuops-trainer:not-built"',
    }
    pod["status"]["containerStatuses"][0]["state"] = {"waiting": waiting}
    (condition,) = stuck.stuck_conditions("PyTorchJob", "rn-5c1e0a", "training", {}, [pod], case["events"])
    assert (
        '(Failed to pull image "localhost/gpuops-trainer:not-built": initializing source'
        in condition["detail"]
    )


@pytest.mark.parametrize(
    ("fixture", "reason", "remedy"),
    [
        ("pod-image-pull-unauthorized.yaml", "ErrImagePull", "give the pods an image pull Secret"),
        (
            "pod-err-image-never-pull.yaml",
            "ErrImageNeverPull",
            "is not on node real-node-0 and its pull policy is Never",
        ),
        ("pod-create-container-config-error.yaml", "CreateContainerConfigError", "create the Secret hub"),
    ],
)
def test_containers_that_cannot_start_are_named_with_the_remedy(fixture, reason, remedy):
    case = load(fixture)
    (condition,) = stuck.stuck_conditions("Job", "rn", "training", {}, [case["pod"]], case["events"])
    assert condition["reason"] == reason and remedy in condition["remedy"], condition
    expected_since = [stuck.event_times(event)[0] for event in case["events"]] or [
        parse_time(case["pod"]["status"]["conditions"][0]["lastTransitionTime"])
    ]
    assert condition["since"] == min(expected_since)


def test_a_crash_loop_or_a_running_container_is_not_stuck_here():
    case = load("pod-image-pull-backoff.yaml")
    pod = case["pod"]
    pod["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}
    }
    assert stuck.stuck_conditions("Job", "rn", "training", {}, [pod], case["events"]) == []
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-11-29T03:45:00Z"}}
    pod["status"]["phase"] = "Running"
    assert stuck.stuck_conditions("Job", "rn", "training", {}, [pod], case["events"]) == []


def test_a_container_that_ran_before_is_dated_from_its_last_end_not_from_older_events():
    case = load("pod-create-container-config-error.yaml")
    pod = case["pod"]
    pod["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 1, "finishedAt": "2026-11-29T05:00:00Z"}
    }
    (condition,) = stuck.stuck_conditions("Job", "rn", "training", {}, [pod], case["events"])
    assert condition["since"] == parse_time("2026-11-29T05:00:00Z")


def test_events_are_read_only_while_pods_are_missing_or_not_running():
    job, pods, _events = quota_case()
    assert stuck.needs_events(job, pods, 2)
    assert not stuck.needs_events(job, pods, 1)
    assert stuck.needs_events(job, [], 0)
    assert not stuck.needs_events(None, [], 2)
    (pending,) = load("job-unschedulable-pods.yaml")
    assert stuck.needs_events(job, [pending], 1)
    pulling = load("pod-image-pull-backoff.yaml")["pod"]
    pulling["status"]["phase"] = "Running"
    assert stuck.needs_events(job, [pulling], 1)


# --------------------------------------------------------------------------------------
# verdicts
# --------------------------------------------------------------------------------------


def quota_verdict(now, stuck_timeout):
    job, pods, events = quota_case()
    verdict = judge("Job", "rn-quota", "st-quota", job, pods, now, expected_pods=2)
    conditions = stuck.stuck_conditions("Job", "rn-quota", "st-quota", job, pods, events, 2)
    return stuck.judge_stuck(verdict, conditions, now, stuck_timeout, expected_pods=2)


def test_a_refusal_ends_the_verdict_at_the_stuck_time_naming_object_reason_and_remedy():
    first = parse_time("2026-11-29T03:34:57Z")
    early = quota_verdict(first + 14.9, 15)
    assert not early["finished"] and not early["stuck"] and early["message"] == ""
    assert early["stuck_conditions"][0]["for_s"] == 14.9
    assert early["progress"].endswith("; stuck 14 s of 15 s: Job st-quota/rn-quota")
    verdict = quota_verdict(first + 15, 15)
    assert verdict["finished"] and verdict["stuck"] and not verdict["succeeded"]
    assert verdict["phase"] == "Running"
    message = verdict["message"]
    assert message.startswith(
        "Job st-quota/rn-quota is stuck: it has not gone on for 15 s (stuck_timeout 15 s) and will not "
        "without a change. Job st-quota/rn-quota: the API server refuses its pods for 15 s (FailedCreate: "
        'pods "rn-quota-1-blrrl" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1); to go on, raise the hard "
        "limits of ResourceQuota gpus in namespace st-quota"
    ), message
    assert message.endswith(
        "Pods: 0 pending, 1 running, 0 succeeded, 0 failed of 2 expected (1 not created)."
    ), message


def test_a_stuck_time_of_0_never_ends_the_verdict_and_a_finished_workload_keeps_its_own():
    verdict = quota_verdict(parse_time("2026-11-29T03:34:57Z") + 86400, 0)
    assert not verdict["finished"] and not verdict["stuck"]
    assert verdict["stuck_conditions"][0]["for_s"] == 86400
    assert "stuck" not in verdict["progress"]
    done = {"finished": True, "succeeded": True, "message": "", "progress": "done"}
    conditions = [
        {"since": 0.0, "object": "x", "kind": "refused", "reason": "r", "detail": "d", "remedy": "m"}
    ]
    assert stuck.judge_stuck(done, conditions, 100.0, 10)["stuck"] is False
    assert done["finished"] and done["succeeded"]


def test_pods_refused_a_place_for_one_reason_are_named_together():
    job = load("job-unschedulable.yaml")
    (pod,) = load("job-unschedulable-pods.yaml")
    twin = dict(pod, metadata=dict(pod["metadata"], name="rn-pending-zzzzz"))
    now = parse_time("2026-11-29T03:35:20Z")
    verdict = judge("Job", "rn-pending", "st-ops", job, [pod, twin], now)
    conditions = stuck.stuck_conditions("Job", "rn-pending", "st-ops", job, [pod, twin], [])
    stuck.judge_stuck(verdict, conditions, now, 20)
    assert verdict["stuck"]
    assert (
        "pod st-ops/rn-pending-c8ns9, pod st-ops/rn-pending-zzzzz: not scheduled for 22 s (Unschedulable: "
        "0/2 nodes are available: 2 Insufficient cpu." in verdict["message"]
    ), verdict["message"]
    assert (
        "; to go on, free cpu on the nodes (other pods hold it) or add nodes that have it"
        in verdict["message"]
    )


# --------------------------------------------------------------------------------------
# a failed workload whose pods are gone
# --------------------------------------------------------------------------------------


def crash_looped_case():
    case = load("pytorchjob-crashloop-pods-gone.yaml")
    verdict = judge(
        "PyTorchJob", "rn-06523b", "training", case["job"], [], parse_time("2026-11-29T09:10:21Z")
    )
    return case, verdict


def test_a_job_failed_before_its_pods_were_seen_names_them_from_their_last_events():
    case, verdict = crash_looped_case()
    assert verdict["message"].endswith("no pod of it is left to tell why")
    stuck.name_gone_pods(verdict, case["job"], case["events"])
    # Each pod of this job once, with its newest Event; not the older namesake's pod nor
    # another job's.
    assert verdict["pod_events"] == [
        {
            "name": "rn-06523b-master-0",
            "reason": "BackOff",
            "message": "Back-off restarting failed container pytorch in pod "
            "rn-06523b-master-0_training(8d6f2e11-9a3b-4c7d-b1e0-2a4c6e8f0b12)",
            "count": 2,
        },
        {
            "name": "rn-06523b-worker-0",
            "reason": "BackOff",
            "message": "Back-off restarting failed container pytorch in pod "
            "rn-06523b-worker-0_training(5b0c9a44-2d51-4f0e-8c2b-7f1e0c3d6a10)",
            "count": 3,
        },
    ]
    message = verdict["message"]
    assert message.startswith(
        "PyTorchJob training/rn-06523b failed (PyTorchJobFailed: Job rn-06523b has failed because it"
        " has reached the specified backoff limit); its pods are gone, their last Warning Events: "
        "rn-06523b-master-0: BackOff: Back-off restarting failed container pytorch in pod "
    )
    assert "rn-06523b-worker-0: BackOff: Back-off restarting failed container pytorch" in message
    assert "(3 times)" in message and "no pod of it is left" not in message
    assert "the Training Operator deletes every pod of a job" in message


def test_pods_the_wait_saw_or_a_job_not_failed_keep_their_own_words():
    case, verdict = crash_looped_case()
    seen = dict(verdict, pods=[{"name": "rn-06523b-worker-0", "phase": "Running", "gone": True}])
    before = dict(seen)
    stuck.name_gone_pods(seen, case["job"], case["events"])
    assert seen == before
    running = dict(verdict, phase="Running", message="")
    stuck.name_gone_pods(running, case["job"], case["events"])
    assert "pod_events" not in running and running["message"] == ""
    # No Event of its pods: the message says so as before.
    stuck.name_gone_pods(verdict, case["job"], case["events"][-1:])
    assert verdict["message"].endswith("no pod of it is left to tell why")

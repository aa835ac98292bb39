#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: training_job_wait
short_description: Wait for a training Job, PyTorchJob, MPIJob or TrainJob to end, naming the pods that hold it up
description:
  - Polls a batch/v1 Job, a Kubeflow PyTorchJob or MPIJob (C(kubeflow.org/v1)) or a Kubeflow Trainer
    TrainJob (C(trainer.kubeflow.org/v1alpha1)) and the pods that O(pod_selector) finds, until the
    workload has succeeded or failed, or until its deadline (O(started) + O(timeout)). It never
    waits longer than that.
  - "Every read counts the pods pending, running, succeeded and failed and names the slow or
    stuck ones with their phase and reason - the scheduler's reason for a pod it cannot place
    (C(Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu)), a container
    that cannot start (C(ImagePullBackOff), C(CrashLoopBackOff)), a failed container's exit code."
  - With O(window) the module returns after that many seconds even when the workload has not
    ended, with RV(finished=false) and a one-line RV(progress); a role calls it again (passing
    RV(pods) back as O(seen_pods)) to show progress while it waits.
  - A PyTorchJob succeeds when its master does, an MPIJob when its launcher does; workers may
    still be running then.
  - The timeout message names every unfinished pod and its state, including pods that were
    seen earlier and are gone (a controller deletes pods at its own deadline).
  - A container ended by the OOM killer is named as C(OOMKilled) with its exit code 137 and its memory limit,
    whether it ended the pod or was restarted since.
  - "A workload that will not go on without a change ends the wait, failed, once that has lasted
    O(stuck_timeout) seconds, not at the deadline: the API server refuses its pods (its controller's
    C(FailedCreate) or C(FailedCreatePod) Events: a ResourceQuota exceeded, a LimitRange, Pod Security,
    OpenShift's SecurityContextConstraints, a missing ServiceAccount or PriorityClass, an admission
    webhook), the scheduler cannot place a pod (C(Unschedulable)), or a container cannot start (its image
    cannot be pulled, C(ImagePullBackOff), C(ErrImageNeverPull), ..., or it cannot be created,
    C(CreateContainerConfigError), C(CreateContainerError), C(RunContainerError)). The message names the
    object (the workload, or the pod and its node), the reason in the server's words and what to change."
  - How long a condition has lasted is read from the server's times (the Events' first time, the
    pod's C(PodScheduled) condition, its creation), so that calls made one after another (O(window))
    measure one span. A condition that clears (the quota is freed, the pod is scheduled) ends nothing.
    The module reads the namespace's Warning Events only while pods are missing or not running.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
  - gpuops.training.kubernetes

options:
  kind:
    description: Kind of the workload.
    type: str
    required: true
    choices: [Job, PyTorchJob, MPIJob, TrainJob]
  name:
    description: Name of the workload.
    type: str
    required: true
  namespace:
    description: Namespace of the workload and its pods.
    type: str
    required: true
  pod_selector:
    description: Label selector of the workload's pods, for example V(gpuops.training/run-id=retinanet-20261122T050000Z).
    type: str
    required: true
  expected_pods:
    description: Pods the workload should have, for the progress line; 0 when unknown.
    type: int
    default: 0
  timeout:
    description: Seconds from O(started) after which the wait gives up.
    type: int
    default: 3600
  started:
    description: When the wait began, in seconds since the epoch; the time of this call when left out.
    type: float
  window:
    description:
      - Seconds this call watches before it returns with RV(finished=false); 0 watches until the
        workload ends or the deadline passes.
    type: int
    default: 0
  window_growth:
    description:
      - With O(window), each call watches at least this fraction of the time since O(started),
        so that a role calling again per window keeps its progress lines frequent at first and
        its number of calls small on a wait of days (each call is one more nested include,
        and Ansible fails at about 240).
      - 0 keeps every window at O(window).
    type: float
    default: 0
  poll_interval:
    description:
      - Seconds between two reads at most. Between reads the module watches the workload, and a
        change to it (its status follows its pods) brings the next read forward, at most one a
        second, so a workload that ends is seen within about a second.
    type: int
    default: 5
  slow_after:
    description: A pod still Pending after this many seconds is reported as slow.
    type: int
    default: 120
  stuck_timeout:
    description:
      - Seconds a condition that will not clear without a change (pods refused at admission, a pod the
        scheduler cannot place, a container whose image cannot be pulled or that cannot be created) may
        last before the wait ends, failed, naming the object, the reason and the remedy.
      - 0 waits to the deadline whatever holds the workload.
      - A quota refusal clears when other workloads free the quota; to queue behind them, use Kueue or 0.
      - Refusals are dated from their Events, which the API server keeps an hour by default
        (C(--event-ttl)); a refusal may therefore not end a wait whose O(stuck_timeout) is longer.
      - The times are the server's and the time now is the controller's, so their clocks should agree.
    type: int
    default: 600
  settle:
    description:
      - Seconds to keep watching, once the workload has failed, while some of its pods are still
        running or pending. The pod that failed first is usually the cause and the others end
        just after it (their peer is gone); waiting for them gives each pod's last state in
        RV(message) and their last lines to the logs read afterwards. 0 returns at once; the
        wait never goes past the deadline (O(started) + O(timeout)) either way.
    type: int
    default: 30
  seen_pods:
    description: RV(pods) of an earlier call, so that pods deleted since are still named.
    type: list
    elements: dict
    default: []
  fail_on_failure:
    description:
      - Fail the task when the workload failed or the deadline passed. With V(false) the task
        succeeds and RV(succeeded), RV(timed_out) and RV(message) tell the outcome.
    type: bool
    default: true
requirements:
  - kubernetes (the Python client)
seealso:
  - module: kubernetes.core.k8s_info
  - module: gpuops.training.operator_wait
"""

EXAMPLES = r"""
- name: Wait up to an hour for the PyTorchJob, failing with the stuck pods named
  gpuops.training.training_job_wait:
    kind: PyTorchJob
    name: retinanet-3f9a1c
    namespace: training
    pod_selector: gpuops.training/run-id=retinanet-20261122T050000Z
    expected_pods: 2
    timeout: 3600

- name: Wait up to a day, but end after 5 minutes of pods refused by a quota or never scheduled
  gpuops.training.training_job_wait:
    kind: Job
    name: retinanet-3f9a1c
    namespace: training
    pod_selector: gpuops.training/run-id=retinanet-20261122T050000Z
    expected_pods: 2
    timeout: 86400
    stuck_timeout: 300

- name: Watch an Indexed Job for 30 seconds at a time and report progress
  gpuops.training.training_job_wait:
    kind: Job
    name: retinanet-3f9a1c
    namespace: training
    pod_selector: gpuops.training/run-id=retinanet-20261122T050000Z
    started: "{{ wait_started }}"
    timeout: 3600
    window: 30
    seen_pods: "{{ previous.pods | default([]) }}"
    fail_on_failure: false
  register: previous
"""

RETURN = r"""
finished:
  description: Whether the wait is over - the workload succeeded or failed, it was stuck for O(stuck_timeout), or the deadline passed.
  returned: always
  type: bool
succeeded:
  description: Whether the workload succeeded.
  returned: always
  type: bool
timed_out:
  description: Whether the deadline passed before the workload ended.
  returned: always
  type: bool
phase:
  description:
    - C(Pending), C(Running), C(Succeeded), C(Failed), C(Suspended) or C(NotFound).
    - A workload queued in Kueue is C(Suspended) until Kueue admits it, and O(timeout) counts that time too.
  returned: always
  type: str
queue:
  description: The Kueue LocalQueue the workload was submitted to (its C(kueue.x-k8s.io/queue-name) label), or null.
  returned: always
  type: str
  sample: gpu-queue
detail:
  description: "The controller's reason and message for the phase, such as C(BackoffLimitExceeded: Job has reached the specified backoff limit)."
  returned: always
  type: str
counts:
  description: Pods by phase - pending, running, succeeded, failed, unknown and total.
  returned: always
  type: dict
  sample: {pending: 1, running: 1, succeeded: 0, failed: 0, unknown: 0, total: 2}
pods:
  description:
    - Every pod - name, phase, node, age_s, restarts, reason, detail, exit_code, stuck, slow, kills;
      pods seen earlier and gone now carry C(gone=true).
    - C(kills) lists the pod's containers that the OOM killer (reason C(OOMKilled)) or a SIGKILL (exit code
      137) ended, now or before a restart - C(pod), C(namespace), C(container), C(exit_code), C(reason),
      C(oom_killed), C(previous) (the container before the last restart), C(finished_at), C(restarts) and
      C(memory_limit) (the container's limit in its spec). M(gpuops.training.training_log_info) names the
      killed ranks with their last memory sample from them (its C(container_kills) option).
  returned: always
  type: list
  elements: dict
slow_pods:
  description: The pods Pending longer than O(slow_after) or stuck, described in one line each.
  returned: always
  type: list
  elements: str
  sample: ["retinanet-3f9a1c-0-x7k2p: Pending for 130 s, Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."]
stuck_pods:
  description: The pods that will not go on without a change (unschedulable, image pull, crash loop).
  returned: always
  type: list
  elements: str
pod_events:
  description:
    - The workload's pods named from their last Warning Events when it failed before the wait saw
      any of them (the Training Operator deletes the pods of a job that reaches its backoffLimit).
  returned: when the workload failed with no pod left and its pods' Events were readable
  type: list
  elements: dict
  sample: [{"name": "rn-06523b-worker-0", "reason": "BackOff", "count": 3,
            "message": "Back-off restarting failed container pytorch in pod rn-06523b-worker-0_training(5b0c9a44-...)"}]
stuck:
  description: Whether the wait ended because a condition in RV(stuck_conditions) lasted O(stuck_timeout) seconds.
  returned: always
  type: bool
stuck_conditions:
  description:
    - What keeps the workload from going on now, oldest first (read with O(stuck_timeout) above 0) -
      C(kind) (C(refused), C(unschedulable) or C(container)), C(object) (C(Job ns/name), C(pod ns/name on
      node x)), C(reason) (C(FailedCreate), C(Unschedulable), C(ImagePullBackOff), ...), C(cause)
      (C(quota), C(limitrange), C(podsecurity), C(scc), C(serviceaccount), C(priorityclass), C(webhook),
      C(other), C(scheduling), C(image), C(create)), C(detail) (the server's words), C(remedy), C(since)
      (seconds since the epoch, the server's time), C(for_s) and C(pods).
  returned: always
  type: list
  elements: dict
  sample:
    - kind: refused
      object: Job training/retinanet-3f9a1c
      reason: FailedCreate
      cause: quota
      detail: >-
        pods "retinanet-3f9a1c-1-x7k2p" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=8,
        used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8
      remedy: >-
        raise the hard limits of ResourceQuota gpus in namespace training, free what other workloads there hold,
        or ask for less per pod (kubectl describe resourcequota gpus -n training)
      since: 1795323610.0
      for_s: 42.0
      pods: []
progress:
  description: One line with the phase, the pod counts and the slow pods.
  returned: always
  type: str
message:
  description:
    - On failure or timeout, what failed and the state of every unfinished pod; empty otherwise.
    - When the workload was stuck, what holds it, for how long, and what to change.
  sample: >-
    Job training/retinanet-3f9a1c is stuck: it has not gone on for 600 s (stuck_timeout 600 s) and will not
    without a change. Job training/retinanet-3f9a1c: the API server refuses its pods for 600 s (FailedCreate:
    pods "retinanet-3f9a1c-1-x7k2p" is forbidden: exceeded quota: gpus, ...); to go on, raise the hard limits
    of ResourceQuota gpus in namespace training, free what other workloads there hold, or ask for less per pod
    (kubectl describe resourcequota gpus -n training). Pods: 0 pending, 1 running, 0 succeeded, 0 failed of 2
    expected (1 not created).
  returned: always
  type: str
elapsed:
  description: Seconds since O(started).
  returned: always
  type: float
remaining:
  description: Seconds left until the deadline.
  returned: always
  type: float
"""

import math
import time

from ansible_collections.gpuops.training.plugins.module_utils.job_status import (
    judge,
    settling,
    timeout_message,
)
from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    ApiException,
    ChangeWatch,
    build_kubernetes_module,
    client,
    connect,
    connection_error_message,
    growing_window,
    poll,
    wait_options_problem,
)
from ansible_collections.gpuops.training.plugins.module_utils.stuck import (
    judge_stuck,
    name_gone_pods,
    needs_events,
    stuck_conditions,
)

CUSTOM_KINDS = {
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "MPIJob": ("kubeflow.org", "v1", "mpijobs"),
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
}


class ReadError(Exception):
    pass


def read_workload(api, kind, namespace, name):
    """The workload as a dict, or None when it does not exist."""
    try:
        if kind == "Job":
            job = client.BatchV1Api(api).read_namespaced_job(name, namespace)
            return api.sanitize_for_serialization(job)
        group, version, plural = CUSTOM_KINDS[kind]
        return client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, namespace, plural, name
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise ReadError(
            "cannot read %s %s/%s: %s %s" % (kind, namespace, name, error.status, error.reason)
        ) from error


def workload_watch(api, kind, namespace, name):
    """A pause between reads that ends when the workload changes (its status follows its pods)."""
    if kind == "Job":
        return ChangeWatch(name, client.BatchV1Api(api).list_namespaced_job, namespace)
    group, version, plural = CUSTOM_KINDS[kind]
    return ChangeWatch(
        name, client.CustomObjectsApi(api).list_namespaced_custom_object, group, version, namespace, plural
    )


def list_pods(api, namespace, selector):
    try:
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)
    except ApiException as error:
        raise ReadError(
            "cannot list the pods %s in %s: %s %s" % (selector, namespace, error.status, error.reason)
        ) from error
    return api.sanitize_for_serialization(pods).get("items") or []


def list_events(api, namespace):
    """The namespace's Warning Events (a controller's refusal, the scheduler's, the kubelet's)."""
    try:
        events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="type=Warning")
    except ApiException as error:
        raise ReadError(
            "cannot list the Events in %s: %s %s" % (namespace, error.status, error.reason)
        ) from error
    return api.sanitize_for_serialization(events).get("items") or []


def main():
    module = build_kubernetes_module(
        {
            "kind": {"type": "str", "required": True, "choices": ["Job", "PyTorchJob", "MPIJob", "TrainJob"]},
            "name": {"type": "str", "required": True},
            "namespace": {"type": "str", "required": True},
            "pod_selector": {"type": "str", "required": True},
            "expected_pods": {"type": "int", "default": 0},
            "timeout": {"type": "int", "default": 3600},
            "started": {"type": "float"},
            "window": {"type": "int", "default": 0},
            "window_growth": {"type": "float", "default": 0.0},
            "poll_interval": {"type": "int", "default": 5},
            "slow_after": {"type": "int", "default": 120},
            "stuck_timeout": {"type": "int", "default": 600},
            "settle": {"type": "int", "default": 30},
            "seen_pods": {"type": "list", "elements": "dict", "default": []},
            "fail_on_failure": {"type": "bool", "default": True},
        }
    )
    params = module.params
    problem = wait_options_problem(params, ("timeout", "window", "slow_after", "settle", "stuck_timeout"))
    if problem:
        module.fail_json(msg=problem)
    for option in ("name", "namespace"):
        if not params[option].strip():
            module.fail_json(msg="%s must name the workload's %s, got %r" % (option, option, params[option]))
    if params["started"] is not None and not math.isfinite(params["started"]):
        module.fail_json(msg="started must be a time in seconds since the epoch, got %s" % params["started"])
    if not 0 <= params["window_growth"] <= 1:
        module.fail_json(msg="window_growth must be a fraction from 0 to 1, got %s" % params["window_growth"])
    api = connect(module)

    # The deadline may lie in an earlier call's time (started): the wait runs on the epoch clock.
    started = params["started"] if params["started"] is not None else time.time()
    deadline = started + params["timeout"]
    seen = params["seen_pods"]
    pause = workload_watch(api, params["kind"], params["namespace"], params["name"])
    events_readable = True

    def read_events(obj, pods):
        # Only while something is missing or not running, and never fatal: a wait without the
        # right to list Events still ends at the deadline, and at the stuck time for pods the
        # scheduler cannot place.
        nonlocal events_readable
        if not (
            params["stuck_timeout"] and events_readable and needs_events(obj, pods, params["expected_pods"])
        ):
            return []
        try:
            return list_events(api, params["namespace"])
        except ReadError as error:
            events_readable = False
            module.warn("%s: pods refused at admission are not seen before the deadline" % error)
            return []

    def read_and_judge():
        nonlocal seen
        try:
            obj = read_workload(api, params["kind"], params["namespace"], params["name"])
            pause.seen(obj)
            pods = list_pods(api, params["namespace"], params["pod_selector"])
            events = read_events(obj, pods)
        except ReadError as error:
            module.fail_json(msg=str(error))
        except Exception as error:  # no answer (connection refused, TLS, DNS) or a refused value
            module.fail_json(
                msg=connection_error_message(
                    error,
                    api,
                    params["kubeconfig"],
                    "%s %s/%s" % (params["kind"], params["namespace"], params["name"]),
                )
            )
        now = time.time()
        verdict = judge(
            params["kind"],
            params["name"],
            params["namespace"],
            obj,
            pods,
            now,
            expected_pods=params["expected_pods"],
            slow_after=params["slow_after"],
            previous=seen,
        )
        seen = verdict["pods"]
        conditions = (
            stuck_conditions(
                params["kind"],
                params["name"],
                params["namespace"],
                obj,
                pods,
                events,
                params["expected_pods"],
            )
            if params["stuck_timeout"]
            else []
        )
        judge_stuck(verdict, conditions, now, params["stuck_timeout"], params["expected_pods"])
        name_gone_pods(verdict, obj, events)
        verdict.update(
            timed_out=False, elapsed=round(now - started, 1), remaining=round(max(deadline - now, 0), 1)
        )
        return [verdict]

    outcome, (verdict,), _elapsed = poll(
        read_and_judge,
        params["timeout"],
        params["poll_interval"],
        started=started,
        window=growing_window(params["window"], params["window_growth"], time.time() - started),
        clock=time.time,
        done=lambda verdict: verdict["succeeded"],
        failed=lambda verdict: verdict["finished"] and not verdict["succeeded"],
        pause=pause,
    )
    # Never past the deadline, as the whole wait.
    settle = min(params["settle"], deadline - time.time())
    if outcome == "failed" and settle > 0 and settling(verdict):
        _outcome, (verdict,), _elapsed = poll(
            read_and_judge,
            settle,
            min(params["poll_interval"], 2),
            clock=time.time,
            done=lambda verdict: not settling(verdict),
            failed=lambda verdict: False,
        )
    if outcome == "timeout":
        verdict.update(finished=True, timed_out=True, message=timeout_message(verdict, params["timeout"]))
    if verdict["finished"] and params["fail_on_failure"] and not verdict["succeeded"]:
        module.fail_json(msg=verdict["message"], **verdict)
    module.exit_json(changed=False, **verdict)


if __name__ == "__main__":
    main()

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Where is a training workload, and which of its pods hold it up?

Small predicates over objects as the API returns them (dicts), so that the unit tests can
feed YAML fixtures:

- :func:`workload_phase` reads a batch/v1 Job, a Kubeflow PyTorchJob or MPIJob or a Kubeflow
  Trainer TrainJob and says ``Pending``, ``Running``, ``Succeeded``, ``Failed`` or
  ``Suspended``, with the reason the controller gave. A Job is done at its ``Complete`` or
  ``Failed`` condition, a PyTorchJob or MPIJob at ``Succeeded`` or ``Failed`` (a PyTorchJob
  succeeds when its master does, an MPIJob when its launcher does, workers may still run), a
  TrainJob at ``Complete`` or ``Failed``.
- :func:`pod_state` reads one pod: its phase, and what holds it up - the scheduler's reason
  (``Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu``), a container
  that cannot start (``ImagePullBackOff``, ``CrashLoopBackOff``, ...), restarts, or the exit
  code and reason of a failed container; :func:`container_kills` the containers the OOM killer
  (reason ``OOMKilled``) or a SIGKILL (exit code 137) ended, now or before a restart.
- :func:`judge` puts both together into a verdict with pod counts, the slow and stuck pods and
  a one-line progress report; :func:`timeout_message` and :func:`failure_message` name every
  pod that did not finish, with its state.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ansible_collections.gpuops.training.plugins.module_utils.pod_scheduling import KUEUE_QUEUE_LABEL

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Suspended", "NotFound")
TERMINAL = ("Succeeded", "Failed")
# Kinds the Training Operator v1 runs: it deletes their pods at the backoff limit or deadline.
OPERATOR_KINDS = ("PyTorchJob", "MPIJob")
# Container waiting reasons that do not heal by waiting a little longer.
STUCK_REASONS = (
    "ImagePullBackOff",
    "ErrImagePull",
    # What a real kubelet reports besides (kwok never did): the image is not on the node and
    # the pull policy is Never; the registry cannot be reached; the image cannot be inspected
    # or its signature is refused.
    "ErrImageNeverPull",
    "RegistryUnavailable",
    "ErrImageInspect",
    "SignatureValidationFailed",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)
DEFAULT_SLOW_AFTER_S = 120
# A container killed by SIGKILL exits 128 + 9; the kubelet adds the reason OOMKilled when the
# kernel's OOM killer did it at the container's (or the pod's) memory limit.
SIGKILL_EXIT_CODE = 137
OOM_REASON = "OOMKilled"
OOM_NOTE = "the kernel's OOM killer stopped it at its memory limit"
SIGKILL_NOTE = "killed by SIGKILL (the kernel's OOM killer sends it when memory runs out)"
# The trainer's exit code for a rank whose peer, or the rendezvous, went away mid-run (its
# errors.EXIT_PEER_LOST; a test checks they agree): such a pod failed because another did.
PEER_LOST_EXIT_CODE = 200
PEER_LOST_NOTE = "the trainer's code for a lost peer: another rank failed first"


def parse_time(text):
    """Seconds since the epoch of an RFC 3339 timestamp as the API writes it; None if absent."""
    if not text or not isinstance(text, str):
        return None
    value = text.strip().replace("Z", "+00:00")
    if "." in value:
        # Python before 3.11 takes at most 6 fractional digits.
        head, _dot, tail = value.partition(".")
        digits = "".join(ch for ch in tail if ch.isdigit())
        zone = tail[len(digits) :]
        value = "%s.%s%s" % (head, (digits + "000000")[:6], zone)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _conditions(obj):
    status = (obj or {}).get("status") or {}
    return [c for c in status.get("conditions") or [] if isinstance(c, dict)]


def _condition(obj, kind):
    for condition in _conditions(obj):
        if condition.get("type") == kind:
            return condition
    return None


def _is_true(condition):
    return condition is not None and str(condition.get("status")) == "True"


def _detail(condition):
    if not condition:
        return ""
    return ": ".join(str(part) for part in (condition.get("reason"), condition.get("message")) if part)


# --------------------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------------------


def job_phase(job):
    """(phase, detail) of a batch/v1 Job."""
    for kind, phase in (("Failed", "Failed"), ("Complete", "Succeeded")):
        condition = _condition(job, kind)
        if _is_true(condition):
            return phase, _detail(condition)
    if _is_true(_condition(job, "Suspended")):
        return "Suspended", _detail(_condition(job, "Suspended"))
    status = job.get("status") or {}
    if (status.get("active") or 0) > 0 or status.get("startTime"):
        return "Running", ""
    return "Pending", ""


def pytorchjob_phase(job):
    """(phase, detail) of a Kubeflow PyTorchJob (kubeflow.org/v1).

    The operator appends conditions and flips the older ones to False: the terminal ones
    decide, then Suspended, Running and Restarting; Created alone means the pods are coming.
    """
    for kind, phase in (("Failed", "Failed"), ("Succeeded", "Succeeded")):
        condition = _condition(job, kind)
        if _is_true(condition):
            return phase, _detail(condition)
    if _is_true(_condition(job, "Suspended")):
        return "Suspended", _detail(_condition(job, "Suspended"))
    if _is_true(_condition(job, "Restarting")):
        return "Running", _detail(_condition(job, "Restarting"))
    if _is_true(_condition(job, "Running")):
        return "Running", ""
    return "Pending", _detail(_condition(job, "Created"))


def trainjob_phase(job):
    """(phase, detail) of a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1)."""
    for kind, phase in (("Failed", "Failed"), ("Complete", "Succeeded")):
        condition = _condition(job, kind)
        if _is_true(condition):
            return phase, _detail(condition)
    if _is_true(_condition(job, "Suspended")):
        return "Suspended", _detail(_condition(job, "Suspended"))
    jobs = ((job or {}).get("status") or {}).get("jobsStatus") or []
    if any((entry.get("active") or 0) > 0 or (entry.get("ready") or 0) > 0 for entry in jobs):
        return "Running", ""
    return "Pending", ""


# An MPIJob of the Training Operator (kubeflow.org/v1) has the same conditions as a PyTorchJob;
# it succeeds when its launcher does.
PHASE_READERS = {
    "Job": job_phase,
    "PyTorchJob": pytorchjob_phase,
    "MPIJob": pytorchjob_phase,
    "TrainJob": trainjob_phase,
}


def kueue_queue(obj):
    """The LocalQueue a workload was submitted to (Kueue's queue-name label), or None."""
    return (((obj or {}).get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)


def _suspended_in_spec(obj):
    # A Job and a TrainJob say it in spec.suspend, Kubeflow's v1 kinds in spec.runPolicy.
    spec = (obj or {}).get("spec") or {}
    return bool(spec.get("suspend") or (spec.get("runPolicy") or {}).get("suspend"))


def workload_phase(kind, obj):
    """(phase, detail) of a Job, PyTorchJob, MPIJob or TrainJob; ("NotFound", "") for None.

    A workload queued in Kueue reads ``Suspended`` from the moment it is created suspended
    (before its controller writes the condition) until Kueue admits it, and the detail names
    the LocalQueue: a wait on it is a wait for quota, not for slow pods.
    """
    if obj is None:
        return "NotFound", ""
    if kind not in PHASE_READERS:
        raise ValueError("kind must be one of %s, got %r" % (", ".join(sorted(PHASE_READERS)), kind))
    phase, detail = PHASE_READERS[kind](obj)
    queue = kueue_queue(obj)
    if queue and (phase == "Suspended" or (phase == "Pending" and _suspended_in_spec(obj))):
        queued = "queued in Kueue's LocalQueue %s, not admitted yet" % queue
        return "Suspended", "%s; %s" % (queued, detail) if detail else queued
    return phase, detail


# --------------------------------------------------------------------------------------
# pods
# --------------------------------------------------------------------------------------


def _container_statuses(pod):
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def pod_state(pod, now=None, slow_after=DEFAULT_SLOW_AFTER_S):
    """One pod's state: name, phase, node, age_s, restarts, reason, detail, exit_code, stuck, slow.

    ``reason`` is the short cause (``Unschedulable``, ``ImagePullBackOff``, ``Error``, ...) and
    ``detail`` the message that goes with it. ``stuck`` means waiting will not help without a
    change (the scheduler cannot place it, the image cannot be pulled, the container keeps
    crashing); ``slow`` that the pod has been Pending longer than ``slow_after`` seconds, or is stuck.
    """
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    phase = status.get("phase") or "Pending"
    created = parse_time(metadata.get("creationTimestamp"))
    age = round(now - created, 1) if now is not None and created is not None else None
    restarts = sum(int(c.get("restartCount") or 0) for c in _container_statuses(pod))
    state = {
        "name": metadata.get("name"),
        "phase": phase,
        "node": spec.get("nodeName"),
        "age_s": age,
        "restarts": restarts,
        "reason": "",
        "detail": "",
        "exit_code": None,
        "stuck": False,
        "slow": False,
        "deleting": bool(metadata.get("deletionTimestamp")),
        "finished_at": None,
        "kills": container_kills(pod),
    }
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    waiting = [
        (c.get("name"), (c.get("state") or {}).get("waiting") or {})
        for c in _container_statuses(pod)
        if (c.get("state") or {}).get("waiting")
    ]
    if phase == "Pending" and scheduled is not None and str(scheduled.get("status")) == "False":
        state.update(reason=scheduled.get("reason") or "NotScheduled", detail=scheduled.get("message") or "")
        state["stuck"] = state["reason"] == "Unschedulable"
    elif phase == "Failed":
        _failed(state, pod)
    else:
        for name, info in waiting:
            reason = info.get("reason") or ""
            if reason in STUCK_REASONS:
                state.update(
                    reason=reason,
                    detail="container %s: %s" % (name, info.get("message") or reason),
                    stuck=True,
                )
                if reason == "CrashLoopBackOff":
                    _last_exit(state, pod, name)
                break
            if reason and not state["reason"]:
                state.update(reason=reason, detail="container %s: %s" % (name, info.get("message") or reason))
        if not state["reason"] and restarts:
            state.update(reason="Restarted", detail="restarted %d times" % restarts)
            killed = [kill for kill in state["kills"] if kill["previous"]]
            if killed:
                state["detail"] += ", the last time after exit code %s (%s)" % (
                    killed[0]["exit_code"],
                    kill_note(killed[0]),
                )
    if phase == "Pending" and status.get("reason"):
        state["reason"] = state["reason"] or status["reason"]
    state["slow"] = state["stuck"] or (phase == "Pending" and age is not None and age >= slow_after)
    return state


def _exit_code(terminated):
    try:
        return int(terminated.get("exitCode") or 0)
    except (TypeError, ValueError):
        return None


def _container_limit(pod, name):
    """The memory limit of the pod's container ``name`` as written in its spec, or None."""
    spec = pod.get("spec") or {}
    for container in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        if isinstance(container, dict) and container.get("name") == name:
            limits = (container.get("resources") or {}).get("limits") or {}
            return str(limits["memory"]) if limits.get("memory") is not None else None
    return None


def container_kills(pod):
    """The pod's containers that the OOM killer ended (reason ``OOMKilled``) or a SIGKILL did
    (exit code 137), in their current state or the last one before a restart.

    Each is a dict: ``pod``, ``container``, ``exit_code``, ``reason``, ``oom_killed`` (the
    kubelet said OOMKilled), ``previous`` (the container was restarted since: its log is the
    previous one), ``finished_at`` (seconds since the epoch, or None), ``restarts`` and
    ``memory_limit`` (the container's limit in its spec, or None).
    """
    metadata = pod.get("metadata") or {}
    kills = []
    for container in _container_statuses(pod):
        if not isinstance(container, dict):
            continue
        for key, previous in (("state", False), ("lastState", True)):
            terminated = (container.get(key) or {}).get("terminated") or {}
            if not isinstance(terminated, dict) or not terminated:
                continue
            code, reason = _exit_code(terminated), terminated.get("reason") or ""
            if reason != OOM_REASON and code != SIGKILL_EXIT_CODE:
                continue
            kills.append(
                {
                    "pod": metadata.get("name"),
                    "namespace": metadata.get("namespace"),
                    "container": container.get("name"),
                    "exit_code": code,
                    "reason": reason,
                    "oom_killed": reason == OOM_REASON,
                    "previous": previous,
                    "finished_at": parse_time(terminated.get("finishedAt")),
                    "restarts": int(container.get("restartCount") or 0),
                    "memory_limit": _container_limit(pod, container.get("name")),
                }
            )
    return kills


def kill_note(kill):
    """``OOMKilled: the kernel's OOM killer stopped it at its memory limit of 4Gi``, or for a
    SIGKILL without that reason, ``killed by SIGKILL (the kernel's OOM killer sends it when
    memory runs out)``."""
    if kill.get("oom_killed"):
        return "%s: %s%s" % (
            OOM_REASON,
            OOM_NOTE,
            " of %s" % kill["memory_limit"] if kill.get("memory_limit") else "",
        )
    return SIGKILL_NOTE


def describe_kill(kill):
    """``pod training/x-0: container trainer exited with code 137 (OOMKilled: ...)``; the
    container before a restart is called the previous one."""
    where = "%s/%s" % (kill["namespace"], kill["pod"]) if kill.get("namespace") else kill.get("pod")
    return "pod %s: %scontainer %s exited with code %s (%s)" % (
        where,
        "the previous " if kill.get("previous") else "",
        kill.get("container"),
        kill.get("exit_code"),
        kill_note(kill),
    )


def _failed(state, pod):
    status = pod.get("status") or {}
    for container in _container_statuses(pod):
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated and _exit_code(terminated) != 0:
            state["exit_code"] = _exit_code(terminated)
            state["finished_at"] = parse_time(terminated.get("finishedAt"))
            state["reason"] = terminated.get("reason") or "Error"
            kill = next(
                (k for k in state["kills"] if k["container"] == container.get("name") and not k["previous"]),
                None,
            )
            state["detail"] = "container %s exited with code %s (%s)%s" % (
                container.get("name"),
                state["exit_code"],
                kill_note(kill) if kill else _exit_note(state),
                (": " + terminated["message"].strip()) if terminated.get("message") else "",
            )
            return
    state["reason"] = status.get("reason") or "Failed"
    state["detail"] = status.get("message") or "the pod failed"


def _exit_note(state):
    if state["exit_code"] == PEER_LOST_EXIT_CODE:
        return "%s: %s" % (state["reason"], PEER_LOST_NOTE)
    return state["reason"]


def _last_exit(state, pod, name):
    for container in _container_statuses(pod):
        if container.get("name") != name:
            continue
        terminated = (container.get("lastState") or {}).get("terminated") or {}
        if terminated:
            state["exit_code"] = terminated.get("exitCode")
            kill = next((k for k in state["kills"] if k["container"] == name and k["previous"]), None)
            state["detail"] += " (last exit code %s, %s)" % (
                terminated.get("exitCode"),
                kill_note(kill) if kill else terminated.get("reason"),
            )


def describe_pod(state):
    """``name: Pending for 45 s, Unschedulable: 0/2 nodes are available: ...``"""
    text = "%s: %s" % (state.get("name"), state.get("phase"))
    if state.get("age_s") is not None and state.get("phase") in ("Pending", "Running"):
        text += " for %d s" % int(state["age_s"])
    if state.get("gone"):
        text += " (last seen; the pod is gone)"
    if state.get("node"):
        text += " on %s" % state["node"]
    if state.get("reason"):
        text += ", %s" % state["reason"]
        if state.get("detail") and state["detail"] != state["reason"]:
            text += ": %s" % state["detail"]
    return text


def pod_counts(states):
    counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0, "unknown": 0}
    for state in states:
        if state.get("gone"):
            continue
        key = str(state.get("phase")).lower()
        counts[key if key in counts else "unknown"] += 1
    counts["total"] = sum(counts.values())
    return counts


def merge_pod_states(previous, current):
    """The current states plus the last state of pods seen earlier that are gone now (a
    controller may delete pods at its deadline): their story still goes into the messages."""
    names = {state.get("name") for state in current}
    remembered = []
    for state in previous or []:
        if isinstance(state, dict) and state.get("name") not in names:
            gone = dict(state)
            gone["gone"] = True
            remembered.append(gone)
    return list(current) + remembered


# --------------------------------------------------------------------------------------
# verdicts
# --------------------------------------------------------------------------------------


def _reference(kind, name, namespace):
    return "%s %s/%s" % (kind, namespace, name) if namespace else "%s %s" % (kind, name)


def judge(
    kind, name, namespace, obj, pods, now, expected_pods=None, slow_after=DEFAULT_SLOW_AFTER_S, previous=None
):
    """The verdict on a workload and its pods.

    Returns ``phase``, ``detail``, ``queue`` (Kueue's LocalQueue or None), ``finished``
    (Succeeded or Failed), ``succeeded``,
    ``counts`` (pending, running, succeeded, failed, unknown, total), ``pods`` (every pod's
    state, pods seen before and gone now marked ``gone``), ``slow_pods`` and ``stuck_pods``
    (descriptions), ``progress`` (one line) and ``message`` (on failure: what failed and why).
    """
    phase, detail = workload_phase(kind, obj)
    current = [pod_state(pod, now, slow_after) for pod in pods]
    current.sort(key=lambda state: str(state.get("name")))
    states = merge_pod_states(previous, current)
    counts = pod_counts(current)
    slow = [describe_pod(state) for state in states if state.get("slow") and not state.get("gone")]
    stuck = [describe_pod(state) for state in states if state.get("stuck")]
    reference = _reference(kind, name, namespace)
    progress = "%s: %s%s; pods: %d pending, %d running, %d succeeded, %d failed" % (
        reference,
        phase,
        " (%s)" % detail if detail and phase not in TERMINAL else "",
        counts["pending"],
        counts["running"],
        counts["succeeded"],
        counts["failed"],
    )
    if expected_pods:
        progress += " of %d expected" % expected_pods
        if counts["total"] < expected_pods and phase not in TERMINAL:
            progress += " (%d not created yet)" % (expected_pods - counts["total"])
    if slow:
        progress += "; slow: " + "; ".join(slow)
    verdict = {
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "phase": phase,
        "detail": detail,
        "queue": kueue_queue(obj),
        "finished": phase in TERMINAL,
        "succeeded": phase == "Succeeded",
        "counts": counts,
        "pods": states,
        "slow_pods": slow,
        "stuck_pods": stuck,
        "progress": progress,
        "message": "",
    }
    if phase == "Failed":
        verdict["message"] = failure_message(verdict)
    return verdict


def _unfinished(verdict):
    return [state for state in verdict.get("pods") or [] if state.get("phase") != "Succeeded"]


def _failure_order(state):
    # A pod that lost its peer failed because of another, whatever the clocks say: its rank
    # sees the broken connection at once, while torchrun's agent in the pod that failed first
    # may notice its own worker's death a second or more later. Among the rest, the first to
    # fail is usually the cause.
    finished = state.get("finished_at")
    lost_peer = state.get("exit_code") == PEER_LOST_EXIT_CODE
    return (lost_peer, finished is None, finished or 0.0, str(state.get("name")))


def describe_pod_event(entry):
    """``pod: Reason: message (N times)``, one pod's last Event (:func:`stuck.pods_in_events`)."""
    text = "%s: %s: %s" % (entry["name"], entry["reason"], entry["message"])
    return text + (" (%d times)" % entry["count"] if entry.get("count", 1) > 1 else "")


def failure_message(verdict):
    """``PyTorchJob ns/name failed (reason: message); failed pods: X: Failed, Error: container ...``

    Failed pods come in the order they failed, the first (usually the cause) first; pods that
    only lost a peer (the trainer's exit code 200) come after the others.
    """
    text = "%s failed" % _reference(verdict["kind"], verdict["name"], verdict["namespace"])
    if verdict.get("detail"):
        text += " (%s)" % verdict["detail"]
    pods = _unfinished(verdict)
    failed = sorted((state for state in pods if state.get("phase") == "Failed"), key=_failure_order)
    others = [state for state in pods if state.get("phase") != "Failed"]
    if failed:
        text += "; failed pods: " + "; ".join(describe_pod(state) for state in failed)
    if others:
        text += "; not finished: " + "; ".join(describe_pod(state) for state in others)
    if not pods and verdict.get("pod_events"):
        text += "; its pods are gone, their last Warning Events: " + "; ".join(
            describe_pod_event(entry) for entry in verdict["pod_events"]
        )
    elif not pods:
        text += "; no pod of it is left to tell why"
    gone = any(state.get("gone") for state in pods) or (not pods and verdict.get("pod_events"))
    if verdict.get("kind") in OPERATOR_KINDS and gone:
        text += (
            " (the %s's pods were deleted: the Training Operator deletes every pod of a job that"
            " reaches its backoffLimit or deadline, whatever its cleanPodPolicy, and their logs"
            " with them)" % verdict["kind"]
        )
    return text


def settling(verdict):
    """True while a failed workload still has pods running or pending: they are most likely
    ending after the pod that failed first (a lost peer), and their last state and log tell
    more than a snapshot taken now."""
    if verdict.get("phase") != "Failed":
        return False
    return any(
        state.get("phase") in ("Running", "Pending") and not state.get("gone")
        for state in verdict.get("pods") or []
    )


def timeout_message(verdict, timeout_s):
    """What was still going on when the wait gave up, naming every unfinished pod."""
    text = "%s did not finish within %s s: it is %s" % (
        _reference(verdict["kind"], verdict["name"], verdict["namespace"]),
        timeout_s,
        verdict.get("phase"),
    )
    if verdict.get("detail"):
        text += " (%s)" % verdict["detail"]
    pods = _unfinished(verdict)
    stuck = [state for state in pods if state.get("stuck")]
    rest = [state for state in pods if not state.get("stuck")]
    if stuck:
        text += "; stuck pods: " + "; ".join(describe_pod(state) for state in stuck)
    if rest:
        text += "; unfinished pods: " + "; ".join(describe_pod(state) for state in rest)
    if verdict.get("phase") == "Suspended" and verdict.get("queue"):
        text += (
            "; Kueue did not admit it: the Workload object beside it in the namespace says why"
            " (kubectl get workloads), most often the ClusterQueue behind LocalQueue %s lacks"
            " the quota for all of its pods at once" % verdict["queue"]
        )
    elif not verdict.get("pods"):
        text += "; no pod was created"
        if verdict.get("kind") in ("PyTorchJob", "MPIJob", "TrainJob"):
            text += " (is the %s controller running, and does the namespace's quota admit the pods?)" % (
                "Kubeflow Trainer" if verdict["kind"] == "TrainJob" else "Kubeflow Training Operator"
            )
    return text

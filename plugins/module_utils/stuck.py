# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Why a training workload will not go on without a change, since when, and what to change.

A workload whose pods the API server refuses (a ResourceQuota, a LimitRange, Pod Security,
OpenShift's SecurityContextConstraints, a missing ServiceAccount or PriorityClass, an admission
webhook), a pod the scheduler cannot place, or a container whose image cannot be pulled or that
cannot be created, does not heal by waiting. These small functions find such conditions in what
the API returns (dicts: the workload, its pods and the namespace's Warning Events, as the unit
tests' YAML fixtures hold them) and date each from the server's own times - an Event's
``firstTimestamp`` (or ``eventTime``), a pod's ``PodScheduled`` condition, its creation - so
that a wait called again and again (the roles' windowed calls) measures one span:

- :func:`refusal_text` reads a controller's Event saying it could not create a pod: the Job
  controller's ``FailedCreate`` and the Training Operator's ``FailedCreatePod`` (``Error
  creating: <the API server's words>``), and an MPIJob's ``launcher pod created failed: ...`` or
  ``worker pod created failed: ...``;
- :func:`refusal_remedy`, :func:`scheduling_remedy` and :func:`container_remedy` say what the
  words mean and what to change;
- :func:`stuck_conditions` lists every condition in force now, each a dict with ``object``
  (``Job ns/name``, ``pod ns/name on node``), ``kind`` (refused, unschedulable, container),
  ``reason``, ``detail``, ``remedy`` and ``since`` (seconds since the epoch);
- :func:`judge_stuck` adds them to a verdict of :func:`job_status.judge` and ends it, failed,
  once one has held for the stuck time; :func:`stuck_message` says it in one paragraph.

A condition that clears (the quota is freed and the pod is created, the pod is scheduled, the
image is pulled) is no longer listed at the next read, so it never ends a wait.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.training.plugins.module_utils.job_status import failure_message, parse_time

# What a controller records when the API server refuses the pod it creates.
REFUSAL_REASONS = ("FailedCreate", "FailedCreatePod")
_ERROR_CREATING = "Error creating: "
# The Training Operator's MPIJob controller (kubeflow.org/v1) creates its pods itself and says so
# under the reason MPIJobFailed.
_MPI_CREATE_FAILED = re.compile(r"^(launcher|worker) pod created failed: ")
# Container waiting reasons of a pod that cannot start: the image cannot be pulled, or the
# container cannot be created. A crash loop is not one of them: the container runs, and the
# workload's backoff limit or deadline decides.
IMAGE_REASONS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "RegistryUnavailable",
    "ErrImageInspect",
    "SignatureValidationFailed",
    "InvalidImageName",
)
CREATE_REASONS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
CONTAINER_REASONS = IMAGE_REASONS + CREATE_REASONS
# The kubelet's Warning Events about a container that cannot start (pkg/kubelet/events): a pull
# or create that failed ("Failed"), an image it cannot inspect, one it may not pull.
_KUBELET_FAILURES = ("Failed", "InspectFailed", "ErrImageNeverPull")
_PULL_FAILED = "Failed to pull image "
_BARE_BACK_OFF = re.compile(r'^Back-off pulling image "[^"]*"$')
KINDS = ("refused", "unschedulable", "container")


# --------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------


def involved(event):
    """The object an Event is about (core/v1 ``involvedObject``, events.k8s.io/v1 ``regarding``)."""
    return (event or {}).get("involvedObject") or (event or {}).get("regarding") or {}


def event_message(event):
    return str((event or {}).get("message") or (event or {}).get("note") or "").strip()


def event_times(event):
    """(first, last) seconds since the epoch an Event was seen; None where it carries no time.

    A core/v1 Event counts repeats in ``count`` between ``firstTimestamp`` and ``lastTimestamp``;
    one written through events.k8s.io/v1 (the scheduler's) has ``eventTime`` and, once repeated,
    ``series.lastObservedTime``.
    """
    event = event or {}
    metadata = event.get("metadata") or {}
    series = event.get("series") or {}
    first = (
        parse_time(event.get("firstTimestamp"))
        or parse_time(event.get("eventTime"))
        or parse_time(metadata.get("creationTimestamp"))
    )
    last = (
        parse_time(event.get("lastTimestamp"))
        or parse_time(series.get("lastObservedTime"))
        or parse_time(event.get("eventTime"))
        or first
    )
    if first is not None and last is not None and last < first:
        last = first
    return first, last


def pods_in_events(events, workload_name, created=None):
    """What the Warning Events still say about a workload's pods once they are gone (the
    Training Operator deletes every pod of a job that reaches its backoffLimit): per pod named
    ``<workload>-...``, its newest Event's reason and message and how often it was seen. Events
    older than the workload (``created``, seconds since the epoch) belong to a namesake."""
    prefix = str(workload_name) + "-"
    newest = {}
    for event in events or []:
        target = involved(event)
        name = str(target.get("name") or "")
        if target.get("kind") != "Pod" or not name.startswith(prefix):
            continue
        _first, last = event_times(event)
        if created is not None and last is not None and last < created:
            continue
        series = event.get("series") or {}
        count = event.get("count") or series.get("count") or 1
        if name not in newest or (last or 0.0) >= newest[name][0]:
            newest[name] = (
                last or 0.0,
                {
                    "name": name,
                    "reason": str(event.get("reason") or ""),
                    "message": event_message(event),
                    "count": int(count),
                },
            )
    return [newest[name][1] for name in sorted(newest)]


def refusal_text(event):
    """The API server's words in a controller's Warning Event that it could not create a pod
    (``pods "x" is forbidden: exceeded quota: ...``), or None for any other Event."""
    if not isinstance(event, dict) or event.get("type") != "Warning":
        return None
    message = event_message(event)
    if event.get("reason") in REFUSAL_REASONS and message.startswith(_ERROR_CREATING):
        return message[len(_ERROR_CREATING) :].strip() or None
    match = _MPI_CREATE_FAILED.match(message)
    if match:
        return message[match.end() :].strip() or None
    return None


def _about(event, kind, name, uid, created):
    """Whether the Event is about this object: by uid when both have one, else by kind and name
    and no older than the object (an Event of a deleted namesake is not its)."""
    target = involved(event)
    if uid and target.get("uid"):
        return target.get("uid") == uid
    if target.get("kind") != kind or target.get("name") != name:
        return False
    _first, last = event_times(event)
    return created is None or last is None or last >= created


# --------------------------------------------------------------------------------------
# remedies
# --------------------------------------------------------------------------------------

_QUOTA = re.compile(r"exceeded quota: ([^,\s]+)")
_QUOTA_MUST_SPECIFY = re.compile(r"failed quota: ([^:\s]+): must specify")
_LIMIT_RANGE = re.compile(
    r"(maximum|minimum) [\w./-]+ usage per (Container|Pod|PersistentVolumeClaim) is"
    r"|max limit to request ratio per (Container|Pod)"
)
_POD_SECURITY = re.compile(r'violates PodSecurity "([^"]+)"')
_SCC = "unable to validate against any security context constraint"
_SERVICE_ACCOUNT = re.compile(r'serviceaccount "([^"]+)" not found')
_PRIORITY_CLASS = re.compile(r"no PriorityClass with name (\S+) was found")
_WEBHOOK = re.compile(r'admission webhook "([^"]+)" denied the request')


def refusal_cause(text):
    """quota, limitrange, podsecurity, scc, serviceaccount, priorityclass, webhook or other."""
    text = text or ""
    if _QUOTA.search(text) or _QUOTA_MUST_SPECIFY.search(text):
        return "quota"
    if _LIMIT_RANGE.search(text):
        return "limitrange"
    if _POD_SECURITY.search(text):
        return "podsecurity"
    if _SCC in text:
        return "scc"
    if _SERVICE_ACCOUNT.search(text):
        return "serviceaccount"
    if _PRIORITY_CLASS.search(text):
        return "priorityclass"
    if _WEBHOOK.search(text):
        return "webhook"
    return "other"


def refusal_remedy(text, namespace=None):
    """What to change so that the API server admits the pods it refused with ``text``."""
    text = text or ""
    where = " in namespace %s" % namespace if namespace else ""
    quota = _QUOTA.search(text)
    if quota:
        return (
            "raise the hard limits of ResourceQuota %s%s, free what other workloads there hold, "
            "or ask for less per pod (kubectl describe resourcequota %s%s)"
            % (quota.group(1), where, quota.group(1), " -n %s" % namespace if namespace else "")
        )
    must = _QUOTA_MUST_SPECIFY.search(text)
    if must:
        return "give every container requests and limits for each resource ResourceQuota %s%s counts" % (
            must.group(1),
            where,
        )
    cause = refusal_cause(text)
    if cause == "limitrange":
        return (
            "size the pods within the namespace's LimitRange (its maximum and minimum per Container "
            "and per Pod: kubectl describe limitrange%s) or have it raised"
            % (" -n %s" % namespace if namespace else "")
        )
    if cause == "podsecurity":
        return (
            "the namespace's Pod Security level %s refuses the pods: label the namespace%s "
            "pod-security.kubernetes.io/enforce with a level that admits them (a pod that adds "
            "IPC_LOCK, which RDMA needs, needs privileged; the training_namespace role sets it with "
            "training_namespace_pod_security), or drop what the message names"
            % (_POD_SECURITY.search(text).group(1), " " + namespace if namespace else "")
        )
    if cause == "scc":
        return (
            "no SecurityContextConstraints that the pods' ServiceAccount may use admits them (OpenShift's "
            "restricted-v2 refuses IPC_LOCK): run the training_namespace role, which creates a "
            "ServiceAccount (trainer) and an SCC that admits IPC_LOCK, and run the pods as that "
            "ServiceAccount, or grant an SCC that admits them to their ServiceAccount"
        )
    if cause == "serviceaccount":
        return (
            "create the ServiceAccount %s%s (the training_namespace role creates trainer) or run the "
            "pods as one that exists" % (_SERVICE_ACCOUNT.search(text).group(1), where)
        )
    if cause == "priorityclass":
        return (
            "create the PriorityClass %s (the training_namespace role creates gpu-training) or name one "
            "that exists" % _PRIORITY_CLASS.search(text).group(1)
        )
    if cause == "webhook":
        return (
            "the admission webhook %s refuses the pods: change what its message names, or ask the "
            "webhook's owners to admit them" % _WEBHOOK.search(text).group(1)
        )
    return "change what the API server's message names, so that it admits the pods"


# The scheduler's message: "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s)
# had untolerated taint {...}. preemption: ..."; each part has its remedy.
_INSUFFICIENT = re.compile(r"Insufficient ([\w./-]*\w)")
_SCHEDULING_REMEDIES = (
    (re.compile(r"untolerated taint"), "tolerate the nodes' taints or free nodes without them"),
    (
        re.compile(r"didn't match Pod's node affinity|node affinity/selector"),
        "make the pods' node selector and affinity match labels that nodes carry",
    ),
    (
        re.compile(r"anti-affinity|topology spread"),
        "add nodes or relax the spreading (one pod per node needs as many nodes as pods)",
    ),
    (re.compile(r"node\(s\) were unschedulable"), "uncordon the cordoned nodes"),
    (re.compile(r"Too many pods"), "free or add nodes: they hold as many pods as they may"),
    (
        re.compile(r"PersistentVolumeClaim|persistentvolumeclaim|volume node affinity"),
        "bind the PersistentVolumeClaims the pods mount to volumes the nodes can reach",
    ),
)


def scheduling_remedy(message):
    """What to change so that the scheduler can place a pod it refused with ``message``."""
    message = message or ""
    found = []
    resources = []
    for resource in _INSUFFICIENT.findall(message.split("preemption:", 1)[0]):
        if resource not in resources:
            resources.append(resource)
    if resources:
        listed = ", ".join(resources)
        found.append(
            "free %s on the nodes (other pods hold it) or add nodes that have it, or ask for less per pod"
            % listed
        )
    for pattern, remedy in _SCHEDULING_REMEDIES:
        if pattern.search(message):
            found.append(remedy)
    return "; ".join(found) or "free or add nodes that fit the pods, or ask for less per pod"


_PULL_DENIED = re.compile(
    r"unauthorized|authentication required|denied|forbidden|\b401\b|\b403\b|no basic auth credentials",
    re.IGNORECASE,
)
_PULL_MISSING = re.compile(
    r"not found|manifest unknown|name unknown|does not exist|no such image|repository .* not found",
    re.IGNORECASE,
)
_PULL_UNREACHABLE = re.compile(
    r"connection refused|no such host|i/o timeout|dial tcp|network is unreachable|tls|x509|certificate",
    re.IGNORECASE,
)
_MISSING_REFERENCE = re.compile(
    r'(secret|configmap) "([^"]+)" not found|couldn\'t find key (\S+) in (Secret|ConfigMap) (\S+)'
)


def container_remedy(reason, message, image=None, node=None):
    """What to change so that a container waiting with ``reason`` (and ``message``) can start."""
    message = message or ""
    image_text = "image %s" % image if image else "the image"
    if reason == "ErrImageNeverPull":
        return (
            "%s is not on node %s and its pull policy is Never: put it there, or pull it (IfNotPresent)"
            % (
                image_text,
                node or "the node",
            )
        )
    if reason == "InvalidImageName":
        return "fix the image reference %s: it is not a valid image name" % (image or "")
    if reason == "SignatureValidationFailed":
        return "the node's signature policy refuses %s: sign it as the policy asks, or use one that is" % (
            image_text
        )
    if reason in IMAGE_REASONS:
        if _PULL_DENIED.search(message):
            return (
                "give the pods an image pull Secret whose credentials the registry accepts for %s "
                "(imagePullSecrets), or fix the one they have" % image_text
            )
        if _PULL_MISSING.search(message):
            return "fix the image name or tag: the registry has no %s" % image_text
        if reason == "RegistryUnavailable" or _PULL_UNREACHABLE.search(message):
            return "let the nodes reach the registry of %s (network, DNS, its CA), or use one they reach" % (
                image_text
            )
        return (
            "fix the image reference %s or its pull Secret, and check that the nodes reach its registry"
            % (image or "")
        )
    if reason == "CreateContainerConfigError":
        missing = _MISSING_REFERENCE.search(message)
        if missing:
            kind = (missing.group(1) or missing.group(4) or "Secret").lower()
            what = "Secret" if kind == "secret" else "ConfigMap"
            reference = missing.group(2) or missing.group(5)
            return "create the %s %s the pods reference, with the keys they name, or fix the reference" % (
                what,
                reference,
            )
        return "fix what the message names in the container's configuration (Secrets, ConfigMaps, user)"
    return (
        "the container runtime cannot create or start the container: fix what its message names "
        "(the command, a mount, a device)"
    )


# --------------------------------------------------------------------------------------
# conditions
# --------------------------------------------------------------------------------------


def _metadata(obj):
    return (obj or {}).get("metadata") or {}


def _live(pod):
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return phase != "Failed" and not _metadata(pod).get("deletionTimestamp")


def refusal_condition(kind, name, namespace, obj, pods, events, expected_pods=0):
    """The workload's pods the API server refuses, when some are still missing; None otherwise.

    The refusals counted are its controller's Events since the newest pod of the workload was
    created (before that a pod was made, so it was not stuck): the condition holds since the
    first of them. With ``expected_pods`` it holds while fewer pods live (neither failed nor being
    deleted); without, while no pod lives or a refusal came after the newest pod.
    """
    metadata = _metadata(obj)
    uid = metadata.get("uid")
    created = parse_time(metadata.get("creationTimestamp"))
    refusals = []
    for event in events or []:
        text = refusal_text(event)
        if text and _about(event, kind, name, uid, created):
            refusals.append((event, text))
        elif (
            text
            and kind == "TrainJob"
            and involved(event).get("kind") == "Job"
            and str(involved(event).get("name") or "").startswith(name + "-")
            and _about(event, "Job", involved(event).get("name"), None, created)
        ):
            # A TrainJob's pods come from the Jobs of its JobSet, named <trainjob>-<replicated job>-<index>.
            refusals.append((event, text))
    if not refusals:
        return None
    births = [parse_time(_metadata(pod).get("creationTimestamp")) for pod in pods or []]
    births = [birth for birth in births if birth is not None]
    newest = max(births) if births else None
    current = []
    for event, text in refusals:
        first, last = event_times(event)
        if first is None:
            continue
        if newest is None or last >= newest:
            current.append((max(first, newest) if newest is not None else first, last, event, text))
    if not current:
        return None
    # Without a count to expect, a refusal after the newest pod says that one is missing.
    if expected_pods and len([pod for pod in pods or [] if _live(pod)]) >= expected_pods:
        return None
    since = min(entry[0] for entry in current)
    _since, _last, event, text = max(current, key=lambda entry: (entry[1], entry[0]))
    return {
        "kind": "refused",
        "object": "%s %s/%s" % (kind, namespace, name),
        "reason": event.get("reason") or "FailedCreate",
        "cause": refusal_cause(text),
        "detail": text,
        "remedy": refusal_remedy(text, namespace),
        "since": since,
        "pods": [],
    }


def _pod_ref(pod, namespace=None):
    metadata = _metadata(pod)
    return "%s/%s" % (metadata.get("namespace") or namespace, metadata.get("name"))


def _condition(pod, kind):
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def unschedulable_condition(pod, namespace=None):
    """A pending pod the scheduler cannot place (PodScheduled False, Unschedulable), since that
    condition's last transition; None otherwise."""
    if not _live(pod) or ((pod.get("status") or {}).get("phase") or "Pending") != "Pending":
        return None
    scheduled = _condition(pod, "PodScheduled")
    if not scheduled or str(scheduled.get("status")) != "False" or scheduled.get("reason") != "Unschedulable":
        return None
    since = parse_time(scheduled.get("lastTransitionTime")) or parse_time(
        _metadata(pod).get("creationTimestamp")
    )
    if since is None:
        return None
    message = scheduled.get("message") or ""
    return {
        "kind": "unschedulable",
        "object": "pod %s" % _pod_ref(pod, namespace),
        "reason": "Unschedulable",
        "cause": "scheduling",
        "detail": message,
        "remedy": scheduling_remedy(message),
        "since": since,
        "pods": [_metadata(pod).get("name")],
    }


def _container_image(pod, name):
    spec = pod.get("spec") or {}
    for container in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        if isinstance(container, dict) and container.get("name") == name:
            return container.get("image")
    return None


def _pod_events(pod, events):
    metadata = _metadata(pod)
    created = parse_time(metadata.get("creationTimestamp"))
    return [
        event
        for event in events or []
        if isinstance(event, dict)
        and event.get("type") == "Warning"
        and _about(event, "Pod", metadata.get("name"), metadata.get("uid"), created)
    ]


def container_condition(pod, events=(), namespace=None):
    """A pod whose container cannot start (its image cannot be pulled, or it cannot be created),
    since the kubelet's first Warning Event about it (after the container last ran), else since
    the pod was scheduled; None otherwise."""
    if not _live(pod) or ((pod.get("status") or {}).get("phase") or "Pending") not in ("Pending", "Running"):
        return None
    status = pod.get("status") or {}
    statuses = list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])
    for container in statuses:
        if not isinstance(container, dict):
            continue
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason not in CONTAINER_REASONS:
            continue
        name = container.get("name")
        ran_until = parse_time(((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        failures = []
        for event in _pod_events(pod, events):
            if event.get("reason") not in _KUBELET_FAILURES:
                continue
            first, last = event_times(event)
            if first is None or (ran_until is not None and last < ran_until):
                continue
            failures.append((max(first, ran_until or first), last, event_message(event)))
        scheduled = _condition(pod, "PodScheduled")
        fallback = (
            ran_until
            or (parse_time(scheduled.get("lastTransitionTime")) if scheduled else None)
            or parse_time(_metadata(pod).get("creationTimestamp"))
        )
        since = min([entry[0] for entry in failures] or [fallback]) if (failures or fallback) else None
        if since is None:
            return None
        message = str(waiting.get("message") or "").strip()
        pulls = sorted((entry for entry in failures if entry[2].startswith(_PULL_FAILED)), key=lambda e: e[1])
        if reason in IMAGE_REASONS and pulls and (not message or _BARE_BACK_OFF.match(message)):
            # Older kubelets say only "Back-off pulling image x"; the last pull says why.
            message = "%s (%s)" % (message, pulls[-1][2]) if message else pulls[-1][2]
        image = _container_image(pod, name)
        node = (pod.get("spec") or {}).get("nodeName")
        return {
            "kind": "container",
            "object": "pod %s%s" % (_pod_ref(pod, namespace), " on node %s" % node if node else ""),
            "reason": reason,
            "cause": "image" if reason in IMAGE_REASONS else "create",
            "detail": "container %s%s: %s"
            % (name, " (image %s)" % image if image else "", message or reason),
            "remedy": container_remedy(reason, message, image, node),
            "since": since,
            "pods": [_metadata(pod).get("name")],
        }
    return None


def stuck_conditions(kind, name, namespace, obj, pods, events, expected_pods=0):
    """Every condition in force now that keeps the workload from going on, oldest first."""
    found = []
    refusal = refusal_condition(kind, name, namespace, obj, pods, events, expected_pods)
    if refusal:
        found.append(refusal)
    for pod in sorted(pods or [], key=lambda pod: str(_metadata(pod).get("name"))):
        condition = unschedulable_condition(pod, namespace) or container_condition(pod, events, namespace)
        if condition:
            found.append(condition)
    found.sort(key=lambda condition: (condition["since"], condition["object"]))
    return found


def needs_events(obj, pods, expected_pods=0):
    """Whether Events can tell more than the pods do: pods are missing, or one is not running
    (its refusal, or its container's failure, is in the Events)."""
    if obj is None:
        return False
    live = [pod for pod in pods or [] if _live(pod)]
    if not live or (expected_pods and len(live) < expected_pods):
        return True
    for pod in live:
        status = pod.get("status") or {}
        if (status.get("phase") or "Pending") == "Pending":
            return True
        statuses = list(status.get("initContainerStatuses") or []) + list(
            status.get("containerStatuses") or []
        )
        if any(
            ((c.get("state") or {}).get("waiting") or {}).get("reason") in CONTAINER_REASONS for c in statuses
        ):
            return True
    return False


# --------------------------------------------------------------------------------------
# verdicts
# --------------------------------------------------------------------------------------

_WHAT = {
    "refused": "the API server refuses its pods",
    "unschedulable": "not scheduled",
    "container": "cannot start",
}


def _groups(conditions):
    """Conditions that say the same (several pods refused a place for one reason) as one."""
    groups = []
    for condition in conditions:
        key = (condition["kind"], condition["reason"], condition["detail"], condition["remedy"])
        for group in groups:
            if group["key"] == key:
                group["objects"].append(condition["object"])
                group["for_s"] = max(group["for_s"], condition.get("for_s") or 0)
                break
        else:
            groups.append(
                {
                    "key": key,
                    "condition": condition,
                    "objects": [condition["object"]],
                    "for_s": condition.get("for_s") or 0,
                }
            )
    return groups


def describe_condition(condition, objects=None, for_s=None):
    """``Job ns/x: the API server refuses its pods for 20 s (FailedCreate: ...); to go on, ...``"""
    for_s = condition.get("for_s") if for_s is None else for_s
    objects = objects or [condition["object"]]
    detail = condition["detail"]
    if detail and detail != condition["reason"]:
        cause = "%s: %s" % (condition["reason"], detail)
    else:
        cause = condition["reason"]
    return "%s: %s for %d s (%s); to go on, %s" % (
        ", ".join(objects),
        _WHAT.get(condition["kind"], "stuck"),
        int(for_s or 0),
        cause,
        condition["remedy"],
    )


def stuck_message(verdict, stuck_timeout, expected_pods=0):
    """What holds the workload, naming each object, the reason, how long, and the remedy."""
    conditions = sorted(
        verdict.get("stuck_conditions") or [], key=lambda condition: -(condition.get("for_s") or 0)
    )
    reference = "%s %s/%s" % (verdict.get("kind"), verdict.get("namespace"), verdict.get("name"))
    longest = int(conditions[0].get("for_s") or 0) if conditions else 0
    text = "%s is stuck: it has not gone on for %d s (stuck_timeout %d s) and will not without a change. " % (
        reference,
        longest,
        stuck_timeout,
    )
    text += " ".join(
        describe_condition(g["condition"], g["objects"], g["for_s"]) + "." for g in _groups(conditions)
    )
    counts = verdict.get("counts") or {}
    if counts:
        text += " Pods: %d pending, %d running, %d succeeded, %d failed" % (
            counts.get("pending", 0),
            counts.get("running", 0),
            counts.get("succeeded", 0),
            counts.get("failed", 0),
        )
        if expected_pods:
            text += " of %d expected" % expected_pods
            created = counts.get("total", 0)
            if created < expected_pods:
                text += " (%d not created)" % (expected_pods - created)
        text += "."
    return text


def judge_stuck(verdict, conditions, now, stuck_timeout, expected_pods=0):
    """Add ``stuck`` and ``stuck_conditions`` (each with ``for_s``) to a verdict of
    job_status.judge; once a condition has held ``stuck_timeout`` seconds (0: never), the verdict
    is finished and failed, with :func:`stuck_message`. A finished workload keeps its verdict."""
    listed = []
    for condition in conditions or []:
        entry = dict(condition)
        entry["for_s"] = round(max(now - condition["since"], 0.0), 1)
        listed.append(entry)
    verdict["stuck_conditions"] = listed
    verdict["stuck"] = False
    if verdict.get("finished") or not listed:
        return verdict
    longest = max(listed, key=lambda condition: condition["for_s"])
    if stuck_timeout and longest["for_s"] >= stuck_timeout:
        verdict.update(
            finished=True,
            succeeded=False,
            stuck=True,
            message=stuck_message(verdict, stuck_timeout, expected_pods),
        )
    elif stuck_timeout:
        verdict["progress"] = "%s; stuck %d s of %d s: %s" % (
            verdict.get("progress") or "",
            int(longest["for_s"]),
            stuck_timeout,
            longest["object"],
        )
    return verdict


def name_gone_pods(verdict, obj, events):
    """A workload that failed and lost its pods before the wait first saw them (a backoffLimit
    reached in seconds, the pods deleted by the operator) gets them named from their Events:
    ``pod_events`` in the verdict, and in its message."""
    if verdict.get("phase") != "Failed" or verdict.get("pods") or not events:
        return
    created = parse_time(((obj or {}).get("metadata") or {}).get("creationTimestamp"))
    verdict["pod_events"] = pods_in_events(events, verdict["name"], created)
    if verdict["pod_events"]:
        verdict["message"] = failure_message(verdict)

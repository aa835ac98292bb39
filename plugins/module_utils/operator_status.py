# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""When is an operator installed and ready?

Four kinds of object decide it, each judged by a pure function over the object as the
API returns it (a dict), so the unit tests can feed YAML fixtures:

- a CustomResourceDefinition is usable once Established=True (and NamesAccepted is not
  False: a name clash never heals by waiting);
- a Deployment is available the way ``kubectl rollout status`` sees it: the controller
  observed the latest generation, every replica is updated and available, no old replica
  is left, and its Progressing condition says NewReplicaSetAvailable. When it is not,
  its pods say why: a pod the scheduler cannot place (no node matches, a taint is not
  tolerated, not enough GPUs) carries PodScheduled=False with the scheduler's message, a
  container that cannot start has a waiting reason such as ImagePullBackOff;
- an OLM Subscription has installed its operator once ``status.installedCSV`` names a
  ClusterServiceVersion whose ``status.phase`` is Succeeded; until then its conditions
  (ResolutionFailed, InstallPlanPending with manual approval, ...) say what OLM waits for;
- an NVIDIA GPU Operator ClusterPolicy is ready when ``status.state`` is ``ready``. The
  operator reconciles only one ClusterPolicy per cluster and marks any other ``ignored``,
  which never turns ready: that ends the wait at once. While it is ``notReady`` its Error
  condition names the operands that are not ready yet.

Each function returns a verdict: ``kind``, ``name``, ``namespace``, ``done``, ``failed``
(no point waiting longer), ``pending`` (one line per unmet check) and ``conditions``.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils.mcp import conditions_summary

# Container waiting reasons that are part of a normal start, not a problem to report.
STARTING_REASONS = ("ContainerCreating", "PodInitializing")


def _conditions(obj):
    status = obj.get("status") or {}
    return {
        condition.get("type"): condition
        for condition in status.get("conditions") or []
        if isinstance(condition, dict)
    }


def _detail(condition):
    return ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)


def _verdict(kind, obj, pending, failed=False, **extra):
    metadata = obj.get("metadata") or {}
    verdict = {
        "kind": kind,
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "done": not pending and not failed,
        "failed": failed,
        "pending": pending,
        "conditions": conditions_summary(obj),
    }
    verdict.update(extra)
    return verdict


def not_found(kind, name, namespace=None, hint=""):
    """The verdict for an object that does not exist (yet)."""
    reason = "not found" + (": " + hint if hint else "")
    return {
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "done": False,
        "failed": False,
        "pending": [reason],
        "conditions": "no conditions reported",
    }


def reference(verdict):
    """``Kind namespace/name`` or ``Kind name``."""
    if verdict.get("namespace"):
        return "%s %s/%s" % (verdict["kind"], verdict["namespace"], verdict["name"])
    return "%s %s" % (verdict["kind"], verdict["name"])


def crd_established(crd):
    conditions = _conditions(crd)
    pending = []
    failed = False
    names = conditions.get("NamesAccepted") or {}
    if names.get("status") == "False":
        failed = True
        pending.append("its names are not accepted (%s)" % (_detail(names) or "no reason given"))
    established = conditions.get("Established") or {}
    if established.get("status") != "True":
        pending.append(
            "condition Established is %s, want True" % (established.get("status") or "missing")
            + (" (%s)" % _detail(established) if _detail(established) else "")
        )
    return _verdict("CustomResourceDefinition", crd, pending, failed)


def label_selector(selector):
    """A LabelSelector (matchLabels, matchExpressions) as the API's selector string."""
    selector = selector or {}
    parts = ["%s=%s" % (key, value) for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key = expression.get("key")
        operator = expression.get("operator")
        values = ",".join(expression.get("values") or [])
        if operator == "In":
            parts.append("%s in (%s)" % (key, values))
        elif operator == "NotIn":
            parts.append("%s notin (%s)" % (key, values))
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append("!" + key)
    return ",".join(parts)


def pod_problems(pod):
    """Why a pod is not ready, one line per reason; empty when it is Running and Ready."""
    status = pod.get("status") or {}
    conditions = _conditions(pod)
    problems = []
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        problems.append("not scheduled: %s" % (_detail(scheduled) or "no reason given"))
    statuses = [("init container", item) for item in status.get("initContainerStatuses") or []]
    statuses += [("container", item) for item in status.get("containerStatuses") or []]
    for label, container in statuses:
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        terminated = state.get("terminated") or {}
        if waiting.get("reason") and waiting["reason"] not in STARTING_REASONS:
            problems.append("%s %s is waiting: %s" % (label, container.get("name"), _detail(waiting)))
        elif terminated and terminated.get("exitCode") not in (0, None):
            problems.append(
                "%s %s exited with code %s%s"
                % (
                    label,
                    container.get("name"),
                    terminated.get("exitCode"),
                    " (%s)" % _detail(terminated) if _detail(terminated) else "",
                )
            )
    phase = status.get("phase")
    if phase == "Failed":
        problems.append("failed" + (": %s" % _detail(status) if _detail(status) else ""))
    ready = conditions.get("Ready") or {}
    if not problems and phase == "Running" and ready.get("status") != "True":
        problems.append("running but not ready" + (" (%s)" % _detail(ready) if _detail(ready) else ""))
    if not problems and phase == "Pending" and scheduled.get("status") == "True":
        problems.append("scheduled to %s, starting" % ((pod.get("spec") or {}).get("nodeName") or "a node"))
    if not problems and phase == "Pending":
        problems.append("pending, not scheduled yet")
    return problems


def deployment_available(deployment, pods=None):
    """Judge a Deployment as ``kubectl rollout status`` does; its pods (when read) explain a shortfall."""
    metadata = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = spec.get("replicas", 1)
    updated = status.get("updatedReplicas") or 0
    available = status.get("availableReplicas") or 0
    total = status.get("replicas") or 0
    pending = []
    generation = metadata.get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and (observed is None or observed < generation):
        pending.append(
            "the deployment controller has not observed generation %s yet (observed %s)"
            % (generation, observed)
        )
    if updated < wanted:
        pending.append("%s of %s replicas updated" % (updated, wanted))
    if total > updated:
        pending.append("%s old replicas are still terminating" % (total - updated))
    if available < wanted:
        pending.append("%s of %s replicas available" % (available, wanted))
    conditions = _conditions(deployment)
    failure = conditions.get("ReplicaFailure") or {}
    if failure.get("status") == "True":
        pending.append("replica failure: %s" % (_detail(failure) or "no reason given"))
    progressing = conditions.get("Progressing") or {}
    if progressing.get("status") == "False":
        pending.append("not progressing: %s" % (_detail(progressing) or "no reason given"))
    elif progressing and progressing.get("reason") != "NewReplicaSetAvailable":
        # The controller's last word on a finished rollout; waiting for it also means the
        # Deployment's status has stopped changing (a second run then changes nothing).
        pending.append("rollout not finished (Progressing: %s)" % (_detail(progressing) or "no reason given"))
    pod_reports = []
    if pending:
        for pod in pods or []:
            problems = pod_problems(pod)
            if problems:
                pod_name = (pod.get("metadata") or {}).get("name")
                pod_reports.append({"name": pod_name, "problems": problems})
                pending.append("pod %s: %s" % (pod_name, "; ".join(problems)))
        if pods is not None and not pods and wanted:
            pending.append("no pods exist for it yet")
    return _verdict(
        "Deployment",
        deployment,
        pending,
        replicas=wanted,
        updated_replicas=updated,
        available_replicas=available,
        pods=pod_reports,
    )


def subscription_installed(subscription, csv=None):
    """Judge an OLM Subscription by the phase of the ClusterServiceVersion it installed."""
    status = subscription.get("status") or {}
    installed = status.get("installedCSV") or ""
    pending = []
    if not installed:
        pending.append(
            "OLM has not installed a ClusterServiceVersion yet (state %s)"
            % (status.get("state") or "not reported")
        )
        for condition in status.get("conditions") or []:
            if isinstance(condition, dict) and condition.get("status") == "True" and _detail(condition):
                pending.append("%s: %s" % (condition.get("type"), _detail(condition)))
    elif csv is None:
        pending.append("ClusterServiceVersion %s not found" % installed)
    else:
        csv_status = csv.get("status") or {}
        phase = csv_status.get("phase") or "not reported"
        if phase != "Succeeded":
            detail = _detail(csv_status)
            pending.append(
                "ClusterServiceVersion %s is in phase %s, want Succeeded%s"
                % (installed, phase, " (%s)" % detail if detail else "")
            )
    return _verdict(
        "Subscription", subscription, pending, installed_csv=installed or None, state=status.get("state")
    )


def clusterpolicy_ready(cluster_policy):
    """Judge an NVIDIA GPU Operator ClusterPolicy by ``status.state``."""
    status = cluster_policy.get("status") or {}
    state = status.get("state") or ""
    pending = []
    failed = False
    if state == "ready":
        pass
    elif state == "ignored":
        failed = True
        pending.append(
            "state is ignored: the GPU Operator acts on one ClusterPolicy per cluster and another "
            "one came first; delete one of them"
        )
    elif not state:
        pending.append("no status yet: the GPU Operator has not reconciled it (is the operator running?)")
    else:
        pending.append("state is %s, want ready" % state)
        error = _conditions(cluster_policy).get("Error") or {}
        if error.get("status") == "True" and error.get("message"):
            pending.append(error["message"])
    return _verdict(
        "ClusterPolicy",
        cluster_policy,
        pending,
        failed,
        state=state or None,
        operator_namespace=status.get("namespace"),
    )


def timeout_message(verdicts, timeout):
    """One line for each object not ready within the timeout, with its state and conditions."""
    lines = []
    for verdict in verdicts:
        if verdict["done"]:
            continue
        line = "%s is not ready after %ss: %s" % (reference(verdict), timeout, "; ".join(verdict["pending"]))
        if verdict.get("state"):
            line += "; state: %s" % verdict["state"]
        line += "; conditions: %s" % verdict["conditions"]
        lines.append(line)
    return "\n".join(lines)


def failure_message(verdicts):
    """One line for each object that can never become ready (``failed``)."""
    return "\n".join(
        "%s will not become ready: %s; conditions: %s"
        % (reference(verdict), "; ".join(verdict["pending"]), verdict["conditions"])
        for verdict in verdicts
        if verdict.get("failed")
    )

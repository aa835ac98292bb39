# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""OpenShift SecurityContextConstraints for training pods: build one, and judge a pod against one.

:func:`training_scc` builds the least-privilege SCC the training_namespace role creates for the
trainer ServiceAccount: it grants what OpenShift's default ``restricted-v2`` refuses to a training
pod (the ``IPC_LOCK`` capability that RDMA memory registration needs) and nothing more.

:func:`scc_admits` reads an SCC and a pod spec (as the collection renders it) and returns the
reasons OpenShift's SCC admission would refuse the pod; empty when it would admit it. It judges on
paper what the admission plugin checks: privileged containers and privilege escalation, added
capabilities, host namespaces and ports, volume types, the user id and groups against their
ranges, SELinux options, seccomp profiles and a read-only root filesystem. Where an SCC leaves a
range or an SELinux level to the namespace, the namespace's ``openshift.io/sa.scc.*`` annotations
supply it, as they do on the cluster. Fields the pod leaves out are admitted: the admission then
fills them in from the SCC.
"""

from __future__ import annotations

import re

API_VERSION = "security.openshift.io/v1"
KIND = "SecurityContextConstraints"
# What OpenShift's namespace controller writes on every namespace: the uid range and the group
# range (START/SIZE) and the SELinux MCS level its pods get.
UID_RANGE_ANNOTATION = "openshift.io/sa.scc.uid-range"
GROUP_RANGE_ANNOTATION = "openshift.io/sa.scc.supplemental-groups"
MCS_ANNOTATION = "openshift.io/sa.scc.mcs"
# The only capability a training pod adds: RDMA registers (pins) memory, which needs IPC_LOCK.
TRAINING_CAPABILITIES = ("IPC_LOCK",)
# The volume types the collection's pods use: emptyDir (/dev/shm, checkpoints without a PVC),
# persistentVolumeClaim (dataset, checkpoints), projected (the ServiceAccount token), and
# configMap, secret, downwardAPI and ephemeral for what the Training Operator and users mount.
# No hostPath, no NFS or other in-tree network volumes: those need a PVC.
TRAINING_VOLUMES = (
    "configMap",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
RUNTIME_DEFAULT_SECCOMP = "runtime/default"
_OLD_NAMES = {"docker/default": RUNTIME_DEFAULT_SECCOMP}
_RANGE = re.compile(r"^\s*([0-9]+)\s*([/-])\s*([0-9]+)\s*$")
# The volume sources a pod may name (the keys of a Volume other than its name).
_HOST_PATH = "hostPath"


def parse_id_range(text):
    """(first, last) ids of a range written START/SIZE (as OpenShift's annotations write it) or
    FIRST-LAST; None when ``text`` is neither or the range is empty."""
    match = _RANGE.match(str(text)) if text not in (None, "") else None
    if not match:
        return None
    first, separator, other = int(match.group(1)), match.group(2), int(match.group(3))
    last = first + other - 1 if separator == "/" else other
    return (first, last) if last >= first else None


def training_scc(name, labels=None, uid_range=None, group_range=None):
    """The SCC for training pods; ``uid_range``/``group_range`` are (first, last) or None to use
    the namespace's own ranges (its ``openshift.io/sa.scc.*`` annotations), as restricted-v2 does.

    Every grant is explicit, so that a reviewer reads the whole policy here:

    - no privileged container, no privilege escalation (and none by default);
    - capabilities: every one is dropped (``requiredDropCapabilities: [ALL]``) and IPC_LOCK alone
      may be added back, none by default;
    - no host network, PID or IPC namespace, no host ports, no hostPath volumes; the volume types
      the trainer pods use and nothing else;
    - the user id from a range (MustRunAsRange), fsGroup and supplemental groups from a range
      (MustRunAs), the namespace's SELinux level (MustRunAs), the runtime's default seccomp filter;
    - the root filesystem is not forced read-only: torch and the trainer write caches and temporary
      files (``~/.cache``, ``/tmp``) there; a pod may still ask for a read-only one;
    - ``users`` and ``groups`` are empty: the SCC is granted to the trainer ServiceAccount through
      RBAC (verb ``use``) and to no one else.
    """
    run_as_user = {"type": "MustRunAsRange"}
    if uid_range:
        run_as_user.update({"uidRangeMin": uid_range[0], "uidRangeMax": uid_range[1]})
    groups = {"type": "MustRunAs"}
    if group_range:
        groups["ranges"] = [{"min": group_range[0], "max": group_range[1]}]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": {
                "kubernetes.io/description": (
                    "gpuops.training: distributed training pods (IPC_LOCK for RDMA, nothing else beyond"
                    " restricted-v2); granted to one namespace's trainer ServiceAccount."
                )
            },
        },
        # No precedence over the cluster's SCCs (null, as restricted-v2's): OpenShift tries the
        # most restrictive first, so a pod that asks for nothing more still gets restricted-v2.
        "priority": None,
        "allowPrivilegedContainer": False,
        "allowPrivilegeEscalation": False,
        "defaultAllowPrivilegeEscalation": False,
        "allowedCapabilities": list(TRAINING_CAPABILITIES),
        "defaultAddCapabilities": [],
        "requiredDropCapabilities": ["ALL"],
        "allowHostDirVolumePlugin": False,
        "allowHostIPC": False,
        "allowHostNetwork": False,
        "allowHostPID": False,
        "allowHostPorts": False,
        "readOnlyRootFilesystem": False,
        "runAsUser": run_as_user,
        "seLinuxContext": {"type": "MustRunAs"},
        "fsGroup": dict(groups),
        "supplementalGroups": dict(groups),
        "seccompProfiles": [RUNTIME_DEFAULT_SECCOMP],
        "volumes": list(TRAINING_VOLUMES),
        "users": [],
        "groups": [],
    }


# --------------------------------------------------------------------------------------
# the admission on paper
# --------------------------------------------------------------------------------------


def scc_admits(scc, pod_spec, namespace_annotations=None):
    """The reasons the SCC refuses the pod spec, one message each; [] when it admits it."""
    annotations = namespace_annotations or {}
    name = (scc.get("metadata") or {}).get("name", "the SCC")
    problems = []
    problems += _host_problems(scc, pod_spec, name)
    problems += _volume_problems(scc, pod_spec, name)
    pod_context = pod_spec.get("securityContext") or {}
    problems += _group_problems(scc, pod_context, annotations, name)
    for container in _containers(pod_spec):
        problems += _container_problems(scc, container, pod_context, annotations, name)
    return problems


def _containers(pod_spec):
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod_spec.get(key) or []


def _host_problems(scc, pod_spec, name):
    problems = []
    for field, allowed in (
        ("hostNetwork", "allowHostNetwork"),
        ("hostPID", "allowHostPID"),
        ("hostIPC", "allowHostIPC"),
    ):
        if pod_spec.get(field) and not scc.get(allowed):
            problems.append(
                "the pod sets %s: true, which %s does not allow (%s is false)" % (field, name, allowed)
            )
    return problems


def _volume_problems(scc, pod_spec, name):
    allowed = set(scc.get("volumes") or [])
    problems = []
    for volume in pod_spec.get("volumes") or []:
        for source in sorted(set(volume) - {"name"}):
            if "*" not in allowed and source not in allowed:
                problems.append(
                    "volume %s is of type %s, which %s does not allow (volumes: %s)"
                    % (volume.get("name"), source, name, ", ".join(sorted(allowed)) or "none")
                )
            elif source == _HOST_PATH and not scc.get("allowHostDirVolumePlugin"):
                problems.append(
                    "volume %s is a hostPath, which %s does not allow (allowHostDirVolumePlugin is false)"
                    % (volume.get("name"), name)
                )
    return problems


def _range_of(strategy, keys, annotations, annotation):
    """The (first, last) ranges a strategy allows: its own, else the namespace annotation's."""
    if keys == "uid":
        if strategy.get("uidRangeMin") is not None and strategy.get("uidRangeMax") is not None:
            return [(int(strategy["uidRangeMin"]), int(strategy["uidRangeMax"]))]
    elif strategy.get("ranges"):
        return [(int(item["min"]), int(item["max"])) for item in strategy["ranges"]]
    # The namespace's annotation may list several ranges, comma-separated.
    ranges = [parse_id_range(part) for part in str(annotations.get(annotation, "")).split(",") if part]
    return [item for item in ranges if item]


def _within(value, ranges):
    return any(first <= value <= last for first, last in ranges)


def _text(ranges):
    return ", ".join("%d-%d" % item for item in ranges)


def _group_problems(scc, pod_context, annotations, name):
    problems = []
    for field, strategy_key in (("fsGroup", "fsGroup"), ("supplementalGroups", "supplementalGroups")):
        values = pod_context.get(field)
        if values is None:
            continue
        values = values if isinstance(values, list) else [values]
        strategy = scc.get(strategy_key) or {}
        if strategy.get("type") != "MustRunAs":
            continue
        ranges = _range_of(strategy, "groups", annotations, GROUP_RANGE_ANNOTATION)
        if not ranges:
            problems.append(
                "the pod sets %s, but %s has no group range of its own and the namespace no %s annotation"
                % (field, name, GROUP_RANGE_ANNOTATION)
            )
            continue
        for value in values:
            if not _within(int(value), ranges):
                problems.append(
                    "the pod's %s %s is outside the range %s allows (%s)"
                    % (field, value, name, _text(ranges))
                )
    return problems


def _container_problems(scc, container, pod_context, annotations, name):
    where = "container %s" % container.get("name")
    context = container.get("securityContext") or {}
    problems = []
    if context.get("privileged") and not scc.get("allowPrivilegedContainer"):
        problems.append("%s is privileged, which %s does not allow" % (where, name))
    if context.get("allowPrivilegeEscalation") and scc.get("allowPrivilegeEscalation") is False:
        problems.append("%s allows privilege escalation, which %s does not allow" % (where, name))
    if context.get("readOnlyRootFilesystem") is False and scc.get("readOnlyRootFilesystem"):
        problems.append("%s asks for a writable root filesystem; %s requires a read-only one" % (where, name))
    problems += _capability_problems(scc, context, where, name)
    for port in container.get("ports") or []:
        if port.get("hostPort") and not scc.get("allowHostPorts"):
            problems.append(
                "%s uses host port %s, which %s does not allow (allowHostPorts is false)"
                % (where, port["hostPort"], name)
            )
    problems += _user_problems(scc, context, pod_context, annotations, where, name)
    problems += _selinux_problems(scc, context, pod_context, annotations, where, name)
    problems += _seccomp_problems(scc, context, pod_context, where, name)
    return problems


def _capability_problems(scc, context, where, name):
    added = list((context.get("capabilities") or {}).get("add") or [])
    allowed = set(scc.get("allowedCapabilities") or []) | set(scc.get("defaultAddCapabilities") or [])
    required_drop = set(scc.get("requiredDropCapabilities") or [])
    problems = []
    for capability in added:
        if capability in required_drop:
            problems.append("%s adds %s, which %s requires to be dropped" % (where, capability, name))
        elif "*" not in allowed and capability not in allowed:
            problems.append(
                "%s adds capability %s, which %s does not allow (allowed: %s)"
                % (where, capability, name, ", ".join(sorted(allowed)) or "none")
            )
    return problems


def _user_problems(scc, context, pod_context, annotations, where, name):
    uid = context.get("runAsUser", pod_context.get("runAsUser"))
    strategy = scc.get("runAsUser") or {}
    kind = strategy.get("type")
    if uid is None or kind == "RunAsAny":
        return []
    uid = int(uid)
    if kind == "MustRunAs":
        allowed = strategy.get("uid")
        if allowed is not None:
            return (
                []
                if uid == int(allowed)
                else ["%s runs as uid %d; %s requires uid %s" % (where, uid, name, allowed)]
            )
    elif kind == "MustRunAsNonRoot":
        return [] if uid != 0 else ["%s runs as root (uid 0); %s requires a non-root uid" % (where, name)]
    ranges = _range_of(strategy, "uid", annotations, UID_RANGE_ANNOTATION)
    if not ranges:
        return [
            "%s runs as uid %d, but %s has no uid range of its own and the namespace no %s annotation"
            % (where, uid, name, UID_RANGE_ANNOTATION)
        ]
    if not _within(uid, ranges):
        return ["%s runs as uid %d, outside the range %s allows (%s)" % (where, uid, name, _text(ranges))]
    return []


def _selinux_problems(scc, context, pod_context, annotations, where, name):
    options = context.get("seLinuxOptions", pod_context.get("seLinuxOptions"))
    strategy = scc.get("seLinuxContext") or {}
    if not options or strategy.get("type") != "MustRunAs":
        return []
    wanted = dict(strategy.get("seLinuxOptions") or {})
    if not wanted and annotations.get(MCS_ANNOTATION):
        wanted = {"level": annotations[MCS_ANNOTATION]}
    differing = sorted(key for key, value in options.items() if key in wanted and value != wanted[key])
    if differing:
        return [
            "%s sets SELinux %s other than %s requires (%s)"
            % (
                where,
                ", ".join(differing),
                name,
                ", ".join("%s=%s" % (key, wanted[key]) for key in differing),
            )
        ]
    return []


def _seccomp_name(profile):
    kind = (profile or {}).get("type")
    if kind == "RuntimeDefault":
        return RUNTIME_DEFAULT_SECCOMP
    if kind == "Localhost":
        return "localhost/%s" % profile.get("localhostProfile")
    return str(kind).lower() if kind else None


def _seccomp_problems(scc, context, pod_context, where, name):
    profile = _seccomp_name(context.get("seccompProfile", pod_context.get("seccompProfile")))
    if profile is None:
        return []
    # docker/default is the old name of runtime/default.
    allowed = {_OLD_NAMES.get(item, item) for item in scc.get("seccompProfiles") or []}
    if "*" in allowed or _OLD_NAMES.get(profile, profile) in allowed:
        return []
    return [
        "%s uses the seccomp profile %s, which %s does not allow (allowed: %s)"
        % (where, profile, name, ", ".join(sorted(scc.get("seccompProfiles") or [])) or "none")
    ]

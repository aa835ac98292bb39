# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The objects of a training namespace sized for Guaranteed QoS: check, then build.

``namespace_problems`` checks every setting of the training_namespace role and returns one
message per problem, naming the role variable and what was expected, so the role can stop
before its first API call. ``namespace_objects`` builds the objects, in the order they are
applied: Namespace, PriorityClass, ServiceAccount, Role, RoleBinding, the PVCs, LimitRange,
ResourceQuota, and Kueue's LocalQueue. ``scc_objects`` builds what OpenShift needs besides: the
trainer's own SecurityContextConstraints, and the Role and RoleBinding that let the trainer
ServiceAccount, and no one else, use it (the role adds them when ``security.openshift.io`` is
served).

Settings are the role's variables without their ``training_namespace_`` prefix; messages
put the prefix back.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.gpuops.training.plugins.module_utils.image_pull_secrets import (
    RECORD_ANNOTATION,
    account_plan,
    account_problems,
    name_problems,
)
from ansible_collections.gpuops.training.plugins.module_utils.k8s_names import (
    dns_label_problem,
    dns_subdomain_problem,
    labels_problems,
    qualified_name_problem,
)
from ansible_collections.gpuops.training.plugins.module_utils.openshift_scc import (
    parse_id_range,
    training_scc,
)
from ansible_collections.gpuops.training.plugins.module_utils.pod_scheduling import (
    COMPONENT_LABEL,
    RANKS_COMPONENT,
)
from ansible_collections.gpuops.training.plugins.module_utils.quantities import QuantityError, parse_quantity

PREFIX = "training_namespace_"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuops.training"}
POD_SECURITY_LEVELS = ("", "privileged", "baseline", "restricted")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
# User-defined PriorityClasses may not exceed this (higher values are the system's).
MAX_PRIORITY = 1000000000
PVCS = ("dataset", "checkpoint")
RULE_KEYS = ("apiGroups", "resources", "verbs", "resourceNames")
LIMIT_RANGE_NAME = "container-defaults"
QUOTA_NAME = "training-quota"
NETWORK_POLICY_NAME = "training-ranks"
# The label every rank's pod carries.
RANKS_SELECTOR = {COMPONENT_LABEL: RANKS_COMPONENT}
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
SCC_CHOICES = ("auto", "true", "false")
# The SCC is cluster-scoped: its default name carries the namespace's, so that two training
# namespaces each get their own.
SCC_NAME_PREFIX = "gpuops-training-"

# What a trainer needs from the API: read its own pods (peers, rendezvous), their logs,
# services (headless services of the job) and configmaps (run settings). Nothing on Secrets.
TRAINER_RULES = (
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["services", "configmaps"], "verbs": ["get", "list", "watch"]},
)


class _Checker:
    """Collects problems; each names the role variable it is about."""

    def __init__(self, settings):
        self.settings = settings
        self.problems = []

    def add(self, key, message):
        self.problems.append("%s%s %s" % (PREFIX, key, message))

    def get(self, key, default=None):
        return self.settings.get(key, default)

    def bool(self, key):
        value = self.get(key)
        if not isinstance(value, bool):
            self.add(key, "must be true or false, got %r" % (value,))
            return False
        return value

    def quantity(self, key, kind, optional=False):
        """A positive quantity (kind 'cpu' or 'memory'/'storage': whole bytes), or None."""
        value = self.get(key)
        if optional and value in ("", None):
            return None
        try:
            number = parse_quantity(value, "")
        except QuantityError:
            example = "'8' or '7500m'" if kind == "cpu" else "'64Gi'"
            self.add(key, "must be a Kubernetes quantity such as %s, got %r" % (example, value))
            return None
        if number <= 0:
            self.add(key, "must be above 0, got %r" % (value,))
            return None
        if kind != "cpu" and number != number.to_integral_value():
            self.add(key, "must be a whole number of bytes (such as '64Gi'), got %r" % (value,))
            return None
        return number

    def count(self, key, minimum=0):
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(key, "must be a whole number, got %r" % (value,))
            return None
        if value < minimum:
            self.add(key, "must be at least %d, got %d" % (minimum, value))
            return None
        return value

    def name(self, key, problem_of):
        problem = problem_of(self.get(key))
        if problem:
            self.add(key, problem)
            return False
        return True


def namespace_problems(settings):
    """Every problem of the role's settings, as messages naming the variable; [] when valid.

    With ``state: absent`` only the names are checked: deleting needs nothing else."""
    if not isinstance(settings, dict):
        return ["training_namespace settings must be a mapping, got %s" % type(settings).__name__]
    check = _Checker(settings)
    check.name("name", dns_label_problem)
    if settings.get("state") == "absent":
        # Deleting needs only the names.
        if settings.get("priority_class") not in ("", None):
            check.name("priority_class", dns_subdomain_problem)
        _scc_choice_problems(check)
        return check.problems
    check.problems.extend(labels_problems(settings.get("labels") or {}, PREFIX + "labels"))
    level = settings.get("pod_security")
    if level not in POD_SECURITY_LEVELS:
        check.add(
            "pod_security",
            "must be one of %s (empty for no Pod Security labels), got %r"
            % (", ".join(repr(item) for item in POD_SECURITY_LEVELS), level),
        )
    version = settings.get("pod_security_version")
    if not isinstance(version, str) or not (version == "latest" or version.startswith("v1.")):
        check.add(
            "pod_security_version",
            "must be 'latest' or a Kubernetes minor such as 'v1.36', got %r" % (version,),
        )

    storage_total = _pvc_problems(check)
    _service_account_problems(check)
    _scc_problems(check)
    _priority_class_problems(check)
    _kueue_problems(check)
    _network_policy_problems(check)
    container_limits = _limit_range_problems(check)
    _quota_problems(check, container_limits, storage_total)
    return check.problems


def _pvc_problems(check):
    """Check both PVCs; return the sum of the enabled PVCs' sizes."""
    total = 0
    names = {}
    for pvc in PVCS:
        key = "%s_pvc" % pvc
        if not check.bool(key):
            continue
        if check.name(key + "_name", dns_subdomain_problem):
            names.setdefault(check.get(key + "_name"), []).append(key + "_name")
        size = check.quantity(key + "_size", "storage")
        if size is not None:
            total += size
        storage_class = check.get(key + "_storage_class")
        if storage_class not in ("", None):
            check.name(key + "_storage_class", dns_subdomain_problem)
        modes = check.get(key + "_access_modes")
        if not isinstance(modes, list) or not modes:
            check.add(
                key + "_access_modes",
                "must be a non-empty list of %s, got %r" % (", ".join(ACCESS_MODES), modes),
            )
        else:
            for mode in modes:
                if mode not in ACCESS_MODES:
                    check.add(key + "_access_modes", "has %r; expected %s" % (mode, ", ".join(ACCESS_MODES)))
    for name, keys in names.items():
        if len(keys) > 1:
            check.add(
                keys[1], "names PVC %r, as %s%s does; each PVC needs its own name" % (name, PREFIX, keys[0])
            )
    return total


def _service_account_problems(check):
    check.name("service_account", dns_subdomain_problem)
    check.problems.extend(name_problems(check.get("image_pull_secrets"), PREFIX + "image_pull_secrets"))
    rules = check.get("role_extra_rules")
    if not isinstance(rules, list):
        check.add(
            "role_extra_rules",
            "must be a list of RBAC rules ({apiGroups, resources, verbs}), got %r" % (rules,),
        )
        return
    for index, rule in enumerate(rules):
        where = "role_extra_rules[%d]" % index
        if not isinstance(rule, dict):
            check.add(where, "must be a mapping with apiGroups, resources and verbs, got %r" % (rule,))
            continue
        unknown = sorted(set(rule) - set(RULE_KEYS))
        if unknown:
            check.add(
                where, "has unknown keys %s; a rule has %s" % (", ".join(unknown), ", ".join(RULE_KEYS))
            )
        for key in ("apiGroups", "resources", "verbs"):
            value = rule.get(key)
            if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
                check.add(where, "%s must be a non-empty list of strings, got %r" % (key, value))
        resources = rule.get("resources") if isinstance(rule.get("resources"), list) else []
        groups = rule.get("apiGroups") if isinstance(rule.get("apiGroups"), list) else []
        core = "" in groups or "*" in groups
        if core and any(
            item == "*" or item == "secrets" or str(item).startswith("secrets/") for item in resources
        ):
            check.add(
                where,
                "grants access to Secrets (resources %r): the trainer must not read Secrets" % resources,
            )
        if "*" in (rule.get("verbs") or []) or "escalate" in (rule.get("verbs") or []):
            check.add(where, "grants verbs %r: name the verbs the trainer needs" % rule.get("verbs"))


def scc_choice(settings):
    """auto (also when left out), true or false (a YAML boolean counts), or None when it is none of them."""
    value = settings.get("scc", "auto")
    text = str(value).lower() if isinstance(value, (bool, str)) else None
    return text if text in SCC_CHOICES else None


def scc_name(settings):
    return settings.get("scc_name") or SCC_NAME_PREFIX + str(settings.get("name"))


def _scc_choice_problems(check):
    if scc_choice(check.settings) is None:
        check.add("scc", "must be auto, true or false, got %r" % (check.get("scc"),))
    # Empty: gpuops-training-<namespace>, always a valid name.
    if check.get("scc_name") not in ("", None):
        check.name("scc_name", dns_subdomain_problem)


def _scc_problems(check):
    _scc_choice_problems(check)
    for key, what in (("scc_uid_range", "user"), ("scc_gid_range", "group")):
        value = check.get(key)
        if value in ("", None):
            continue
        found = parse_id_range(value)
        if found is None:
            check.add(
                key,
                "must be a %s id range written START/SIZE (as OpenShift's namespace annotations write"
                " it, such as '1000/1' or '1000680000/10000') or FIRST-LAST (such as '1000-1999'), or"
                " empty for the namespace's own range; got %r" % (what, value),
            )
        elif key == "scc_uid_range" and found[0] == 0:
            check.add(
                key, "(%s) must not include uid 0: the SCC must not let the trainer run as root" % value
            )


def _priority_class_problems(check):
    name = check.get("priority_class")
    if name in ("", None):
        return
    if check.name("priority_class", dns_subdomain_problem) and name.startswith("system-"):
        check.add("priority_class", "must not start with 'system-' (reserved for Kubernetes), got %r" % name)
    value = check.get("priority_class_value")
    if isinstance(value, bool) or not isinstance(value, int) or not -2147483648 <= value <= MAX_PRIORITY:
        check.add("priority_class_value", "must be a whole number up to %d, got %r" % (MAX_PRIORITY, value))
    policy = check.get("priority_class_preemption_policy")
    if policy not in PREEMPTION_POLICIES:
        check.add(
            "priority_class_preemption_policy",
            "must be one of %s, got %r" % (", ".join(PREEMPTION_POLICIES), policy),
        )
    if not isinstance(check.get("priority_class_description"), str):
        check.add("priority_class_description", "must be a string")


def _limit_range_problems(check):
    """Check the per-container defaults; return their limits {cpu, memory} (None if bad)."""
    if not check.bool("limit_range"):
        return {}
    guaranteed = check.bool("guaranteed")
    limits = {}
    for resource, kind in (("cpu", "cpu"), ("memory", "memory")):
        request = check.quantity("container_%s_request" % resource, kind)
        limit = check.quantity("container_%s_limit" % resource, kind)
        maximum = check.quantity("container_max_%s" % resource, kind, optional=True)
        limits[resource] = limit
        if request is not None and limit is not None:
            if limit < request:
                check.add(
                    "container_%s_limit" % resource,
                    "(%s) must be at least %scontainer_%s_request (%s): a limit below the request is refused"
                    % (
                        check.get("container_%s_limit" % resource),
                        PREFIX,
                        resource,
                        check.get("container_%s_request" % resource),
                    ),
                )
            elif guaranteed and limit != request:
                check.add(
                    "container_%s_request" % resource,
                    "(%s) must equal %scontainer_%s_limit (%s) when %sguaranteed is true:"
                    " Guaranteed QoS needs requests == limits"
                    % (
                        check.get("container_%s_request" % resource),
                        PREFIX,
                        resource,
                        check.get("container_%s_limit" % resource),
                        PREFIX,
                    ),
                )
        if maximum is not None and limit is not None and maximum < limit:
            check.add(
                "container_max_%s" % resource,
                "(%s) must be at least %scontainer_%s_limit (%s)"
                % (
                    check.get("container_max_%s" % resource),
                    PREFIX,
                    resource,
                    check.get("container_%s_limit" % resource),
                ),
            )
    return limits


def _quota_problems(check, container_limits, storage_total):
    if not check.bool("quota"):
        return
    for resource, kind in (("cpu", "cpu"), ("memory", "memory")):
        key = "quota_%s" % resource
        total = check.quantity(key, kind)
        limit = container_limits.get(resource)
        if total is not None and limit is not None and total < limit:
            check.add(
                key,
                "(%s) must be at least %scontainer_%s_limit (%s), or no container fits the quota"
                % (check.get(key), PREFIX, resource, check.get("container_%s_limit" % resource)),
            )
    check.count("quota_gpus")
    check.count("quota_pods")
    check.name("gpu_resource", lambda value: qualified_name_problem(value, require_prefix=True))
    extended = check.get("quota_extended_resources")
    if not isinstance(extended, dict):
        check.add(
            "quota_extended_resources", "must be a mapping of resource names to counts, got %r" % (extended,)
        )
    else:
        for resource, count in extended.items():
            problem = qualified_name_problem(resource, require_prefix=True)
            if problem:
                check.add("quota_extended_resources", "key %r %s" % (resource, problem))
            elif resource == check.get("gpu_resource"):
                check.add(
                    "quota_extended_resources", "repeats %r; set it with %squota_gpus" % (resource, PREFIX)
                )
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                check.add(
                    "quota_extended_resources",
                    "%s must be a whole number of at least 0, got %r" % (resource, count),
                )
    storage = check.quantity("quota_storage", "storage", optional=True)
    if storage is not None and storage < storage_total:
        check.add(
            "quota_storage",
            "(%s) must be at least the PVCs' total size (%s bytes), or the role's own PVCs exceed it"
            % (check.get("quota_storage"), storage_total),
        )


def _network_policy_problems(check):
    check.bool("network_policy")
    egress = check.get("network_policy_egress")
    if not isinstance(egress, list):
        check.add("network_policy_egress", "must be a list of {cidr, ports}, got %r" % (egress,))
        return
    for index, rule in enumerate(egress):
        where = "network_policy_egress[%d]" % index
        if not isinstance(rule, dict) or set(rule) - {"cidr", "ports"} or "cidr" not in rule:
            check.add(where, "must be a mapping with cidr and optional ports (e.g. {cidr: 10.0.0.0/8, "
                      "ports: [443]}), got %r" % (rule,))  # fmt: skip
            continue
        try:
            ipaddress.ip_network(str(rule["cidr"]), strict=False)
        except ValueError:
            check.add(where, "cidr must be a CIDR such as 10.0.0.0/8, got %r" % (rule["cidr"],))
        ports = rule.get("ports", [])
        if not isinstance(ports, list) or not all(
            isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 for port in ports
        ):
            check.add(where, "ports must be a list of TCP ports from 1 to 65535, got %r" % (ports,))


def network_policy(settings):
    """The ranks' NetworkPolicy: they reach each other and are reached from the namespace's
    pods (rendezvous, NCCL's sockets, an MPIJob's launcher), resolve names, and reach beyond
    that only the CIDRs of ``network_policy_egress`` (data sources, experiment trackers).
    Secondary networks (Multus, SR-IOV: RDMA) are not the pod network's, and not affected."""
    same_namespace = [{"podSelector": {}}]
    egress = [
        {"to": same_namespace},
        {
            "to": [{"namespaceSelector": {}}],
            "ports": [{"protocol": protocol, "port": 53} for protocol in ("UDP", "TCP")],
        },
    ]
    for rule in settings.get("network_policy_egress") or []:
        entry = {"to": [{"ipBlock": {"cidr": str(rule["cidr"])}}]}
        if rule.get("ports"):
            entry["ports"] = [{"protocol": "TCP", "port": port} for port in rule["ports"]]
        egress.append(entry)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(NETWORK_POLICY_NAME, settings["name"]),
        "spec": {
            "podSelector": {"matchLabels": dict(RANKS_SELECTOR)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": same_namespace}],
            "egress": egress,
        },
    }


def _kueue_problems(check):
    """The ClusterQueue (empty for no LocalQueue) and the LocalQueue's name, which is also the
    value of the label the training jobs carry."""
    if check.get("kueue_cluster_queue") in ("", None):
        return
    check.name("kueue_cluster_queue", dns_subdomain_problem)
    # A label value too (kueue.x-k8s.io/queue-name): a DNS-1123 label fits both.
    check.name("kueue_local_queue", dns_label_problem)


def _metadata(name, namespace=None, labels=None):
    metadata = {"name": name, "labels": dict(MANAGED_BY, **(labels or {}))}
    if namespace:
        metadata["namespace"] = namespace
    return metadata


def _quantity_text(value):
    return value if isinstance(value, str) else str(value)


def namespace_objects(settings):
    """The objects, in apply order. Call namespace_problems first: this assumes valid input."""
    name = settings["name"]
    objects = []
    namespace_labels = dict(settings.get("labels") or {})
    if settings.get("pod_security"):
        for mode in ("enforce", "audit", "warn"):
            namespace_labels["pod-security.kubernetes.io/%s" % mode] = settings["pod_security"]
            namespace_labels["pod-security.kubernetes.io/%s-version" % mode] = settings[
                "pod_security_version"
            ]
    objects.append(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _metadata(name, labels=namespace_labels)}
    )

    if settings.get("priority_class"):
        priority_class = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _metadata(settings["priority_class"]),
            "value": settings["priority_class_value"],
            "preemptionPolicy": settings["priority_class_preemption_policy"],
            "globalDefault": False,
        }
        if settings.get("priority_class_description"):
            priority_class["description"] = settings["priority_class_description"]
        objects.append(priority_class)

    account = settings["service_account"]
    service_account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(account, name)}
    if settings.get("image_pull_secrets"):
        # Every pod that runs as the account gets them, whatever its own spec says.
        service_account["imagePullSecrets"] = [{"name": secret} for secret in settings["image_pull_secrets"]]
    objects.append(service_account)
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(account, name),
            "rules": [dict(rule) for rule in TRAINER_RULES] + list(settings.get("role_extra_rules") or []),
        }
    )
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(account, name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": name}],
        }
    )

    for pvc in PVCS:
        key = "%s_pvc" % pvc
        if not settings.get(key):
            continue
        spec = {
            "accessModes": list(settings[key + "_access_modes"]),
            "resources": {"requests": {"storage": _quantity_text(settings[key + "_size"])}},
        }
        if settings.get(key + "_storage_class"):
            spec["storageClassName"] = settings[key + "_storage_class"]
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": _metadata(settings[key + "_name"], name, {"gpuops.training/volume": pvc}),
                "spec": spec,
            }
        )

    if settings.get("limit_range"):
        limit = {
            "type": "Container",
            "default": {
                "cpu": _quantity_text(settings["container_cpu_limit"]),
                "memory": _quantity_text(settings["container_memory_limit"]),
            },
            "defaultRequest": {
                "cpu": _quantity_text(settings["container_cpu_request"]),
                "memory": _quantity_text(settings["container_memory_request"]),
            },
        }
        maximum = {
            resource: _quantity_text(settings["container_max_%s" % resource])
            for resource in ("cpu", "memory")
            if settings.get("container_max_%s" % resource) not in ("", None)
        }
        if maximum:
            limit["max"] = maximum
        if settings.get("guaranteed"):
            # limit / request may not exceed 1: every container's requests equal its limits.
            limit["maxLimitRequestRatio"] = {"cpu": "1", "memory": "1"}
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": _metadata(LIMIT_RANGE_NAME, name),
                "spec": {"limits": [limit]},
            }
        )

    if settings.get("quota"):
        cpu = _quantity_text(settings["quota_cpu"])
        memory = _quantity_text(settings["quota_memory"])
        hard = {
            "requests.cpu": cpu,
            "limits.cpu": cpu,
            "requests.memory": memory,
            "limits.memory": memory,
            # Extended resources take only a requests. quota (their requests equal limits).
            "requests.%s" % settings["gpu_resource"]: str(settings["quota_gpus"]),
        }
        for resource, count in sorted((settings.get("quota_extended_resources") or {}).items()):
            hard["requests.%s" % resource] = str(count)
        if settings.get("quota_pods"):
            hard["pods"] = str(settings["quota_pods"])
        if settings.get("quota_storage") not in ("", None):
            hard["requests.storage"] = _quantity_text(settings["quota_storage"])
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _metadata(QUOTA_NAME, name),
                "spec": {"hard": hard},
            }
        )

    if settings.get("network_policy"):
        objects.append(network_policy(settings))

    if settings.get("kueue_cluster_queue"):
        objects.append(
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "LocalQueue",
                "metadata": _metadata(settings["kueue_local_queue"], name),
                "spec": {"clusterQueue": settings["kueue_cluster_queue"]},
            }
        )
    return objects


def scc_objects(settings):
    """The trainer's SecurityContextConstraints, and a Role (verb ``use`` on that SCC alone) with
    a RoleBinding to the trainer ServiceAccount alone, both in the namespace and named like the
    SCC. The uid and group ranges are the settings', else the namespace's own (OpenShift's
    admission reads its annotations, as for restricted-v2). Call namespace_problems first."""
    namespace = settings["name"]
    name = scc_name(settings)
    account = settings["service_account"]
    scc = training_scc(
        name,
        labels=dict(MANAGED_BY, **{"gpuops.training/namespace": namespace}),
        uid_range=parse_id_range(settings.get("scc_uid_range")),
        group_range=parse_id_range(settings.get("scc_gid_range")),
    )
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(name, namespace),
        "rules": [
            {
                "apiGroups": ["security.openshift.io"],
                "resources": ["securitycontextconstraints"],
                "resourceNames": [name],
                "verbs": ["use"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    return [scc, role, binding]


def with_account_pull_secrets(objects, account, field_manager):
    """The objects, with the trainer ServiceAccount's image pull Secrets as
    :func:`~image_pull_secrets.account_plan` decides from ``account``, the account as the server
    holds it (None when there is none): the entries others added (OpenShift's ServiceAccount
    controller) are kept, the collection's own recorded. When the list must change while another
    field manager owns it, the account carries the ``resourceVersion`` it was read at: the role
    applies it alone, with force, refused if the account changed since.

    The account built by :func:`namespace_objects` carries the wanted Secrets; the other objects
    are returned as they are. Raises ValueError naming what is wrong when the objects or the
    account read are not what those give."""
    problems = _pull_secret_objects_problems(objects) + account_problems(account)
    if problems:
        raise ValueError("; ".join(problems))
    result = []
    for item in objects:
        if item.get("kind") == "ServiceAccount" and item.get("apiVersion") == "v1":
            item = dict(item, metadata=dict(item["metadata"]))
            plan = account_plan(_names_of(item.pop("imagePullSecrets", None)), account, field_manager)
            if plan["names"] is not None:
                item["imagePullSecrets"] = [{"name": name} for name in plan["names"]]
            if plan["record"] is not None:
                item["metadata"]["annotations"] = dict(
                    item["metadata"].get("annotations") or {}, **{RECORD_ANNOTATION: plan["record"]}
                )
            if plan["force"]:
                item["metadata"]["resourceVersion"] = plan["resource_version"]
        result.append(item)
    return result


def _names_of(entries):
    return [entry["name"] for entry in entries or []]


def _pull_secret_objects_problems(objects):
    if not isinstance(objects, list) or not all(isinstance(item, dict) for item in objects):
        return ["the objects must be a list of mappings, got %r" % (objects,)]
    problems = []
    for item in objects:
        if item.get("kind") != "ServiceAccount" or item.get("apiVersion") != "v1":
            continue
        metadata = item.get("metadata")
        entries = item.get("imagePullSecrets")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("annotations") or {}, dict):
            problems.append("the ServiceAccount's metadata must be a mapping, its annotations too")
        if entries is not None and not (
            isinstance(entries, list)
            and all(isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in entries)
        ):
            problems.append(
                "the ServiceAccount's imagePullSecrets must be a list of {name}, got %r" % (entries,)
            )
    return problems

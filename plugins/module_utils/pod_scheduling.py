# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Where and when a run's pods are scheduled, checked and built here and nowhere else:

- the toleration of the GPU nodes' taint (the GPU Operator and the clouds' GPU node pools taint
  their nodes with the GPU resource's name, effect NoSchedule), added to the user's own
  tolerations unless one of them already tolerates it;
- the user's node affinity, passed through after a check of its shape;
- spreading the ranks' pods across nodes (one per node, or as even as the nodes allow), and
  the user's own topology spread constraints, which select the run's rank pods unless they say
  otherwise;
- gang scheduling: Kueue's queue-name label (the workload is created suspended and Kueue
  starts it once the whole quota is admitted), and the Training Operator's ``schedulingPolicy``
  for a PyTorchJob (a PodGroup for Volcano or the scheduler-plugins' coscheduling).

The settings are the training_job role's without the prefix (the nccl_tests role passes its
own of the same names); every problem names the caller's variable through ``var``.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils.k8s_names import (
    dns_subdomain_problem,
    label_value_problem,
    qualified_name_problem,
)
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_bool as _bool
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int

GPU_TAINT_EFFECT = "NoSchedule"
HOSTNAME_TOPOLOGY_KEY = "kubernetes.io/hostname"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The label that tells the pods that run ranks from others (an MPIJob's launcher): the spread
# constraints count only those.
COMPONENT_LABEL = "app.kubernetes.io/component"
RANKS_COMPONENT = "ranks"
SPREAD_CHOICES = ("none", "prefer", "require")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")
NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
REQUIRED_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_AFFINITY = "preferredDuringSchedulingIgnoredDuringExecution"
SPREAD_KEYS = (
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "labelSelector",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "matchLabelKeys",
)
MAX_INT32 = 2147483647
BOOLEAN_WORDS = ("true", "false", "yes", "no", "on", "off", "1", "0")
# The launchers whose workloads Kueue manages through the queue-name label.
KUEUE_LAUNCHERS = ("pytorchjob", "indexed_job", "trainjob")


# --------------------------------------------------------------------------------------
# building
# --------------------------------------------------------------------------------------


def gpu_toleration(settings):
    """The toleration of the GPU nodes' taint, or None: only for pods that request GPUs."""
    if not _bool(settings.get("gpu_toleration")) or (_int(settings.get("gpus_per_node")) or 0) <= 0:
        return None
    return {"key": str(settings.get("gpu_resource")), "operator": "Exists", "effect": GPU_TAINT_EFFECT}


def tolerates(toleration, key, effect):
    """Whether a toleration tolerates every taint of this key and effect, whatever its value."""
    if not isinstance(toleration, dict) or toleration.get("operator") != "Exists":
        return False
    return toleration.get("key") in (None, "", key) and toleration.get("effect") in (None, "", effect)


def tolerations(settings):
    """The user's tolerations, then the GPU taint's unless one of them already tolerates it."""
    result = [dict(item) for item in settings.get("tolerations") or []]
    default = gpu_toleration(settings)
    if default and not any(tolerates(item, default["key"], default["effect"]) for item in result):
        result.append(default)
    return result


def rank_selector(run_label_value, run_id_label):
    """The label selector of the run's pods that run ranks (not an MPIJob's launcher)."""
    return {"matchLabels": {run_id_label: run_label_value, COMPONENT_LABEL: RANKS_COMPONENT}}


def topology_spread_constraints(settings, pods, selector):
    """spread_across_nodes's constraint, then the user's; those without a selector count the
    run's rank pods.

    ``require`` is one pod per node: with maxSkew 1 and minDomains the number of pods, a node
    that has a pod of the run takes no second one even when fewer nodes than pods are eligible
    (the scheduler then counts the global minimum as 0), so the last pods stay Pending instead
    of sharing a node. Nodes whose taints the pods do not tolerate are no domains.
    """
    result = []
    choice = settings.get("spread_across_nodes")
    if choice in ("prefer", "require"):
        constraint = {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_TOPOLOGY_KEY,
            "whenUnsatisfiable": "DoNotSchedule" if choice == "require" else "ScheduleAnyway",
            "labelSelector": selector,
            "nodeTaintsPolicy": "Honor",
        }
        if choice == "require":
            constraint["minDomains"] = pods
        result.append(constraint)
    for item in settings.get("topology_spread_constraints") or []:
        constraint = dict(item)
        for key in ("maxSkew", "minDomains"):
            if key in constraint:
                constraint[key] = _int(constraint[key])
        if "labelSelector" not in constraint and not constraint.get("matchLabelKeys"):
            constraint["labelSelector"] = selector
        result.append(constraint)
    return result


def affinity(settings):
    """The pod's affinity: the user's node affinity, or None."""
    value = settings.get("node_affinity")
    return {"nodeAffinity": value} if value else None


def kueue_queue(settings):
    """The LocalQueue the workload is submitted to, or None."""
    return settings.get("kueue_local_queue") or None


def queue_for_kueue(workload, settings):
    """Label the workload object with its LocalQueue; the caller suspends it where the kind has
    a suspend field, so that nothing starts before Kueue admits the whole job."""
    queue = kueue_queue(settings)
    if queue:
        workload["metadata"]["labels"][KUEUE_QUEUE_LABEL] = queue
    return queue is not None


def scheduling_policy(settings, min_available):
    """A PyTorchJob's runPolicy.schedulingPolicy (a PodGroup of min_available pods), or None."""
    if not _bool(settings.get("pytorchjob_gang")):
        return None
    policy = {"minAvailable": min_available}
    if settings.get("pytorchjob_gang_queue"):
        policy["queue"] = str(settings["pytorchjob_gang_queue"])
    if settings.get("priority_class"):
        policy["priorityClass"] = str(settings["priority_class"])
    timeout = _int(settings.get("pytorchjob_gang_timeout_s")) or 0
    if timeout > 0:
        policy["scheduleTimeoutSeconds"] = timeout
    return policy


# --------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------


def _int_between(value, minimum, maximum=MAX_INT32):
    number = _int(value)
    return number if number is not None and minimum <= number <= maximum else None


def _string_list(value):
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def requirement_problems(where, requirement, operators, fields=False):
    """One node selector or label selector requirement: {key, operator, values}."""
    if not isinstance(requirement, dict):
        return ["%s must be a mapping with key, operator and values, got %r" % (where, requirement)]
    found = []
    unknown = sorted(set(requirement) - {"key", "operator", "values"})
    if unknown:
        found.append("%s has unknown fields %s (key, operator and values are allowed)" % (where, unknown))
    key = requirement.get("key")
    if fields:
        if key != "metadata.name":
            found.append("%s.key must be metadata.name, the only node field, got %r" % (where, key))
    elif qualified_name_problem(key):
        found.append("%s.key %s" % (where, qualified_name_problem(key)))
    operator = requirement.get("operator")
    if operator not in operators:
        return found + ["%s.operator must be one of %s, got %r" % (where, ", ".join(operators), operator)]
    values = requirement.get("values")
    if operator in ("Exists", "DoesNotExist"):
        if values:
            found.append("%s: operator %s takes no values, got %r" % (where, operator, values))
    elif not (_string_list(values) and values):
        found.append(
            "%s: operator %s needs a non-empty list of strings as values, got %r" % (where, operator, values)
        )
    elif operator in ("Gt", "Lt") and not (len(values) == 1 and _int(values[0]) is not None):
        found.append("%s: operator %s needs exactly one integer value, got %r" % (where, operator, values))
    elif fields and len(values) != 1:
        found.append("%s: a node field requirement takes exactly one value, got %r" % (where, values))
    else:
        found += [
            "%s: value %r %s" % (where, value, label_value_problem(value))
            for value in values
            if not fields and operator in ("In", "NotIn") and label_value_problem(value)
        ]
    return found


def node_selector_term_problems(where, term):
    if not isinstance(term, dict):
        return ["%s must be a node selector term (matchExpressions, matchFields), got %r" % (where, term)]
    found = []
    unknown = sorted(set(term) - {"matchExpressions", "matchFields"})
    if unknown:
        found.append(
            "%s has unknown fields %s (matchExpressions and matchFields are allowed)" % (where, unknown)
        )
    requirements = 0
    for field, fields in (("matchExpressions", False), ("matchFields", True)):
        items = term.get(field) or []
        if not isinstance(items, list):
            found.append("%s.%s must be a list of requirements, got %r" % (where, field, items))
            continue
        requirements += len(items)
        for index, item in enumerate(items):
            found += requirement_problems(
                "%s.%s[%d]" % (where, field, index), item, NODE_OPERATORS, fields=fields
            )
    if not requirements and not unknown:
        found.append("%s has no requirement, so it selects no node" % where)
    return found


def node_affinity_problems(value, name):
    """A v1 NodeAffinity: required nodeSelectorTerms and/or weighted preferences."""
    if value in (None, {}):
        return []
    if not isinstance(value, dict):
        return [
            "%s must be a nodeAffinity mapping (%s, %s), got %r"
            % (name, REQUIRED_AFFINITY, PREFERRED_AFFINITY, value)
        ]
    found = []
    unknown = sorted(set(value) - {REQUIRED_AFFINITY, PREFERRED_AFFINITY})
    if unknown:
        found.append(
            "%s has unknown fields %s: a nodeAffinity has %s and %s"
            % (name, unknown, REQUIRED_AFFINITY, PREFERRED_AFFINITY)
        )
    if REQUIRED_AFFINITY in value:
        required = value[REQUIRED_AFFINITY]
        terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
        where = "%s.%s" % (name, REQUIRED_AFFINITY)
        if not isinstance(required, dict) or set(required) != {"nodeSelectorTerms"}:
            found.append("%s must be a mapping with nodeSelectorTerms alone, got %r" % (where, required))
        elif not (isinstance(terms, list) and terms):
            found.append("%s.nodeSelectorTerms must be a non-empty list of terms, got %r" % (where, terms))
        else:
            for index, term in enumerate(terms):
                found += node_selector_term_problems("%s.nodeSelectorTerms[%d]" % (where, index), term)
    if PREFERRED_AFFINITY in value:
        preferred = value[PREFERRED_AFFINITY]
        where = "%s.%s" % (name, PREFERRED_AFFINITY)
        if not isinstance(preferred, list):
            return found + ["%s must be a list of {weight, preference}, got %r" % (where, preferred)]
        for index, item in enumerate(preferred):
            entry = "%s[%d]" % (where, index)
            if not isinstance(item, dict) or set(item) != {"weight", "preference"}:
                found.append("%s must be a mapping with weight and preference, got %r" % (entry, item))
                continue
            if _int_between(item["weight"], 1, 100) is None:
                found.append("%s.weight must be an integer from 1 to 100, got %r" % (entry, item["weight"]))
            found += node_selector_term_problems(entry + ".preference", item["preference"])
    return found


def label_selector_problems(where, selector):
    if not isinstance(selector, dict) or set(selector) - {"matchLabels", "matchExpressions"}:
        return ["%s must be a label selector (matchLabels, matchExpressions), got %r" % (where, selector)]
    found = []
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, dict):
        found.append("%s.matchLabels must be a mapping of labels, got %r" % (where, labels))
    else:
        for key, value in labels.items():
            problem = qualified_name_problem(key) or label_value_problem(value)
            if problem:
                found.append("%s.matchLabels %r: %s" % (where, key, problem))
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        return found + ["%s.matchExpressions must be a list of requirements, got %r" % (where, expressions)]
    for index, item in enumerate(expressions):
        found += requirement_problems("%s.matchExpressions[%d]" % (where, index), item, LABEL_OPERATORS)
    return found


def spread_constraint_problems(where, constraint):
    """One v1 TopologySpreadConstraint."""
    if not isinstance(constraint, dict):
        return ["%s must be a topology spread constraint (a mapping), got %r" % (where, constraint)]
    found = []
    unknown = sorted(set(constraint) - set(SPREAD_KEYS))
    if unknown:
        found.append("%s has unknown fields %s (allowed: %s)" % (where, unknown, ", ".join(SPREAD_KEYS)))
    if _int_between(constraint.get("maxSkew"), 1) is None:
        found.append(
            "%s.maxSkew must be an integer of at least 1, got %r" % (where, constraint.get("maxSkew"))
        )
    key = constraint.get("topologyKey")
    if qualified_name_problem(key):
        found.append(
            "%s.topologyKey must be a node label key such as %s or topology.kubernetes.io/zone, got %r"
            % (where, HOSTNAME_TOPOLOGY_KEY, key)
        )
    when = constraint.get("whenUnsatisfiable")
    if when not in WHEN_UNSATISFIABLE:
        found.append(
            "%s.whenUnsatisfiable must be one of %s, got %r" % (where, ", ".join(WHEN_UNSATISFIABLE), when)
        )
    if "minDomains" in constraint:
        if _int_between(constraint["minDomains"], 1) is None:
            found.append(
                "%s.minDomains must be an integer of at least 1, got %r" % (where, constraint["minDomains"])
            )
        elif when == "ScheduleAnyway":
            found.append("%s.minDomains needs whenUnsatisfiable DoNotSchedule, got %r" % (where, when))
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if policy in constraint and constraint[policy] not in INCLUSION_POLICIES:
            found.append("%s.%s must be Honor or Ignore, got %r" % (where, policy, constraint[policy]))
    if "labelSelector" in constraint:
        found += label_selector_problems(where + ".labelSelector", constraint["labelSelector"])
    if "matchLabelKeys" in constraint:
        keys = constraint["matchLabelKeys"]
        if not _string_list(keys) or any(qualified_name_problem(item) for item in keys):
            found.append("%s.matchLabelKeys must be a list of label keys, got %r" % (where, keys))
    return found


def _boolean_problem(s, var, key):
    value = s.get(key)
    if isinstance(value, bool) or str(value).strip().lower() in BOOLEAN_WORDS:
        return []
    return ["%s must be true or false, got %r" % (var(key), value)]


def _spreads(s):
    return s.get("spread_across_nodes") in ("prefer", "require")


def placement_problems(s, var, pod_spec_launchers, runtime_overrides_only):
    """The GPU toleration's switch, node affinity and topology spread (the choice of
    spread_across_nodes is checked with the role's other choices).

    ``pod_spec_launchers``: the launchers that render a pod spec (the others, Run:ai, cannot
    carry affinity or spread constraints); ``runtime_overrides_only``: whether the pod is an
    existing runtime's, whose TrainJob overrides cannot carry topology spread constraints.
    """
    found = _boolean_problem(s, var, "gpu_toleration")
    found += node_affinity_problems(s.get("node_affinity"), var("node_affinity"))
    constraints = s.get("topology_spread_constraints")
    if constraints is None:
        constraints = []
    if not isinstance(constraints, list):
        found.append(
            "%s must be a list of topology spread constraints, got %r"
            % (var("topology_spread_constraints"), constraints)
        )
        constraints = []
    # The API server refuses two constraints with the same topologyKey and whenUnsatisfiable.
    pairs = set()
    if _spreads(s):
        pairs.add(
            (
                HOSTNAME_TOPOLOGY_KEY,
                "DoNotSchedule" if s["spread_across_nodes"] == "require" else "ScheduleAnyway",
            )
        )
    for index, constraint in enumerate(constraints):
        where = "%s[%d]" % (var("topology_spread_constraints"), index)
        problems = spread_constraint_problems(where, constraint)
        found += problems
        if problems:
            continue
        pair = (constraint["topologyKey"], constraint["whenUnsatisfiable"])
        if pair in pairs:
            found.append(
                "%s repeats topologyKey %s with whenUnsatisfiable %s, which %s or an earlier entry "
                "already sets: the API server would refuse the pods"
                % (where, pair[0], pair[1], var("spread_across_nodes"))
            )
        pairs.add(pair)
    asked = [
        key
        for key, value in (
            ("node_affinity", bool(s.get("node_affinity"))),
            ("spread_across_nodes", _spreads(s)),
            ("topology_spread_constraints", bool(constraints)),
        )
        if value
    ]
    launcher = s.get("launcher")
    if launcher not in pod_spec_launchers:
        found += [
            "%s: the %s launcher renders no pod spec to carry it; place its pods with its own means "
            "(Run:ai node pools)" % (var(key), launcher)
            for key in asked
        ]
    elif runtime_overrides_only:
        found += [
            "%s: a TrainJob's overrides of an existing runtime (%s) cannot carry topology spread "
            "constraints; put them in that runtime, or leave %s empty"
            % (var(key), var("trainjob_runtime"), var("trainjob_runtime"))
            for key in asked
            if key != "node_affinity"
        ]
    return found


def gang_problems(s, var):
    """Kueue's LocalQueue and the PyTorchJob's schedulingPolicy."""
    found = []
    launcher = s.get("launcher")
    queue = s.get("kueue_local_queue")
    if queue not in (None, ""):
        problem = dns_subdomain_problem(queue) or label_value_problem(queue)
        if problem:
            found.append(
                "%s must name a LocalQueue (a label value: a DNS-1123 name of at most 63 characters), %s"
                % (var("kueue_local_queue"), problem)
            )
        elif launcher not in KUEUE_LAUNCHERS:
            found.append(
                "%s: Kueue manages the %s launchers' workloads, not the %s launcher's"
                % (var("kueue_local_queue"), ", ".join(KUEUE_LAUNCHERS), launcher)
            )
    found += _boolean_problem(s, var, "pytorchjob_gang")
    gang = _bool(s.get("pytorchjob_gang"))
    gang_queue = s.get("pytorchjob_gang_queue")
    if gang_queue not in (None, "") and dns_subdomain_problem(gang_queue):
        found.append(
            "%s must name a gang scheduler's queue or be empty: %s"
            % (var("pytorchjob_gang_queue"), dns_subdomain_problem(gang_queue))
        )
    timeout = s.get("pytorchjob_gang_timeout_s")
    if _int_between(timeout if timeout is not None else 0, 0) is None:
        found.append(
            "%s must be an integer of at least 0 (0 leaves it to the scheduler), got %r"
            % (var("pytorchjob_gang_timeout_s"), timeout)
        )
    if gang and launcher != "pytorchjob":
        found.append(
            "%s: the schedulingPolicy is the Training Operator's, for the pytorchjob launcher, not %s%s"
            % (
                var("pytorchjob_gang"),
                launcher,
                "; use %s for Kueue" % var("kueue_local_queue") if launcher in KUEUE_LAUNCHERS else "",
            )
        )
    if not gang:
        for key in ("pytorchjob_gang_queue", "pytorchjob_gang_timeout_s"):
            if s.get(key) not in (None, "", 0, "0"):
                found.append(
                    "%s is set but %s is false: set it to gang-schedule the PyTorchJob"
                    % (var(key), var("pytorchjob_gang"))
                )
    return found

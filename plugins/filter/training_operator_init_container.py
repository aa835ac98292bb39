# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: training_operator_init_container
short_description: Give the Training Operator v1 an init container template with requests equal to limits
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - With a Master, the Training Operator v1 adds an init container to every Worker of a PyTorchJob. Upstream's
    asks for less than its limits, so the Workers are Burstable, and a namespace whose LimitRange sets
    C(maxLimitRequestRatio) 1 (the gpuops.training.training_namespace role's Guaranteed sizing) rejects them.
  - Returns the operator's objects with a ConfigMap holding the operator's init container template
    (C(/etc/config/initContainer.yaml), the operator's default template file) with O(cpu) and O(memory) as both
    requests and limits, mounted into the operator's Deployment, whose pod template gets an annotation with
    the template's digest so that a changed template restarts the operator.
  - The image, the tries and the Master's address stay the operator's own placeholders.
  - Fails naming the argument when O(cpu) or O(memory) is not a Kubernetes quantity, and when the objects hold
    neither a Deployment with a container named C(training-operator) nor a single Deployment with a single
    container, or when that container already mounts C(/etc/config).
  - The same plugin file holds C(training_operator_init_container_problems), which takes a dict of C(cpu) and
    C(memory) and the name of the variable that holds it, and returns a message for each bad value naming
    that variable (empty when valid), for an C(assert) before any API call.
  - The objects may be given as their JSON text (what C(gpuops.training.k8s_manifest_json) returns, the
    form the role keeps the manifests in, as a list of nested objects costs ansible-core 2.19 seconds at
    each task) - they are then returned as JSON text too.
options:
  _input:
    description: The operator's objects (the v1 manifests as dicts), or their JSON text.
    type: raw
    required: true
  cpu:
    description: The init container's CPU, requested and limited.
    type: raw
    default: 100m
  memory:
    description: The init container's memory, requested and limited.
    type: raw
    default: 20Mi
"""

EXAMPLES = r"""
- name: Install the operator with a Guaranteed init container
  kubernetes.core.k8s:
    state: present
    apply: true
    server_side_apply: {field_manager: gpuops-training}
    definition: "{{ operator_objects | gpuops.training.training_operator_init_container(cpu='100m', memory='20Mi') }}"
"""

RETURN = r"""
_value:
  description: The objects, the ConfigMap placed before the Deployment; their JSON text when they were given as text.
  type: raw
"""

from ansible.errors import AnsibleFilterError
from ansible.release import __version__ as ansible_core_version

from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import (
    as_objects,
    same_form,
)
from ansible_collections.gpuops.training.plugins.module_utils.operator_init_container import (
    with_init_container_template,
)
from ansible_collections.gpuops.training.plugins.module_utils.quantities import QuantityError, parse_quantity

DEFAULTS = {"cpu": "100m", "memory": "20Mi"}

# Before ansible-core 2.19 a variable's value is templated again when it is used, so the Go
# template's {{.MasterAddr}} would be read as Jinja; from 2.19 a filter's result is never
# templated again.
if tuple(int(part) for part in ansible_core_version.split(".")[:2]) < (2, 19):  # pragma: no cover
    from ansible.utils.unsafe_proxy import wrap_var
else:
    wrap_var = None


def resource_problems(resources, variable="training_operator_init_container"):
    """Messages for each of cpu and memory that is missing, not a quantity or not above 0,
    naming ``<variable>.<key>``; empty when both hold."""
    problems = []
    resources = resources if isinstance(resources, dict) else {}
    for name in ("cpu", "memory"):
        what = "%s.%s" % (variable, name)
        if name not in resources:
            problems.append("%s is required (a Kubernetes quantity such as %s)" % (what, DEFAULTS[name]))
            continue
        try:
            if parse_quantity(resources[name], what) <= 0:
                problems.append("%s must be more than 0, got %r" % (what, resources[name]))
        except QuantityError as error:
            problems.append(str(error))
    unknown = sorted(set(resources) - set(DEFAULTS))
    if unknown:
        problems.append("%s takes cpu and memory only, got %s" % (variable, ", ".join(unknown)))
    return problems


def training_operator_init_container(objects, cpu=DEFAULTS["cpu"], memory=DEFAULTS["memory"]):
    problems = resource_problems({"cpu": cpu, "memory": memory})
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    try:
        result = same_form(
            objects, with_init_container_template(as_objects(objects, "the objects"), str(cpu), str(memory))
        )
    except ValueError as error:  # ManifestError included
        raise AnsibleFilterError("training_operator_init_container: %s" % error) from error
    return wrap_var(result) if wrap_var else result


class FilterModule:
    def filters(self):
        return {
            "training_operator_init_container": training_operator_init_container,
            "training_operator_init_container_problems": resource_problems,
        }

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: training_namespace_objects
short_description: Build the objects of a training namespace sized for Guaranteed QoS
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Builds, in the order they are applied, the Namespace (labels, optional Pod Security labels), a
    PriorityClass, the trainer's ServiceAccount (with its image pull Secrets, by name) with a
    least-privilege Role and RoleBinding (get, list and watch on pods, pods/log, services and configmaps
    of its namespace; nothing on Secrets), the
    dataset and checkpoint PersistentVolumeClaims, a LimitRange whose container defaults have requests
    equal to limits (and, for Guaranteed QoS, C(maxLimitRequestRatio) 1 so no container can differ) and
    a ResourceQuota with equal requests and limits for CPU and memory, GPUs and RDMA resources.
  - The input is a dict of the gpuops.training.training_namespace role's variables without their
    C(training_namespace_) prefix; the role's README lists them.
  - Fails with every problem when the settings are not valid. The same plugin file holds
    C(training_namespace_problems), which returns those problems as a list of messages naming the role
    variable and what was expected (empty when valid), for an C(assert) before any API call.
  - The same plugin file holds C(training_namespace_scc_objects), which builds what OpenShift needs
    besides (the role applies them when the cluster serves C(security.openshift.io)) - the trainer's
    SecurityContextConstraints (IPC_LOCK as the only capability it may add, every other one dropped, no
    privileged container or privilege escalation, no host namespaces, ports or hostPath volumes, the uid
    from a range, the namespace's SELinux level, the runtime's default seccomp profile), and a Role with
    the verb C(use) on that SCC alone, bound to the trainer ServiceAccount alone.
  - "The same plugin file holds C(training_namespace_pull_secrets), which takes the objects and the trainer
    ServiceAccount as the server holds it (the C(resources) of a M(kubernetes.core.k8s_info) read, empty
    when there is none) and the role's field manager, and gives the ServiceAccount the image pull Secrets
    to apply: the wanted ones, then every entry someone else added (OpenShift's ServiceAccount controller
    appends its own C(<account>-dockercfg-<5 characters>) entry), without the collection's earlier
    entries it no longer wants. The collection records its own entries in the annotation
    C(gpuops.training/image-pull-secrets): C(imagePullSecrets) is an atomic list, one owner for all its
    items, so ownership cannot tell them apart. When the list must change while another field manager
    owns it, the ServiceAccount carries the C(resourceVersion) it was read at, and is to be applied alone
    with C(force_conflicts) (refused if it changed since)."
options:
  _input:
    description: The settings, keys as the role's variables without C(training_namespace_).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Stop before any API call when a setting is wrong
  ansible.builtin.assert:
    that: settings | gpuops.training.training_namespace_problems | length == 0
    fail_msg: "{{ settings | gpuops.training.training_namespace_problems | join('\n') }}"

- name: Apply the objects
  kubernetes.core.k8s:
    state: present
    apply: true
    server_side_apply: {field_manager: gpuops-training}
    definition: "{{ item }}"
  loop: "{{ settings | gpuops.training.training_namespace_objects }}"
"""

RETURN = r"""
_value:
  description: The objects as dicts, ready for M(kubernetes.core.k8s), in apply order.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.training_namespace import (
    namespace_objects,
    namespace_problems,
    scc_objects,
    with_account_pull_secrets,
)


def training_namespace_objects(settings):
    problems = namespace_problems(settings)
    if problems:
        raise AnsibleFilterError("\n".join(problems))
    return namespace_objects(settings)


def training_namespace_scc_objects(settings):
    problems = namespace_problems(settings)
    if problems:
        raise AnsibleFilterError("\n".join(problems))
    return scc_objects(settings)


def training_namespace_pull_secrets(objects, accounts, field_manager):
    """``accounts``: the resources of a k8s_info read of the ServiceAccount (a list, at most one)."""
    if isinstance(accounts, dict):
        accounts = [accounts]
    if not isinstance(objects, list) or not isinstance(accounts, list) or len(accounts) > 1:
        raise AnsibleFilterError(
            "training_namespace_pull_secrets takes the objects (a list) and the ServiceAccount read"
            " (a list of at most one), got %s and %r" % (type(objects).__name__, accounts)
        )
    if not isinstance(field_manager, str) or not field_manager:
        raise AnsibleFilterError(
            "training_namespace_pull_secrets needs the field manager, got %r" % (field_manager,)
        )
    try:
        return with_account_pull_secrets(objects, accounts[0] if accounts else None, field_manager)
    except ValueError as error:
        raise AnsibleFilterError("training_namespace_pull_secrets: %s" % error) from None


class FilterModule:
    def filters(self):
        return {
            "training_namespace_objects": training_namespace_objects,
            "training_namespace_problems": namespace_problems,
            "training_namespace_scc_objects": training_namespace_scc_objects,
            "training_namespace_pull_secrets": training_namespace_pull_secrets,
        }

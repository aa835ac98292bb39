# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: k8s_manifest_problems
short_description: Check a list of Kubernetes objects (install manifests) before applying them
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Returns every problem of the objects as a list of messages, empty when they can be
    applied - an object that is not a mapping, lacks C(apiVersion), C(kind) or
    C(metadata.name), a Deployment without C(metadata.namespace), an object given twice, or
    a required object that is missing.
  - Empty YAML documents are ignored and C(List) objects unpacked, as C(kubectl apply) does.
  - 'The same plugin file holds the helpers the operator roles use: C(k8s_apply_order)
    (namespaces and CRDs first, admission webhooks last), C(k8s_with_labels) (labels added
    to every object, keeping the ones it has), C(k8s_delete_order) (the reverse,
    without the kinds in O(keep_kinds)), C(k8s_names) (names of one kind, C(namespace/name) for
    namespaced ones), C(k8s_split_by_namespaces) (the objects a server-side dry run can take
    now, and those in namespaces that do not exist yet), C(k8s_rejected) (one line per object
    whose M(kubernetes.core.k8s) result carries an error, with the API server''s message),
    C(k8s_changed), C(k8s_object_ref) and C(k8s_api_error_message) (the API server''s message
    from a M(kubernetes.core.k8s) error).'
options:
  _input:
    description: The objects, for example C(lookup('file', path) | from_yaml_all).
    type: list
    elements: raw
    required: true
  required:
    description: Objects that must be among them, as C(Kind/name).
    type: list
    elements: str
    default: []
  what:
    description: How the messages name the objects as a whole.
    type: str
    default: the manifests
"""

EXAMPLES = r"""
- name: Stop before any API call when the manifests are not what they should be
  ansible.builtin.assert:
    that: my_objects | gpuops.training.k8s_manifest_problems(['CustomResourceDefinition/pytorchjobs.kubeflow.org']) | length == 0
    fail_msg: "{{ my_objects | gpuops.training.k8s_manifest_problems(['CustomResourceDefinition/pytorchjobs.kubeflow.org']) | join('; ') }}"

- name: Apply them in dependency order
  kubernetes.core.k8s:
    definition: "{{ my_objects | gpuops.training.k8s_apply_order }}"
    apply: true
    server_side_apply: {field_manager: gpuops-training}
"""

RETURN = r"""
_value:
  description: One message per problem; empty when there is none.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import (
    ManifestError,
    api_error_message,
    apply_order,
    changed,
    delete_order,
    manifest_problems,
    names,
    object_ref,
    rejected,
    split_by_namespaces,
    with_labels,
)


def _checked(name, function, *args):
    """Call a helper; a wrong argument fails naming the filter and the argument."""
    try:
        return function(*args)
    except ManifestError as error:
        raise AnsibleFilterError("%s: %s" % (name, error)) from error


def k8s_manifest_problems(documents, required=(), what="the manifests"):
    return manifest_problems(documents, required or (), str(what))


def k8s_apply_order(documents):
    return _checked("k8s_apply_order", apply_order, documents)


def k8s_with_labels(documents, labels):
    return _checked("k8s_with_labels", with_labels, documents, labels or {})


def k8s_delete_order(documents, keep_kinds=()):
    return _checked("k8s_delete_order", delete_order, documents, keep_kinds or ())


def k8s_names(documents, kind):
    return _checked("k8s_names", names, documents, kind)


def k8s_split_by_namespaces(documents, existing_namespaces):
    ready, deferred = _checked("k8s_split_by_namespaces", split_by_namespaces, documents, existing_namespaces)
    return {"ready": ready, "deferred": deferred}


def k8s_rejected(documents, results):
    return _checked("k8s_rejected", rejected, documents, results)


def k8s_changed(documents, results):
    return _checked("k8s_changed", changed, documents, results)


def k8s_object_ref(document):
    return object_ref(document)


def k8s_api_error_message(text):
    return api_error_message(text)


class FilterModule:
    def filters(self):
        return {
            "k8s_manifest_problems": k8s_manifest_problems,
            "k8s_apply_order": k8s_apply_order,
            "k8s_delete_order": k8s_delete_order,
            "k8s_with_labels": k8s_with_labels,
            "k8s_names": k8s_names,
            "k8s_split_by_namespaces": k8s_split_by_namespaces,
            "k8s_rejected": k8s_rejected,
            "k8s_changed": k8s_changed,
            "k8s_object_ref": k8s_object_ref,
            "k8s_api_error_message": k8s_api_error_message,
        }

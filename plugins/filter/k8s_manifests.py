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
  - 'The same plugin file holds the helpers the operator roles use: C(k8s_manifest_json)
    (the objects of a multi-document YAML text, parsed with libyaml, sorted for applying and
    labelled, as one JSON text; its argument is the labels), C(k8s_objects) (the objects as a
    list, from their JSON text or a list; empty documents dropped, C(List) objects unpacked),
    C(k8s_apply_order)
    (namespaces and CRDs first, admission webhooks last), C(k8s_with_labels) (labels added
    to every object, keeping the ones it has), C(k8s_delete_order) (the reverse,
    without the kinds in O(keep_kinds)), C(k8s_names) (names of one kind, C(namespace/name) for
    namespaced ones), C(k8s_split_by_namespaces) (the objects a server-side dry run can take
    now, and those in namespaces that do not exist yet), C(k8s_rejected) (one line per object
    whose M(kubernetes.core.k8s) result carries an error, with the API server''s message),
    C(k8s_changed), C(k8s_object_ref), C(k8s_object_refs) (C(Kind namespace/name) of each object)
    and C(k8s_api_error_message) (the API server''s message from a M(kubernetes.core.k8s) error).'
  - 'Every filter that takes the objects takes them as a list or as their JSON text: what
    C(k8s_manifest_json) returns (a C(---) line before each object''s JSON on a line of its own,
    a multi-document YAML stream as well), or a JSON list. C(k8s_apply_order), C(k8s_with_labels) and
    C(k8s_split_by_namespaces) return them in the form they were given: keep big manifests as
    JSON text from the moment they are read, since ansible-core 2.19 templates and copies a
    list of nested objects at every task that uses it (seconds for megabytes of CRDs) while a
    string passes as it is. M(kubernetes.core.k8s) takes the text as its C(definition) (it
    reads it with PyYAML''s pure-Python parser: seconds for megabytes), or the list from
    C(k8s_objects) (templated and copied once, for that task only).'
options:
  _input:
    description:
      - The objects, for example C(lookup('file', path) | from_yaml_all), or their JSON text
        (C(lookup('file', path) | gpuops.training.k8s_manifest_json)).
      - A string that is neither fails naming C(documents).
    type: raw
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

- name: Read big manifests once as JSON text, in the order to apply them and labelled
  ansible.builtin.set_fact:
    my_objects_json: "{{ lookup('ansible.builtin.file', '/srv/operator.yaml') | gpuops.training.k8s_manifest_json({'app.kubernetes.io/managed-by': 'me'}) }}"

- name: Apply them, as a list for this task only
  kubernetes.core.k8s:
    definition: "{{ my_objects_json | gpuops.training.k8s_objects }}"
    apply: true
    server_side_apply: {field_manager: gpuops-training}
  when: my_objects_json | gpuops.training.k8s_object_refs | length > 0
"""

RETURN = r"""
_value:
  description: One message per problem; empty when there is none.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.release import __version__ as ansible_core_version

from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import (
    ManifestError,
    api_error_message,
    apply_order,
    changed,
    delete_order,
    manifest_json,
    manifest_problems,
    names,
    object_ref,
    object_refs,
    objects,
    rejected,
    same_form,
    split_by_namespaces,
    with_labels,
)

# Before ansible-core 2.19 a variable's value is templated again when it is used, so a {{ in
# the manifests (a Go template in a ConfigMap) would be read as Jinja; from 2.19 a filter's
# result is never templated again.
if tuple(int(part) for part in ansible_core_version.split(".")[:2]) < (2, 19):  # pragma: no cover
    from ansible.utils.unsafe_proxy import wrap_var
else:
    wrap_var = None


def _checked(name, function, *args):
    """Call a helper; a wrong argument fails naming the filter and the argument."""
    try:
        return function(*args)
    except ManifestError as error:
        raise AnsibleFilterError("%s: %s" % (name, error)) from error


def _same_form(name, documents, items):
    """The objects in the form they were given (JSON text for text)."""
    result = _checked(name, same_form, documents, items)
    return wrap_var(result) if wrap_var and isinstance(result, str) else result


def k8s_manifest_problems(documents, required=(), what="the manifests"):
    return manifest_problems(documents, required or (), str(what))


def k8s_manifest_json(text, labels=None):
    result = _checked("k8s_manifest_json", manifest_json, text, labels or {})
    return wrap_var(result) if wrap_var else result


def k8s_objects(documents):
    result = _checked("k8s_objects", objects, documents)
    return wrap_var(result) if wrap_var else result


def k8s_apply_order(documents):
    return _same_form("k8s_apply_order", documents, _checked("k8s_apply_order", apply_order, documents))


def k8s_with_labels(documents, labels):
    labelled = _checked("k8s_with_labels", with_labels, documents, labels or {})
    return _same_form("k8s_with_labels", documents, labelled)


def k8s_delete_order(documents, keep_kinds=()):
    return _checked("k8s_delete_order", delete_order, documents, keep_kinds or ())


def k8s_names(documents, kind):
    return _checked("k8s_names", names, documents, kind)


def k8s_split_by_namespaces(documents, existing_namespaces):
    ready, deferred = _checked("k8s_split_by_namespaces", split_by_namespaces, documents, existing_namespaces)
    return {
        "ready": _same_form("k8s_split_by_namespaces", documents, ready),
        "deferred": _same_form("k8s_split_by_namespaces", documents, deferred),
    }


def k8s_rejected(documents, results):
    return _checked("k8s_rejected", rejected, documents, results)


def k8s_changed(documents, results):
    return _checked("k8s_changed", changed, documents, results)


def k8s_object_ref(document):
    return object_ref(document)


def k8s_object_refs(documents):
    return _checked("k8s_object_refs", object_refs, documents)


def k8s_api_error_message(text):
    return api_error_message(text)


class FilterModule:
    def filters(self):
        return {
            "k8s_manifest_problems": k8s_manifest_problems,
            "k8s_manifest_json": k8s_manifest_json,
            "k8s_objects": k8s_objects,
            "k8s_apply_order": k8s_apply_order,
            "k8s_delete_order": k8s_delete_order,
            "k8s_with_labels": k8s_with_labels,
            "k8s_names": k8s_names,
            "k8s_split_by_namespaces": k8s_split_by_namespaces,
            "k8s_rejected": k8s_rejected,
            "k8s_changed": k8s_changed,
            "k8s_object_ref": k8s_object_ref,
            "k8s_object_refs": k8s_object_refs,
            "k8s_api_error_message": k8s_api_error_message,
        }

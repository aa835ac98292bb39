"""Install manifests: checks before any API call, apply/delete order, rejection messages."""

from __future__ import annotations

import datetime
import json
import math

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import (
    ManifestError,
    api_error_message,
    apply_order,
    apply_report,
    as_objects,
    call_results,
    changed,
    delete_order,
    manifest_json,
    manifest_problems,
    names,
    object_ref,
    object_refs,
    objects,
    objects_json,
    rejected,
    same_form,
    split_by_namespaces,
    with_labels,
)

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "training-operator", "namespace": "kubeflow"},
}
WEBHOOK = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "validator.training-operator.kubeflow.org"},
}
ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "training-operator"},
}
CUSTOM = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "smoke", "namespace": "kubeflow"},
}


def test_objects_drop_empty_documents_and_unpack_lists():
    assert objects(
        [None, NAMESPACE, {"apiVersion": "v1", "kind": "List", "items": [CRD, DEPLOYMENT]}, None]
    ) == [
        NAMESPACE,
        CRD,
        DEPLOYMENT,
    ]


def test_valid_manifests_have_no_problems():
    assert (
        manifest_problems([NAMESPACE, CRD, DEPLOYMENT], ["CustomResourceDefinition/pytorchjobs.kubeflow.org"])
        == []
    )


def test_every_problem_is_named():
    documents = [
        "just a string",
        {"kind": "Service", "metadata": {"name": "x"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "no-namespace"}},
        DEPLOYMENT,
        dict(DEPLOYMENT),
    ]
    assert manifest_problems(documents, ["CustomResourceDefinition/trainjobs.trainer.kubeflow.org"]) == [
        "object 1 is not a mapping but a string",
        "object 2 (Service x) lacks apiVersion",
        "object 3 (Deployment no-namespace) has no metadata.namespace",
        "object 5 (Deployment kubeflow/training-operator) repeats object 4",
        "the manifests have no CustomResourceDefinition trainjobs.trainer.kubeflow.org",
    ]


def test_empty_manifests():
    assert manifest_problems([None], what="kustomization x") == ["kustomization x hold no Kubernetes objects"]


def test_same_name_in_other_groups_or_namespaces_is_not_a_repeat():
    other_namespace = {**DEPLOYMENT, "metadata": {"name": "training-operator", "namespace": "other"}}
    other_group = {**ROLE, "apiVersion": "example.com/v1"}
    assert manifest_problems([DEPLOYMENT, other_namespace, ROLE, other_group]) == []


def test_apply_order_puts_namespaces_and_crds_first_and_webhooks_last():
    ordered = apply_order([WEBHOOK, CUSTOM, DEPLOYMENT, ROLE, CRD, NAMESPACE])
    assert [document["kind"] for document in ordered] == [
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "Deployment",
        "PyTorchJob",
        "ValidatingWebhookConfiguration",
    ]


def test_delete_order_is_the_reverse_without_kept_kinds_and_only_identities():
    doomed = delete_order(
        [NAMESPACE, CRD, {**DEPLOYMENT, "spec": {"replicas": 1}}, WEBHOOK], ["CustomResourceDefinition"]
    )
    assert doomed == [
        {
            "apiVersion": WEBHOOK["apiVersion"],
            "kind": WEBHOOK["kind"],
            "metadata": {"name": WEBHOOK["metadata"]["name"]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "training-operator", "namespace": "kubeflow"},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}},
    ]


def test_names_of_a_kind():
    assert names([NAMESPACE, CRD, DEPLOYMENT], "Deployment") == ["kubeflow/training-operator"]
    assert names([NAMESPACE, CRD, DEPLOYMENT], "CustomResourceDefinition") == ["pytorchjobs.kubeflow.org"]


def test_split_by_namespaces_defers_objects_in_missing_namespaces():
    ready, deferred = split_by_namespaces([NAMESPACE, CRD, DEPLOYMENT, CUSTOM], ["default"])
    assert ready == [NAMESPACE, CRD]
    assert deferred == [DEPLOYMENT, CUSTOM]
    ready, deferred = split_by_namespaces([NAMESPACE, CRD, DEPLOYMENT], ["default", "kubeflow"])
    assert deferred == []


STATUS = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'Deployment.apps "training-operator" is invalid: '
    "spec.template.spec.containers[0].image: Required value",
    "reason": "Invalid",
    "code": 422,
}


def test_api_error_message_reads_the_status_out_of_kubernetes_core_errors():
    body = json.dumps(STATUS).encode()
    assert api_error_message("Failed to apply object: %s" % body) == STATUS["message"]
    assert api_error_message("Failed to apply object: %s" % json.dumps(STATUS)) == STATUS["message"]
    assert api_error_message("Failed to find exact match for kubeflow.org/v1.PyTorchJob") == (
        "Failed to find exact match for kubeflow.org/v1.PyTorchJob"
    )
    assert api_error_message("Failed: b'not json'") == "Failed: b'not json'"
    # What the roles' rescue tasks read (a Status followed by more text): the server's message.
    followed = "Failed to apply object: %s (conflict)" % json.dumps(STATUS)
    assert api_error_message(followed) == STATUS["message"]


def test_rejected_and_changed_zip_results_with_objects():
    results = [
        {"changed": True, "result": NAMESPACE},
        {"changed": False, "result": CRD},
        {
            "changed": False,
            "result": {},
            "error": {"msg": "Failed to apply object: %s" % json.dumps(STATUS).encode()},
        },
    ]
    assert rejected([NAMESPACE, CRD, DEPLOYMENT], results) == [
        "Deployment kubeflow/training-operator: " + STATUS["message"]
    ]
    assert changed([NAMESPACE, CRD, DEPLOYMENT], results) == ["Namespace kubeflow"]


def test_object_ref():
    assert object_ref(DEPLOYMENT) == "Deployment kubeflow/training-operator"
    assert object_ref(CRD) == "CustomResourceDefinition pytorchjobs.kubeflow.org"
    assert object_ref(3) == "(not an object)"
    assert object_ref({}) == "(no kind) (no name)"


def test_with_labels_adds_labels_keeps_existing_ones_and_copies():
    labelled_deployment = {
        **DEPLOYMENT,
        "metadata": {**DEPLOYMENT["metadata"], "labels": {"app": "x", "team": "ml"}},
    }
    labelled = with_labels(
        [NAMESPACE, labelled_deployment, None, "junk"], {"team": "infra", "owner": "gpuops"}
    )
    assert labelled[0]["metadata"]["labels"] == {"team": "infra", "owner": "gpuops"}
    assert labelled[1]["metadata"]["labels"] == {"team": "ml", "owner": "gpuops", "app": "x"}
    assert labelled[2] == "junk"
    assert "labels" not in NAMESPACE["metadata"]
    assert with_labels([NAMESPACE], {}) == [NAMESPACE]


def test_call_results_reads_one_or_many_objects_and_a_skipped_call():
    one = {"changed": True, "result": NAMESPACE}
    assert call_results([NAMESPACE], one) == [one]
    many = {"changed": True, "result": {"results": [one, {"changed": False}]}}
    assert call_results([NAMESPACE, CRD], many) == [one, {"changed": False}]
    assert call_results([NAMESPACE, CRD], {"changed": False, "skipped": True}) == []
    assert call_results([NAMESPACE], None) == []
    with pytest.raises(ManifestError, match="registered result of kubernetes.core.k8s, got a list"):
        call_results([NAMESPACE], [one])
    with pytest.raises(ManifestError, match="result.results"):
        call_results([NAMESPACE, CRD], one)


def test_apply_report_names_every_rejected_object_with_the_servers_reason():
    error = {"msg": "Failed to apply object: %s" % json.dumps(STATUS).encode()}
    registered = {
        "changed": True,
        "result": {
            "results": [
                {"changed": True, "result": NAMESPACE},
                {"changed": False, "result": {}, "error": error},
                {
                    "changed": False,
                    "result": {},
                    "error": {"msg": 'Failed: {"kind": "Status", "message": "no"}'},
                },
            ]
        },
    }
    report = apply_report([NAMESPACE, CRD, DEPLOYMENT], registered, what="the operator")
    assert report["failed"] is True
    assert report["msg"].split("\n- ") == [
        "The API server rejected 2 of the 3 objects of the operator:",
        "CustomResourceDefinition pytorchjobs.kubeflow.org: " + STATUS["message"],
        "Deployment kubeflow/training-operator: no",
    ]
    assert report["changed_objects"] == ["Namespace kubeflow"]


def test_apply_report_of_calls_that_never_reached_the_server_does_not_say_it_rejected_them():
    refused = "Failed to retrieve requested object: HTTPSConnectionPool(host='127.0.0.1'): Connection refused"
    registered = {
        "changed": True,
        "result": {"results": [{"changed": True}, {"changed": False, "error": {"msg": refused}}]},
    }
    report = apply_report([NAMESPACE, DEPLOYMENT], registered, what="the operator")
    assert report["msg"] == (
        "1 of the 2 objects of the operator failed:\n- Deployment kubeflow/training-operator: " + refused
    )


def test_apply_report_lists_changes_with_one_diff_per_object_and_the_deferred_objects():
    diff = {"before": {"spec": {"hard": {"cpu": "64"}}}, "after": {"spec": {"hard": {"cpu": "32"}}}}
    registered = {
        "changed": True,
        "result": {"results": [{"changed": False, "diff": {}}, {"changed": True, "diff": diff}]},
    }
    report = apply_report([NAMESPACE, CRD], registered, [DEPLOYMENT], "the operator", check_mode=True)
    assert "failed" not in report and report["changed"] is True
    assert report["changed_objects"] == ["CustomResourceDefinition pytorchjobs.kubeflow.org"]
    assert report["deferred_objects"] == ["Deployment kubeflow/training-operator"]
    assert report["diff"] == [
        {
            "before_header": "CustomResourceDefinition pytorchjobs.kubeflow.org",
            "after_header": "CustomResourceDefinition pytorchjobs.kubeflow.org",
            **diff,
        }
    ]
    assert report["diff"][0]["before"] is not diff["before"]  # a copy: the callback rewrites it
    assert report["msg"] == (
        "1 of the 2 objects of the operator would change: CustomResourceDefinition pytorchjobs.kubeflow.org;"
        " check mode would also create 1 in namespaces it would create: Deployment kubeflow/training-operator"
    )


def test_apply_report_of_a_no_op_changes_nothing():
    registered = {"changed": False, "result": {"results": [{"changed": False}, {"changed": False}]}}
    report = apply_report([NAMESPACE, CRD], registered, what="the operator")
    assert report == {
        "changed": False,
        "changed_objects": [],
        "deferred_objects": [],
        "rejected_objects": [],
        "diff": [],
        "msg": "0 of the 2 objects of the operator changed",
    }


# --------------------------------------------------------------------------------------
# The objects as one JSON text (manifest_json): every helper takes the text or the list.
# --------------------------------------------------------------------------------------

MANIFEST_YAML = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validator.training-operator.kubeflow.org}
---
# an empty document
---
apiVersion: v1
kind: List
items:
  - apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: training-operator
      namespace: kubeflow
      labels: {app.kubernetes.io/managed-by: upstream}
  - {apiVersion: v1, kind: Namespace, metadata: {name: kubeflow}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pytorchjobs.kubeflow.org}
spec: {description: "{{.MasterAddr}} stays as it is", enabled: yes, maximum: 1.0e+20, ratio: 0.5}
"""
LABELS = {"app.kubernetes.io/managed-by": "gpuops-training"}


def test_manifest_json_reads_orders_and_labels_the_objects_as_the_list_helpers_do():
    text = manifest_json(MANIFEST_YAML, LABELS)
    assert isinstance(text, str)
    expected = with_labels(apply_order(list(yaml.safe_load_all(MANIFEST_YAML))), LABELS)
    assert as_objects(text) == expected
    assert list(yaml.safe_load_all(text)) == expected  # as kubernetes.core.k8s reads a definition
    assert [item["kind"] for item in expected] == [
        "Namespace",
        "CustomResourceDefinition",
        "Deployment",
        "ValidatingWebhookConfiguration",
    ]
    # A label the object has keeps its value; YAML 1.1's yes is true, 1.0e+20 a float.
    assert expected[2]["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "upstream"}
    assert expected[1]["spec"]["enabled"] is True and expected[1]["spec"]["maximum"] == 1e20
    assert manifest_json("", LABELS) == "" and as_objects("") == []


def test_the_json_text_reads_back_the_same_through_yaml_as_kubernetes_core_reads_a_definition():
    items = [
        {
            "kind": "ConfigMap",
            "data": {"line": "a\u2028b\x85c\x7fd\ufeffe", "emoji": "\U0001f680", "go": "{{.MaxTries}}"},
            "numbers": [1e20, -2.5e-7, 1e-05, 0.5, 3, -0.0, 10**30, True, None],
            "when": datetime.date(2024, 1, 2),
            "1": "a key that was a number",
        }
    ]
    text = objects_json(items)
    back = list(yaml.safe_load_all(text))  # pure-Python PyYAML, as kubernetes.core.k8s reads it
    expected = dict(items[0], when="2024-01-02")
    assert back == [expected]
    assert as_objects(text) == [expected]
    special = objects_json([{"n": [math.inf, -math.inf, math.nan]}])
    read = list(yaml.safe_load_all(special))[0]["n"]
    assert read[0] == math.inf and read[1] == -math.inf and math.isnan(read[2])


def test_as_objects_takes_a_list_or_its_json_text_and_names_a_bad_string():
    assert as_objects([NAMESPACE]) == [NAMESPACE]
    assert as_objects(json.dumps([NAMESPACE, CRD])) == [NAMESPACE, CRD]
    assert as_objects("null") is None
    assert as_objects(None) is None and as_objects(7) == 7  # other types: the caller names them
    with pytest.raises(
        ManifestError,
        match="^documents must be a list of Kubernetes objects or their JSON text, got a string that is not",
    ):
        as_objects("kind: Namespace")
    with pytest.raises(ManifestError, match="^deferred must be .* got the JSON text of a mapping"):
        as_objects(json.dumps(NAMESPACE), "deferred")
    with pytest.raises(ManifestError, match="not JSON"):
        as_objects("[" * 100000)
    # The stream objects_json writes keeps a document that is a list (malformed manifests) apart.
    assert as_objects(objects_json([[1], NAMESPACE])) == [[1], NAMESPACE]
    with pytest.raises(
        ManifestError,
        match="^documents must be a list of Kubernetes objects or their JSON text, got a number",
    ):
        objects(7)
    with pytest.raises(ManifestError, match="^the manifests are not valid YAML"):
        manifest_json("a: [b\n")
    with pytest.raises(ManifestError, match="^the manifests must be YAML text, got a list"):
        manifest_json([NAMESPACE])
    with pytest.raises(ManifestError, match="^labels must be a mapping"):
        manifest_json("kind: Namespace", ["a"])
    with pytest.raises(ManifestError, match="^the objects cannot be written as JSON"):
        manifest_json("!!set {a: null}")


def test_every_helper_takes_the_json_text_like_the_list():
    listed = [WEBHOOK, CUSTOM, DEPLOYMENT, ROLE, CRD, NAMESPACE]
    text = json.dumps(listed)
    assert apply_order(text) == apply_order(listed)
    assert with_labels(text, LABELS) == with_labels(listed, LABELS)
    assert delete_order(text, ["CustomResourceDefinition"]) == delete_order(
        listed, ["CustomResourceDefinition"]
    )
    assert names(text, "Deployment") == ["kubeflow/training-operator"]
    assert split_by_namespaces(text, ["default"]) == split_by_namespaces(listed, ["default"])
    assert manifest_problems(text, ["CustomResourceDefinition/pytorchjobs.kubeflow.org"]) == []
    assert manifest_problems("{", what="the manifests")[0].startswith(
        "the manifests: documents must be a list of Kubernetes objects or their JSON text, got a string"
    )
    assert object_refs(text) == [object_ref(item) for item in listed]
    results = [{"changed": True}] + [{"changed": False}] * 5
    assert changed(text, results) == [
        "ValidatingWebhookConfiguration validator.training-operator.kubeflow.org"
    ]
    assert same_form(text, [NAMESPACE]) == objects_json([NAMESPACE]) and same_form(listed, [NAMESPACE]) == [
        NAMESPACE
    ]


def test_apply_report_takes_the_objects_and_the_deferred_ones_as_json_text():
    registered = {"changed": True, "result": {"results": [{"changed": True}, {"changed": False}]}}
    report = apply_report(
        json.dumps([NAMESPACE, CRD]), registered, json.dumps([DEPLOYMENT]), "the operator", check_mode=True
    )
    assert report["changed_objects"] == ["Namespace kubeflow"]
    assert report["deferred_objects"] == ["Deployment kubeflow/training-operator"]
    with pytest.raises(ManifestError, match="^deferred: documents must be"):
        apply_report("[]", {}, "not json")

"""The training namespace's objects and the checks that run before any API call."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.training_namespace import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.quantities import parse_quantity
from ansible_collections.gpuops.training.plugins.module_utils.training_namespace import (
    namespace_objects,
    namespace_problems,
    scc_objects,
)

DEFAULTS = (
    pathlib.Path(__file__).resolve().parents[4] / "roles" / "training_namespace" / "defaults" / "main.yml"
)
PREFIX = "training_namespace_"
# Variables of the role that are not settings of the objects.
NOT_SETTINGS = ("field_manager", "delete_timeout", "kubeconfig", "context")


def settings(**changes):
    defaults = yaml.safe_load(DEFAULTS.read_text())
    values = {key[len(PREFIX) :]: value for key, value in defaults.items()}
    for key in NOT_SETTINGS:
        values.pop(key)
    values.update(changes)
    return values


def by_kind(objects):
    return {item["kind"]: item for item in objects}


def test_the_defaults_are_valid_and_build_every_object_in_apply_order():
    assert namespace_problems(settings()) == []
    objects = namespace_objects(settings())
    assert [(item["kind"], item["metadata"]["name"]) for item in objects] == [
        ("Namespace", "training"),
        ("PriorityClass", "gpu-training"),
        ("ServiceAccount", "trainer"),
        ("Role", "trainer"),
        ("RoleBinding", "trainer"),
        ("PersistentVolumeClaim", "dataset"),
        ("PersistentVolumeClaim", "checkpoints"),
        ("LimitRange", "container-defaults"),
        ("ResourceQuota", "training-quota"),
        ("NetworkPolicy", "training-ranks"),
    ]
    for item in objects:
        assert item["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuops.training"
        if item["kind"] not in ("Namespace", "PriorityClass"):
            assert item["metadata"]["namespace"] == "training"


def test_the_trainer_role_reads_its_namespace_and_nothing_on_secrets():
    kinds = by_kind(namespace_objects(settings()))
    rules = kinds["Role"]["rules"]
    granted = {(resource, verb) for rule in rules for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == {
        (resource, verb)
        for resource in ("pods", "pods/log", "services", "configmaps")
        for verb in ("get", "list", "watch")
    }
    assert all(rule["apiGroups"] == [""] for rule in rules)
    assert kinds["RoleBinding"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "trainer",
    }
    assert kinds["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainer", "namespace": "training"}
    ]


def test_guaranteed_limit_range_and_quota_have_requests_equal_to_limits():
    kinds = by_kind(namespace_objects(settings()))
    (limit,) = kinds["LimitRange"]["spec"]["limits"]
    assert limit["type"] == "Container"
    assert limit["default"] == limit["defaultRequest"] == {"cpu": "8", "memory": "64Gi"}
    assert limit["maxLimitRequestRatio"] == {"cpu": "1", "memory": "1"}
    hard = kinds["ResourceQuota"]["spec"]["hard"]
    assert hard == {
        "requests.cpu": "192",
        "limits.cpu": "192",
        "requests.memory": "2Ti",
        "limits.memory": "2Ti",
        "requests.nvidia.com/gpu": "16",
        "requests.rdma/rdma_shared_device_a": "16",
        "pods": "64",
    }


def test_burstable_defaults_have_no_ratio_and_optional_maximums():
    objects = namespace_objects(
        settings(
            guaranteed=False,
            container_memory_request="48Gi",
            container_max_memory="256Gi",
            quota_pods=0,
            quota_storage="1Ti",
        )
    )
    kinds = by_kind(objects)
    (limit,) = kinds["LimitRange"]["spec"]["limits"]
    assert "maxLimitRequestRatio" not in limit
    assert limit["defaultRequest"]["memory"] == "48Gi"
    assert limit["max"] == {"memory": "256Gi"}
    assert "pods" not in kinds["ResourceQuota"]["spec"]["hard"]
    assert kinds["ResourceQuota"]["spec"]["hard"]["requests.storage"] == "1Ti"


def test_pod_security_labels_and_pvcs():
    objects = namespace_objects(
        settings(
            pod_security="baseline",
            labels={"team": "vision"},
            dataset_pvc_storage_class="cephfs",
            dataset_pvc_access_modes=["ReadOnlyMany"],
            checkpoint_pvc=False,
            priority_class="",
        )
    )
    kinds = [item["kind"] for item in objects]
    assert "PriorityClass" not in kinds
    assert kinds.count("PersistentVolumeClaim") == 1
    labels = objects[0]["metadata"]["labels"]
    assert labels["team"] == "vision"
    for mode in ("enforce", "audit", "warn"):
        assert labels["pod-security.kubernetes.io/%s" % mode] == "baseline"
        assert labels["pod-security.kubernetes.io/%s-version" % mode] == "latest"
    pvc = by_kind(objects)["PersistentVolumeClaim"]
    assert pvc["spec"] == {
        "accessModes": ["ReadOnlyMany"],
        "resources": {"requests": {"storage": "500Gi"}},
        "storageClassName": "cephfs",
    }


def test_an_empty_storage_class_leaves_the_field_to_the_cluster_default():
    pvc = by_kind(namespace_objects(settings()))["PersistentVolumeClaim"]
    assert "storageClassName" not in pvc["spec"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "Training_NS"}, "training_namespace_name must be a DNS-1123 label"),
        ({"name": "x" * 64}, "training_namespace_name must be at most 63 characters"),
        (
            {"labels": {"team": "not valid!"}},
            "training_namespace_labels: label team value must be at most 63",
        ),
        ({"pod_security": "strict"}, "training_namespace_pod_security must be one of"),
        ({"pod_security_version": "1.36"}, "training_namespace_pod_security_version must be 'latest'"),
        ({"dataset_pvc_size": "500GB"}, "training_namespace_dataset_pvc_size must be a Kubernetes quantity"),
        ({"dataset_pvc_access_modes": ["RWX"]}, "training_namespace_dataset_pvc_access_modes has 'RWX'"),
        (
            {"dataset_pvc_access_modes": []},
            "training_namespace_dataset_pvc_access_modes must be a non-empty list",
        ),
        ({"checkpoint_pvc_name": "dataset"}, "training_namespace_checkpoint_pvc_name names PVC 'dataset'"),
        ({"service_account": "Trainer"}, "training_namespace_service_account must be a DNS-1123 subdomain"),
        ({"priority_class": "system-gpu"}, "training_namespace_priority_class must not start with 'system-'"),
        (
            {"priority_class_value": 2000000000},
            "training_namespace_priority_class_value must be a whole number up to",
        ),
        (
            {"priority_class_preemption_policy": "Always"},
            "training_namespace_priority_class_preemption_policy",
        ),
        (
            {"container_cpu_request": "eight"},
            "training_namespace_container_cpu_request must be a Kubernetes quantity",
        ),
        ({"container_memory_limit": "0"}, "training_namespace_container_memory_limit must be above 0"),
        (
            {"container_memory_limit": "100m"},
            "training_namespace_container_memory_limit must be a whole number of bytes",
        ),
        (
            {"container_memory_limit": "32Gi", "guaranteed": False},
            r"training_namespace_container_memory_limit \(32Gi\) must be at least "
            r"training_namespace_container_memory_request \(64Gi\)",
        ),
        (
            {"container_cpu_limit": "16"},
            r"training_namespace_container_cpu_request \(8\) must equal "
            r"training_namespace_container_cpu_limit \(16\) when training_namespace_guaranteed is true",
        ),
        ({"container_max_cpu": "4"}, r"training_namespace_container_max_cpu \(4\) must be at least"),
        (
            {"quota_memory": "32Gi"},
            r"training_namespace_quota_memory \(32Gi\) must be at least "
            r"training_namespace_container_memory_limit",
        ),
        ({"quota_gpus": -1}, "training_namespace_quota_gpus must be at least 0"),
        ({"quota_gpus": "16"}, "training_namespace_quota_gpus must be a whole number"),
        ({"gpu_resource": "gpu"}, "training_namespace_gpu_resource must have a domain prefix"),
        ({"quota_extended_resources": {"rdma": 4}}, "training_namespace_quota_extended_resources key 'rdma'"),
        (
            {"quota_extended_resources": {"nvidia.com/gpu": 4}},
            "training_namespace_quota_extended_resources repeats 'nvidia.com/gpu'",
        ),
        ({"quota_extended_resources": {"rdma/hca": "many"}}, "rdma/hca must be a whole number"),
        ({"quota_storage": "100Gi"}, r"training_namespace_quota_storage \(100Gi\) must be at least the PVCs"),
        ({"guaranteed": "yes"}, "training_namespace_guaranteed must be true or false"),
        (
            {"role_extra_rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]},
            r"training_namespace_role_extra_rules\[0\] grants access to Secrets",
        ),
        (
            {"role_extra_rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}]},
            r"training_namespace_role_extra_rules\[0\] grants access to Secrets",
        ),
        (
            {"role_extra_rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]}]},
            r"training_namespace_role_extra_rules\[0\] grants verbs \['\*'\]",
        ),
        (
            {"role_extra_rules": [{"apiGroup": [""], "resources": ["pods"], "verbs": ["get"]}]},
            r"training_namespace_role_extra_rules\[0\] has unknown keys apiGroup",
        ),
        (
            {"image_pull_secrets": "regcred"},
            "training_namespace_image_pull_secrets must be a list of Secret names",
        ),
        (
            {"image_pull_secrets": ["regcred", "Reg_Cred"]},
            r"training_namespace_image_pull_secrets\[1\] is not a Secret name: must be a DNS-1123 subdomain",
        ),
        ({"image_pull_secrets": ["a", "a"]}, r"training_namespace_image_pull_secrets\[1\] repeats 'a'"),
        ({"scc": "yes"}, "training_namespace_scc must be auto, true or false, got 'yes'"),
        ({"scc_name": "Training SCC"}, "training_namespace_scc_name must be a DNS-1123 subdomain"),
        (
            {"scc_uid_range": "1000"},
            "training_namespace_scc_uid_range must be a user id range written START/SIZE",
        ),
        ({"scc_uid_range": "0/1000"}, r"training_namespace_scc_uid_range \(0/1000\) must not include uid 0"),
        ({"scc_gid_range": "2000-1000"}, "training_namespace_scc_gid_range must be a group id range"),
    ],
)
def test_each_problem_names_the_variable_and_what_was_expected(changes, message):
    problems = namespace_problems(settings(**changes))
    assert problems, changes
    assert any(re.search(message, problem) for problem in problems), problems


def test_every_problem_is_reported_at_once():
    problems = namespace_problems(settings(name="BAD", dataset_pvc_size="lots", quota_gpus=-2))
    assert len(problems) == 3
    assert all(problem.startswith("training_namespace_") for problem in problems)


def test_disabled_parts_are_not_checked():
    assert namespace_problems(settings(limit_range=False, quota=False, container_cpu_request="x")) == []
    assert namespace_problems(settings(dataset_pvc=False, dataset_pvc_size="x")) == []


def test_absent_checks_only_the_names():
    assert namespace_problems(settings(state="absent", quota_cpu="lots", scc_uid_range="x")) == []
    assert namespace_problems(settings(state="absent", scc="maybe")) == [
        "training_namespace_scc must be auto, true or false, got 'maybe'"
    ]
    assert namespace_problems(settings(state="absent", name="Bad")) == [
        "training_namespace_name must be a DNS-1123 label: lower-case letters, digits and '-', starting"
        " and ending with a letter or digit, got 'Bad'"
    ]


def test_extra_rules_are_appended_to_the_trainer_rules():
    extra = {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get", "list"]}
    role = by_kind(namespace_objects(settings(role_extra_rules=[extra])))["Role"]
    assert role["rules"][-1] == extra
    assert len(role["rules"]) == 3


def test_quantities_are_strings_the_api_accepts():
    objects = namespace_objects(settings(container_cpu_request=8, container_cpu_limit=8, quota_cpu=64))
    kinds = by_kind(objects)
    assert kinds["LimitRange"]["spec"]["limits"][0]["default"]["cpu"] == "8"
    assert kinds["ResourceQuota"]["spec"]["hard"]["limits.cpu"] == "64"
    for value in kinds["ResourceQuota"]["spec"]["hard"].values():
        parse_quantity(value)


def test_settings_that_are_not_a_mapping():
    assert namespace_problems(["training"]) == ["training_namespace settings must be a mapping, got list"]


def test_a_cluster_queue_adds_a_local_queue_pointing_at_it_last():
    objects = namespace_objects(settings(kueue_cluster_queue="gpu-cluster-queue", kueue_local_queue="team-a"))
    assert objects[-1] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {
            "name": "team-a",
            "namespace": "training",
            "labels": {"app.kubernetes.io/managed-by": "gpuops.training"},
        },
        "spec": {"clusterQueue": "gpu-cluster-queue"},
    }
    assert "LocalQueue" not in by_kind(namespace_objects(settings()))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"kueue_cluster_queue": "GPU Queue"},
            "training_namespace_kueue_cluster_queue must be a DNS-1123 subdomain",
        ),
        (
            {"kueue_cluster_queue": "gpus", "kueue_local_queue": "team.a"},
            "training_namespace_kueue_local_queue must be a DNS-1123 label",
        ),
    ],
)
def test_the_kueue_queues_are_named_before_any_api_call(changes, message):
    assert any(message in problem for problem in namespace_problems(settings(**changes)))
    # Without a ClusterQueue no LocalQueue is made, so its name is not checked.
    assert namespace_problems(settings(kueue_local_queue="team.a")) == []


@pytest.mark.parametrize("choice", ["auto", "true", "false", True, False, "True"])
def test_the_scc_choice_takes_yaml_booleans_and_words(choice):
    assert namespace_problems(settings(scc=choice)) == []


def test_the_service_account_carries_the_image_pull_secrets_by_name():
    account = by_kind(namespace_objects(settings(image_pull_secrets=["regcred", "mirror"])))["ServiceAccount"]
    assert account["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert "imagePullSecrets" not in by_kind(namespace_objects(settings()))["ServiceAccount"]


def test_the_scc_is_named_for_the_namespace_and_granted_to_the_trainer_account_alone():
    scc, role, binding = scc_objects(settings(name="vision"))
    assert (scc["kind"], scc["metadata"]["name"]) == ("SecurityContextConstraints", "gpuops-training-vision")
    assert scc["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpuops.training",
        "gpuops.training/namespace": "vision",
    }
    assert scc["users"] == scc["groups"] == []
    assert (role["kind"], role["metadata"]["namespace"], role["metadata"]["name"]) == (
        "Role",
        "vision",
        "gpuops-training-vision",
    )
    assert role["rules"] == [
        {
            "apiGroups": ["security.openshift.io"],
            "resources": ["securitycontextconstraints"],
            "resourceNames": ["gpuops-training-vision"],
            "verbs": ["use"],
        }
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainer", "namespace": "vision"}]
    # A name of one's own; the ranges pinned.
    scc, role, _binding = scc_objects(
        settings(scc_name="ml-training", scc_uid_range="5000/10", scc_gid_range="5000-5009")
    )
    assert scc["metadata"]["name"] == role["rules"][0]["resourceNames"][0] == "ml-training"
    assert scc["runAsUser"] == {"type": "MustRunAsRange", "uidRangeMin": 5000, "uidRangeMax": 5009}
    assert (
        scc["fsGroup"]
        == scc["supplementalGroups"]
        == {"type": "MustRunAs", "ranges": [{"min": 5000, "max": 5009}]}
    )


def test_the_scc_filter_refuses_bad_settings_naming_the_variable():
    scc_filter = FilterModule().filters()["training_namespace_scc_objects"]
    assert [item["kind"] for item in scc_filter(settings())] == [
        "SecurityContextConstraints",
        "Role",
        "RoleBinding",
    ]
    with pytest.raises(AnsibleFilterError, match="training_namespace_scc_uid_range"):
        scc_filter(settings(scc_uid_range="all"))


def test_the_ranks_reach_each_other_dns_and_only_the_egress_they_are_given():
    policy = by_kind(
        namespace_objects(settings(network_policy_egress=[{"cidr": "10.20.0.0/16", "ports": [443]}]))
    )["NetworkPolicy"]
    spec = policy["spec"]
    # The label every rank's pod of the training_workload filter carries.
    assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/component": "ranks"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert spec["egress"] == [
        {"to": [{"podSelector": {}}]},
        {
            "to": [{"namespaceSelector": {}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 443}]},
    ]
    assert "NetworkPolicy" not in by_kind(namespace_objects(settings(network_policy=False)))


@pytest.mark.parametrize(
    ("egress", "message"),
    [
        ([{"cidr": "10.0.0.0/33"}], "network_policy_egress[0] cidr must be a CIDR such as 10.0.0.0/8"),
        (
            [{"cidr": "10.0.0.0/8", "ports": [0]}],
            "network_policy_egress[0] ports must be a list of TCP ports",
        ),
        ([{"to": "10.0.0.0/8"}], "network_policy_egress[0] must be a mapping with cidr"),
        ("10.0.0.0/8", "network_policy_egress must be a list of {cidr, ports}"),
    ],
)
def test_bad_egress_entries_are_named(egress, message):
    assert any(message in problem for problem in namespace_problems(settings(network_policy_egress=egress)))

"""training_namespace against the real control plane (kube-apiserver 1.36, RBAC, admission).

The role runs as a user would run it; the tests then read what the server stores and let the
server's own admission prove the sizing: a pod without resources gets the LimitRange's equal
requests and limits (QoS Guaranteed), a pod whose limits exceed its requests and a pod beyond
the GPU quota are refused, and the trainer's own token is refused Secrets and other namespaces.
"""

from __future__ import annotations

import re
import secrets

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ansible_collections.gpuops.training.plugins.module_utils.quantities import parse_quantity

pytestmark = pytest.mark.slow


def names():
    suffix = secrets.token_hex(3)
    return "tn-%s" % suffix, "tn-priority-%s" % suffix


def role_vars(k8s_cluster, namespace, priority_class, **changes):
    variables = {
        "training_namespace_name": namespace,
        "training_namespace_priority_class": priority_class,
        "training_namespace_kubeconfig": str(k8s_cluster.kubeconfig),
        "training_namespace_pod_security": "baseline",
        "training_namespace_labels": {"team": "vision"},
        "training_namespace_dataset_pvc_size": "100Gi",
        "training_namespace_checkpoint_pvc_size": "50Gi",
        "training_namespace_container_cpu_request": "4",
        "training_namespace_container_cpu_limit": "4",
        "training_namespace_container_memory_request": "16Gi",
        "training_namespace_container_memory_limit": "16Gi",
        "training_namespace_quota_cpu": "64",
        "training_namespace_quota_memory": "256Gi",
        "training_namespace_quota_gpus": 8,
        "training_namespace_quota_extended_resources": {"rdma/rdma_shared_device_a": 8},
        "training_namespace_quota_storage": "1Ti",
    }
    variables.update(changes)
    return variables


def recap_changed(run):
    match = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", run.output)
    assert match, run
    return int(match.group(1))


def delete_everything(k8s_cluster, namespace, priority_class):
    k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)
    k8s_cluster.kubectl("delete", "priorityclass", priority_class, "--ignore-not-found", check=False)
    # The harness serves OpenShift's SCC API, so the role made the trainer's SCC (cluster-scoped).
    k8s_cluster.kubectl(
        "delete",
        "securitycontextconstraints.security.openshift.io",
        "gpuops-training-" + namespace,
        "--ignore-not-found",
        check=False,
    )


@pytest.fixture(scope="module")
def converged(k8s_cluster, run_role):
    """One namespace the role has converged (with its first run's output), deleted afterwards."""
    namespace, priority_class = names()
    variables = role_vars(k8s_cluster, namespace, priority_class)
    run = run_role("training_namespace", variables)
    assert run.rc == 0, run
    yield namespace, priority_class, variables, run
    delete_everything(k8s_cluster, namespace, priority_class)


@pytest.fixture(scope="module")
def core(k8s_cluster):
    return client.CoreV1Api(k8s_cluster.api_client())


def test_first_run_creates_every_object_and_a_second_run_changes_nothing(converged, run_role):
    namespace, priority_class, variables, first = converged
    # One apply call for all of them; the report after it names each object that changed.
    assert first.reported("changed_objects") == [
        "Namespace %s" % namespace,
        "PriorityClass %s" % priority_class,
        "ServiceAccount %s/trainer" % namespace,
        "Role %s/trainer" % namespace,
        "RoleBinding %s/trainer" % namespace,
        "PersistentVolumeClaim %s/dataset" % namespace,
        "PersistentVolumeClaim %s/checkpoints" % namespace,
        "LimitRange %s/container-defaults" % namespace,
        "ResourceQuota %s/training-quota" % namespace,
        "NetworkPolicy %s/training-ranks" % namespace,
        # The harness serves security.openshift.io (test_training_namespace_openshift.py).
        "SecurityContextConstraints gpuops-training-%s" % namespace,
        "Role %s/gpuops-training-%s" % (namespace, namespace),
        "RoleBinding %s/gpuops-training-%s" % (namespace, namespace),
    ]
    second = run_role("training_namespace", variables)
    assert second.rc == 0, second
    assert recap_changed(second) == 0, second
    assert second.reported("changed_objects") == [], second


def test_check_mode_reports_a_change_and_the_server_keeps_the_old_value(converged, run_role, core):
    namespace, _priority_class, variables, _first = converged
    run = run_role(
        "training_namespace",
        dict(
            variables,
            training_namespace_quota_cpu="32",
            training_namespace_container_memory_limit="24Gi",
            training_namespace_container_memory_request="24Gi",
        ),
        "--check",
        "--diff",
    )
    assert run.rc == 0, run
    assert sorted(run.reported("changed_objects")) == [
        "LimitRange %s/container-defaults" % namespace,
        "ResourceQuota %s/training-quota" % namespace,
    ], run
    assert re.search(r"^-\s+limits.cpu: '64'$", run.output, re.MULTILINE), run  # the diff
    assert re.search(r"^\+\s+limits.cpu: '32'$", run.output, re.MULTILINE), run
    hard = core.read_namespaced_resource_quota("training-quota", namespace).spec.hard
    assert hard["limits.cpu"] == "64"
    limits = core.read_namespaced_limit_range("container-defaults", namespace).spec.limits[0]
    assert limits.default["memory"] == "16Gi"


def test_check_mode_on_a_new_namespace_lists_the_objects_and_creates_nothing(k8s_cluster, run_role, core):
    namespace, priority_class = names()
    try:
        run = run_role(
            "training_namespace", role_vars(k8s_cluster, namespace, priority_class), "--check", "--diff"
        )
        assert run.rc == 0, run
        # The cluster-scoped objects are dry-run; those inside the namespace are only listed.
        assert run.reported("changed_objects") == [
            "Namespace %s" % namespace,
            "PriorityClass %s" % priority_class,
            "SecurityContextConstraints gpuops-training-%s" % namespace,
        ], run
        deferred = run.reported("deferred_objects")
        assert "ResourceQuota %s/training-quota" % namespace in deferred, run
        assert "RoleBinding %s/gpuops-training-%s" % (namespace, namespace) in deferred, run
        assert "NetworkPolicy %s/training-ranks" % namespace in deferred, run
        assert len(deferred) == 10, run
        with pytest.raises(ApiException) as missing:
            core.read_namespace(namespace)
        assert missing.value.status == 404
        scheduling = client.SchedulingV1Api(k8s_cluster.api_client())
        with pytest.raises(ApiException):
            scheduling.read_priority_class(priority_class)
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)


def test_the_server_stores_what_was_asked(converged, k8s_cluster, core):
    namespace, priority_class, _variables, _first = converged
    api = k8s_cluster.api_client()
    labels = core.read_namespace(namespace).metadata.labels
    assert labels["team"] == "vision"
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn-version"] == "latest"

    priority = client.SchedulingV1Api(api).read_priority_class(priority_class)
    assert (priority.value, priority.preemption_policy) == (100000, "PreemptLowerPriority")
    assert not priority.global_default

    pvcs = {
        pvc.metadata.name: pvc.spec for pvc in core.list_namespaced_persistent_volume_claim(namespace).items
    }
    assert sorted(pvcs) == ["checkpoints", "dataset"]
    assert pvcs["dataset"].access_modes == ["ReadWriteMany"]
    assert pvcs["dataset"].resources.requests["storage"] == "100Gi"
    assert pvcs["checkpoints"].resources.requests["storage"] == "50Gi"

    rbac = client.RbacAuthorizationV1Api(api)
    rules = rbac.read_namespaced_role("trainer", namespace).rules
    granted = {(resource, verb) for rule in rules for resource in rule.resources for verb in rule.verbs}
    assert not any(resource.startswith("secrets") for resource, _verb in granted)
    assert ("pods/log", "get") in granted
    binding = rbac.read_namespaced_role_binding("trainer", namespace)
    assert (binding.role_ref.kind, binding.role_ref.name) == ("Role", "trainer")
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("ServiceAccount", "trainer", namespace)
    ]

    (limit,) = core.read_namespaced_limit_range("container-defaults", namespace).spec.limits
    assert limit.default == limit.default_request == {"cpu": "4", "memory": "16Gi"}
    assert limit.max_limit_request_ratio == {"cpu": "1", "memory": "1"}

    hard = core.read_namespaced_resource_quota("training-quota", namespace).spec.hard
    assert {key: parse_quantity(value) for key, value in hard.items()} == {
        "requests.cpu": 64,
        "limits.cpu": 64,
        "requests.memory": 256 * 2**30,
        "limits.memory": 256 * 2**30,
        "requests.nvidia.com/gpu": 8,
        "requests.rdma/rdma_shared_device_a": 8,
        "pods": 64,
        "requests.storage": 2**40,
    }


def pod(name, resources=None, gpus=0):
    container = {"name": "trainer", "image": "registry.example/trainer:1"}
    if resources or gpus:
        container["resources"] = resources or {}
    if gpus:
        for section in ("requests", "limits"):
            container["resources"].setdefault(section, {}).update({"cpu": "4", "memory": "16Gi"})
            container["resources"][section]["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"serviceAccountName": "trainer", "containers": [container]},
    }


def test_the_limit_range_makes_pods_guaranteed_and_the_quota_caps_gpus(converged, core):
    namespace = converged[0]
    created = core.create_namespaced_pod(namespace, pod("defaults"))
    assert created.status.qos_class == "Guaranteed"
    resources = created.spec.containers[0].resources
    assert resources.requests == resources.limits == {"cpu": "4", "memory": "16Gi"}

    with pytest.raises(ApiException) as burstable:
        core.create_namespaced_pod(
            namespace,
            pod(
                "burstable",
                {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
            ),
        )
    assert burstable.value.status == 403
    assert "cpu max limit to request ratio per Container is 1, but provided ratio is 2" in (
        burstable.value.body
    )

    assert core.create_namespaced_pod(namespace, pod("eight-gpus", gpus=8)).status.qos_class == "Guaranteed"
    with pytest.raises(ApiException) as over_quota:
        core.create_namespaced_pod(namespace, pod("one-more-gpu", gpus=1))
    assert over_quota.value.status == 403
    assert "exceeded quota: training-quota" in over_quota.value.body
    assert "requests.nvidia.com/gpu" in over_quota.value.body


def test_the_trainer_token_cannot_read_secrets_or_touch_other_namespaces(converged, k8s_cluster, core):
    namespace = converged[0]
    token = core.create_namespaced_service_account_token(
        "trainer", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(k8s_cluster.kubeconfig), client_configuration=configuration)
    configuration.cert_file = configuration.key_file = None
    configuration.api_key = {"authorization": "Bearer " + token}
    trainer = client.CoreV1Api(client.ApiClient(configuration))

    # What it needs: its own pods, their logs' parent objects, services and configmaps.
    trainer.list_namespaced_pod(namespace)
    trainer.list_namespaced_service(namespace)
    trainer.list_namespaced_config_map(namespace)

    refused = [
        lambda: trainer.list_namespaced_secret(namespace),
        lambda: trainer.read_namespaced_secret("anything", namespace),
        lambda: trainer.list_namespaced_pod("default"),
        lambda: trainer.list_namespaced_config_map("kube-system"),
        lambda: trainer.create_namespaced_pod(namespace, pod("by-trainer")),
        lambda: trainer.delete_namespaced_pod("defaults", namespace),
        trainer.list_namespace,
    ]
    for call in refused:
        with pytest.raises(ApiException) as denied:
            call()
        assert denied.value.status == 403
        assert "system:serviceaccount:%s:trainer" % namespace in denied.value.body

    # The same through impersonation, as an operator would check it.
    subject = "--as=system:serviceaccount:%s:trainer" % namespace
    for verb, resource, where, expected in (
        ("get", "secrets", namespace, "no"),
        ("list", "secrets", namespace, "no"),
        ("watch", "pods", namespace, "yes"),
        ("get", "pods/log", namespace, "yes"),
        ("get", "pods", "default", "no"),
        ("create", "pods", namespace, "no"),
    ):
        answer = k8s_cluster.kubectl("auth", "can-i", verb, resource, "-n", where, subject, check=False)
        assert answer.stdout.strip() == expected, (verb, resource, where, answer.stdout, answer.stderr)


def test_bad_settings_fail_with_one_message_before_any_api_call(k8s_cluster, run_role, core):
    namespace, priority_class = names()
    run = run_role(
        "training_namespace",
        role_vars(
            k8s_cluster,
            namespace,
            priority_class,
            training_namespace_container_memory_request="12Gi",
            training_namespace_container_cpu_limit="2",
            training_namespace_quota_memory="8Gi",
            training_namespace_dataset_pvc_size="100GB",
            training_namespace_role_extra_rules=[
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
            ],
        ),
    )
    assert run.rc != 0
    assert run.output.count("fatal: [localhost]") == 1  # one failed task, listing every problem
    assert "The training namespace settings are not valid:" in run.output
    for expected in (
        "training_namespace_container_memory_request (12Gi) must equal"
        " training_namespace_container_memory_limit (16Gi) when training_namespace_guaranteed is true",
        "training_namespace_container_cpu_limit (2) must be at least"
        " training_namespace_container_cpu_request (4)",
        "training_namespace_quota_memory (8Gi) must be at least"
        " training_namespace_container_memory_limit (16Gi)",
        "training_namespace_dataset_pvc_size must be a Kubernetes quantity such as '64Gi', got '100GB'",
        "training_namespace_role_extra_rules[0] grants access to Secrets",
    ):
        assert expected in run.output, expected
    assert "Apply the namespace and every object in it" not in run.output  # stopped before any API call
    with pytest.raises(ApiException) as missing:
        core.read_namespace(namespace)
    assert missing.value.status == 404


def test_a_server_rejection_names_the_object_and_the_reason(converged, run_role):
    namespace, priority_class, variables, _first = converged
    run = run_role("training_namespace", dict(variables, training_namespace_priority_class_value=5))
    assert run.rc != 0
    assert run.output.count("fatal: [localhost]") == 1, run
    # Every object was tried in the one call; only the PriorityClass was rejected.
    assert len(run.reported("rejected_objects")) == 1, run
    assert (
        "The API server rejected 1 of the 13 objects of namespace %s:"
        ' - PriorityClass %s: PriorityClass.scheduling.k8s.io "%s" is invalid:'
        " value: Forbidden: may not be changed in an update." % (namespace, priority_class, priority_class)
    ) in " ".join(run.output.split())


def test_absent_deletes_the_namespace_and_the_priority_class(k8s_cluster, run_role, core):
    namespace, priority_class = names()
    variables = role_vars(k8s_cluster, namespace, priority_class, training_namespace_dataset_pvc=False)
    try:
        assert run_role("training_namespace", variables).rc == 0
        run = run_role("training_namespace", dict(variables, training_namespace_state="absent"))
        assert run.rc == 0, run
        assert recap_changed(run) == 3, run  # the namespace, the PriorityClass and the SCC
        with pytest.raises(ApiException) as gone:
            core.read_namespace(namespace)
        assert gone.value.status == 404
        with pytest.raises(ApiException):
            client.SchedulingV1Api(k8s_cluster.api_client()).read_priority_class(priority_class)
        again = run_role("training_namespace", dict(variables, training_namespace_state="absent"))
        assert again.rc == 0 and recap_changed(again) == 0, again
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)

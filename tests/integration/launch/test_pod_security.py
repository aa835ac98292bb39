"""Pod security on what the API server stores, for every workload the collection renders.

Each variant of the training_workload filter's settings (every launcher that creates objects,
with and without a Master, elastic, each fabric, with and without user ids, a TrainJob with
its own TrainingRuntime and one that names an existing runtime, an MPIJob for nccl-tests) is
rendered, applied to the harness's real API server with server-side apply, and read back; the
controllers then create the pods (kube-controller-manager for Jobs, the Training Operator for
PyTorchJobs and MPIJobs, the tests' stand-in Trainer controller for TrainJobs), which are read
back too. Every pod spec found - in a Job, a PyTorchJob's or MPIJob's replica specs, the
JobSet template of a TrainingRuntime, a TrainJob's pod overrides, and each stored Pod - must:

- run no container privileged, and every container of the collection's with
  allowPrivilegeEscalation false and capabilities drop ALL, add IPC_LOCK at most;
- use no host network, PID or IPC namespace (the collection has no setting that asks for one),
  and no hostPath volume;
- carry runAsNonRoot when a non-root runAsUser is set (the collection documents that without
  training_job_run_as_user the image's user is used, so it cannot claim non-root then);
- have a seccompProfile of RuntimeDefault wherever one is set, and the pods the collection
  renders have it set (training_job_seccomp_profile's default);
- carry the variables of training_job_env_from_secrets as secretKeyRef references, never as
  values.

Containers the operators add to the pods, and a TrainJob's container overrides (its API has
no security context there: the runtime it names sets it), are held to the same rules except
the two the collection cannot set for them (allowPrivilegeEscalation false and drop ALL).
The ServiceAccount each stored pod runs as must not be able to read Secrets.
"""

from __future__ import annotations

import json

import pytest
from cluster_helpers import FakeTrainerController, wait_for

from ansible_collections.gpuops.training.plugins.filter.training_workload import FilterModule

RENDER = FilterModule().filters()["training_workload"]
IMAGE = "registry.example/gpuops-trainer:test"
ALLOWED_CAPABILITIES = {"IPC_LOCK"}
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
BASE = {
    "name": "sec",
    "image": IMAGE,
    "nnodes": 2,
    "nproc_per_node": 1,
    # No GPUs: the pods need not be scheduled to be stored, and other tests keep the GPUs.
    "gpus_per_node": 0,
    "cpu": "1",
    "memory": "4Gi",
    "shm_size": "1Gi",
    "checkpoint_pvc": "",
    "timeout_s": 300,
    "epochs": 1,
    # No Secret of that name exists: the pods are stored and scheduled all the same, and the
    # reference is what the test reads back.
    "env_from_secrets": {"HF_TOKEN": {"secret": "hub-credentials", "key": "token"}},
}
SECRET_REF = {"secretKeyRef": {"name": "hub-credentials", "key": "token"}}
VARIANTS = {
    "pytorchjob-ib-non-root": dict(
        launcher="pytorchjob", fabric="ib", network="rdma-net", run_as_user=1000, run_as_group=1000
    ),
    "pytorchjob-master-image-user": dict(launcher="pytorchjob", pytorchjob_master=True),
    "pytorchjob-elastic": dict(launcher="pytorchjob", elastic_min_nodes=1, elastic_max_nodes=3),
    "indexed-job-roce-root": dict(launcher="indexed_job", fabric="roce", run_as_user=0, run_as_group=0),
    "trainjob-own-runtime": dict(launcher="trainjob", run_as_user=2000),
    "trainjob-existing-runtime": dict(launcher="trainjob", trainjob_runtime="torch-distributed"),
    "mpijob-nccl-tests": dict(
        launcher="mpijob",
        fabric="socket",
        mpirun_argv=["mpirun", "-np", "2", "/opt/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "8M"],
    ),
}
# Pods the controllers create per variant (none for a runtime this harness does not have).
EXPECTED_PODS = {
    "pytorchjob-master-image-user": 2,
    "mpijob-nccl-tests": 3,
    "trainjob-existing-runtime": 0,
}


def pod_templates(obj):
    """(where, pod spec) of every pod template inside a stored object."""
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    found = []
    if kind == "Job":
        found.append(("spec.template", spec["template"]["spec"]))
    elif kind == "PyTorchJob":
        for replica, replica_spec in spec["pytorchReplicaSpecs"].items():
            found.append(("pytorchReplicaSpecs.%s" % replica, replica_spec["template"]["spec"]))
    elif kind == "MPIJob":
        for replica, replica_spec in spec["mpiReplicaSpecs"].items():
            found.append(("mpiReplicaSpecs.%s" % replica, replica_spec["template"]["spec"]))
    elif kind == "TrainingRuntime":
        # The runtime's JobSet: each replicated Job's pod template.
        for job in spec["template"]["spec"]["replicatedJobs"]:
            found.append(
                ("JobSet replicatedJobs.%s" % job["name"], job["template"]["spec"]["template"]["spec"])
            )
    elif kind == "TrainJob":
        for index, override in enumerate(spec.get("podTemplateOverrides") or []):
            found.append(("podTemplateOverrides[%d]" % index, override.get("spec") or {}))
    elif kind == "Pod":
        found.append(("Pod", spec))
    return found


def containers(spec):
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            yield field, container


def security_problems(where, spec, ours, rendered=False):
    """Every breach of the rules in the module docstring; ``ours`` names the collection's containers,
    ``rendered`` says whether the collection rendered this pod spec (not a TrainJob's overrides)."""
    problems = []
    if rendered and (spec.get("securityContext") or {}).get("seccompProfile") != {"type": "RuntimeDefault"}:
        problems.append("%s: the pod's seccompProfile is not RuntimeDefault" % where)
    for field in HOST_NAMESPACES:
        if spec.get(field):
            problems.append("%s: %s is set" % (where, field))
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            problems.append("%s: volume %s is a hostPath" % (where, volume.get("name")))
    pod_context = spec.get("securityContext") or {}
    user = pod_context.get("runAsUser")
    if isinstance(user, int) and user > 0 and pod_context.get("runAsNonRoot") is not True:
        problems.append("%s: runAsUser %d without runAsNonRoot" % (where, user))
    profiles = [("pod", pod_context.get("seccompProfile"))]
    for field, container in containers(spec):
        name = "%s %s[%s]" % (where, field, container.get("name"))
        context = container.get("securityContext") or {}
        profiles.append((name, context.get("seccompProfile")))
        capabilities = context.get("capabilities") or {}
        if context.get("privileged"):
            problems.append("%s: privileged" % name)
        if context.get("allowPrivilegeEscalation") is True:
            problems.append("%s: allowPrivilegeEscalation true" % name)
        added = set(capabilities.get("add") or [])
        if added - ALLOWED_CAPABILITIES:
            problems.append("%s: adds %s" % (name, sorted(added - ALLOWED_CAPABILITIES)))
        if container.get("name") in ours or not container.get("name"):
            secret_env = [item for item in container.get("env") or [] if item.get("name") == "HF_TOKEN"]
            if rendered and secret_env != [{"name": "HF_TOKEN", "valueFrom": SECRET_REF}]:
                problems.append("%s: HF_TOKEN is %r, not a secretKeyRef" % (name, secret_env))
            if context.get("allowPrivilegeEscalation") is not False:
                problems.append("%s: allowPrivilegeEscalation is not false" % name)
            if capabilities.get("drop") != ["ALL"]:
                problems.append("%s: capabilities.drop is %r, not [ALL]" % (name, capabilities.get("drop")))
            user = context.get("runAsUser")
            if isinstance(user, int) and user > 0 and context.get("runAsNonRoot") is False:
                problems.append("%s: runAsNonRoot false with a non-root user" % name)
    for name, profile in profiles:
        if profile is not None and profile.get("type") != "RuntimeDefault":
            problems.append("%s: seccompProfile %r" % (name, profile))
    return problems


def rendered_container_names(manifests):
    names = set()
    for obj in manifests:
        for _where, spec in pod_templates(obj):
            names.update(container.get("name") for _field, container in containers(spec))
    return names


def get_json(cluster, *args):
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def settings_of(variant, namespace):
    return dict(BASE, namespace=namespace, run_id="sec-%s" % variant, **VARIANTS[variant])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_what_the_server_stores_is_never_privileged(k8s_cluster, launch_namespace, variant):
    workload = RENDER(settings_of(variant, launch_namespace))
    manifests = workload["manifests"]
    ours = rendered_container_names(manifests)
    controller = (
        FakeTrainerController(k8s_cluster, launch_namespace) if variant.startswith("trainjob") else None
    )
    if controller is not None:
        controller.start()
    try:
        k8s_cluster.apply(*manifests)
        problems = []
        templates = 0
        for obj in manifests:
            kind = obj["kind"]
            resource = {"PyTorchJob": "pytorchjobs.kubeflow.org", "MPIJob": "mpijobs.kubeflow.org"}.get(
                kind, kind
            )
            stored = get_json(k8s_cluster, resource, obj["metadata"]["name"], "-n", launch_namespace)
            for where, spec in pod_templates(stored):
                templates += 1
                # A TrainJob's overrides are merged into the pod of a runtime it names: its API
                # takes no security context there (the runtime grants it, as the role's README
                # says), so they are held to what they must not add, not to what they cannot set.
                owned = set() if kind == "TrainJob" else ours
                problems += security_problems(
                    "%s %s" % (kind, where), spec, owned, rendered=kind != "TrainJob"
                )
        expected = EXPECTED_PODS.get(variant, 2)

        def pods():
            items = get_json(k8s_cluster, "pods", "-n", launch_namespace, "-l", workload["pod_selector"])[
                "items"
            ]
            return items if len(items) >= expected else None

        stored_pods = wait_for(pods, timeout=60) if expected else []
    finally:
        if controller is not None:
            controller.stop()
    assert templates >= 1, manifests
    assert stored_pods is not None and len(stored_pods) == expected, "the controllers created no pods"
    for pod in stored_pods:
        problems += security_problems("Pod %s" % pod["metadata"]["name"], pod["spec"], ours, rendered=True)
    assert problems == []

    # The ServiceAccount the pods run as cannot read Secrets.
    for account in sorted({pod["spec"].get("serviceAccountName", "default") for pod in stored_pods}):
        subject = "--as=system:serviceaccount:%s:%s" % (launch_namespace, account)
        for verb in ("get", "list", "watch"):
            answer = k8s_cluster.kubectl(
                "auth", "can-i", verb, "secrets", "-n", launch_namespace, subject, check=False
            )
            assert answer.stdout.strip() == "no", (account, verb, answer.stdout, answer.stderr)


def test_the_rules_catch_what_they_are_meant_to():
    """The checker itself: each breach it exists for is reported."""
    bad = {
        "hostNetwork": True,
        "hostPID": True,
        "securityContext": {"runAsUser": 1000, "seccompProfile": {"type": "Unconfined"}},
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [
            {
                "name": "trainer",
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN", "IPC_LOCK"]}},
            },
            {"name": "sidecar", "securityContext": {"allowPrivilegeEscalation": True}},
        ],
    }
    bad["containers"][0]["env"] = [{"name": "HF_TOKEN", "value": "hf_secret"}]
    problems = security_problems("Pod p", bad, {"trainer"}, rendered=True)
    for expected in (
        "hostNetwork is set",
        "hostPID is set",
        "volume root is a hostPath",
        "runAsUser 1000 without runAsNonRoot",
        "containers[trainer]: privileged",
        "adds ['SYS_ADMIN']",
        "containers[trainer]: allowPrivilegeEscalation is not false",
        "capabilities.drop is None",
        "containers[sidecar]: allowPrivilegeEscalation true",
        "pod: seccompProfile",
        "the pod's seccompProfile is not RuntimeDefault",
        "containers[trainer]: HF_TOKEN is [{'name': 'HF_TOKEN', 'value': 'hf_secret'}], not a secretKeyRef",
    ):
        assert any(expected in problem for problem in problems), (expected, problems)
    assert not any("sidecar]: capabilities.drop" in problem for problem in problems)

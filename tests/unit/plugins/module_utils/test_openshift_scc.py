"""The SCC training_namespace renders admits, on paper, every pod the collection renders, and
refuses what a training pod must never ask for, with a message that says why.

The pods come from the collection's own builders (training_workload: Indexed Job, PyTorchJob,
TrainJob's TrainingRuntime, nccl-tests' MPIJob) with the training_job role's defaults, and the SCC
from training_namespace's builder with the role's defaults; nothing is copied by hand.
"""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils import training_workload as tw
from ansible_collections.gpuops.training.plugins.module_utils.openshift_scc import (
    GROUP_RANGE_ANNOTATION,
    MCS_ANNOTATION,
    UID_RANGE_ANNOTATION,
    parse_id_range,
    scc_admits,
    training_scc,
)
from ansible_collections.gpuops.training.plugins.module_utils.operator_init_container import (
    init_container_template,
)
from ansible_collections.gpuops.training.plugins.module_utils.training_namespace import scc_objects

ROLES = pathlib.Path(__file__).resolve().parents[4] / "roles"
# What OpenShift writes on a new project (the ranges are 10000 ids from a per-namespace start).
NAMESPACE_ANNOTATIONS = {
    UID_RANGE_ANNOTATION: "1000680000/10000",
    GROUP_RANGE_ANNOTATION: "1000680000/10000",
    MCS_ANNOTATION: "s0:c26,c15",
}
# OpenShift's default SCC for authenticated users, as its documentation describes restricted-v2:
# the reason the trainer needs its own.
RESTRICTED_V2 = {
    "metadata": {"name": "restricted-v2"},
    "allowPrivilegedContainer": False,
    "allowPrivilegeEscalation": False,
    "allowedCapabilities": ["NET_BIND_SERVICE"],
    "requiredDropCapabilities": ["ALL"],
    "allowHostDirVolumePlugin": False,
    "allowHostIPC": False,
    "allowHostNetwork": False,
    "allowHostPID": False,
    "allowHostPorts": False,
    "runAsUser": {"type": "MustRunAsRange"},
    "seLinuxContext": {"type": "MustRunAs"},
    "fsGroup": {"type": "MustRunAs"},
    "supplementalGroups": {"type": "RunAsAny"},
    "seccompProfiles": ["runtime/default"],
    "volumes": [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ],
}
MPIRUN = ["mpirun", "--allow-run-as-root", "/opt/nccl-tests/build/all_reduce_perf"]


def namespace_settings(**changes):
    """training_namespace's settings from its defaults (namespace 'training')."""
    prefix = "training_namespace_"
    defaults = yaml.safe_load((ROLES / "training_namespace" / "defaults" / "main.yml").read_text())
    settings = {key[len(prefix) :]: value for key, value in defaults.items()}
    settings.update(changes)
    return settings


def the_scc(**changes):
    scc, _role, _binding = scc_objects(namespace_settings(**changes))
    return scc


def run_settings(launcher, **changes):
    """A run as the training_job role would render it with its defaults, as the trainer account."""
    settings = {
        "launcher": launcher,
        "name": "retinanet",
        "run_id": "retinanet-20261122T050000Z",
        "namespace": "training",
        "image": "registry.example/gpuops-trainer:1.0",
        "service_account": "trainer",
        "nnodes": 2,
    }
    if launcher == "mpijob":
        settings["mpirun_argv"] = MPIRUN
    settings.update(changes)
    return settings


def rendered_pods(launcher, **changes):
    """{replica: pod spec} of what the collection renders for the launcher."""
    manifests, _command = tw.KINDS[launcher][2](run_settings(launcher, **changes))
    if launcher == "indexed_job":
        (job,) = [item for item in manifests if item["kind"] == "Job"]
        return {"pod": job["spec"]["template"]["spec"]}
    if launcher == "pytorchjob":
        (job,) = manifests
        return {kind: spec["template"]["spec"] for kind, spec in job["spec"]["pytorchReplicaSpecs"].items()}
    if launcher == "trainjob":
        (runtime,) = [item for item in manifests if item["kind"] == "TrainingRuntime"]
        job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
        return {"node": job["spec"]["template"]["spec"]}
    (job,) = manifests
    return {kind: spec["template"]["spec"] for kind, spec in job["spec"]["mpiReplicaSpecs"].items()}


# The trainer's pods (and nccl-tests' workers) run as the trainer account; the MPIJob's launcher
# runs as the account the Training Operator makes for it.
TRAINER_PODS = [
    ("indexed_job", {}, "pod"),
    ("pytorchjob", {}, "Worker"),
    ("pytorchjob", {"pytorchjob_master": True}, "Master"),
    ("pytorchjob", {"pytorchjob_master": True}, "Worker"),
    ("pytorchjob", {"elastic_min_nodes": 1, "elastic_max_nodes": 2}, "Worker"),
    ("trainjob", {}, "node"),
    ("mpijob", {}, "Worker"),
]


@pytest.mark.parametrize(("launcher", "changes", "replica"), TRAINER_PODS)
def test_the_trainer_scc_admits_every_pod_the_collection_renders_with_the_defaults(
    launcher, changes, replica
):
    pod = rendered_pods(launcher, **changes)[replica]
    (container,) = pod["containers"]
    # The reason for the SCC: the pod adds IPC_LOCK, which restricted-v2 refuses.
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert pod["volumes"], "the pod mounts /dev/shm and its checkpoints"
    assert scc_admits(the_scc(), pod, NAMESPACE_ANNOTATIONS) == []
    assert scc_admits(RESTRICTED_V2, pod, NAMESPACE_ANNOTATIONS) == [
        "container %s adds capability IPC_LOCK, which restricted-v2 does not allow"
        " (allowed: NET_BIND_SERVICE)" % container["name"]
    ]


@pytest.mark.parametrize(("launcher", "changes", "replica"), TRAINER_PODS)
def test_a_trainer_with_a_uid_and_group_of_the_namespace_range_is_admitted(launcher, changes, replica):
    ids = {"run_as_user": 1000680042, "run_as_group": 1000680042}
    pod = rendered_pods(launcher, **dict(changes, **ids))[replica]
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 1000680042
    assert scc_admits(the_scc(), pod, NAMESPACE_ANNOTATIONS) == []


def test_the_init_container_the_operator_adds_to_workers_with_a_master_is_admitted_too():
    """The Training Operator adds it from the training_operator role's template."""
    template = init_container_template("100m", "20Mi")
    for placeholder, value in (
        ("{{.InitContainerImage}}", "registry.example/busybox:1.36"),
        ("{{.MaxTries}}", "100"),
        ("{{.MasterAddr}}", "retinanet-master-0"),
    ):
        template = template.replace(placeholder, value)
    worker = copy.deepcopy(rendered_pods("pytorchjob", pytorchjob_master=True)["Worker"])
    worker["initContainers"] = yaml.safe_load(template)
    assert scc_admits(the_scc(), worker, NAMESPACE_ANNOTATIONS) == []
    worker["initContainers"][0]["securityContext"] = {"capabilities": {"add": ["NET_RAW"]}}
    assert scc_admits(the_scc(), worker, NAMESPACE_ANNOTATIONS) == [
        "container init-pytorch adds capability NET_RAW, which gpuops-training-training does not allow"
        " (allowed: IPC_LOCK)"
    ]


def test_the_mpijob_launcher_needs_no_capability_and_passes_restricted_v2():
    """It runs as the operator's account, to which the trainer's SCC is not granted."""
    launcher = rendered_pods("mpijob")["Launcher"]
    assert "serviceAccountName" not in launcher
    assert launcher["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert scc_admits(RESTRICTED_V2, launcher, NAMESPACE_ANNOTATIONS) == []


def test_a_fixed_uid_outside_the_namespace_range_needs_the_scc_range_variables():
    pod = rendered_pods("pytorchjob", run_as_user=2000, run_as_group=2000)["Worker"]
    assert scc_admits(the_scc(), pod, NAMESPACE_ANNOTATIONS) == [
        "the pod's fsGroup 2000 is outside the range gpuops-training-training allows (1000680000-1000689999)",
        "container pytorch runs as uid 2000, outside the range gpuops-training-training allows"
        " (1000680000-1000689999)",
    ]
    pinned = the_scc(scc_uid_range="2000/1", scc_gid_range="2000-2000")
    assert pinned["runAsUser"] == {"type": "MustRunAsRange", "uidRangeMin": 2000, "uidRangeMax": 2000}
    assert pinned["fsGroup"] == {"type": "MustRunAs", "ranges": [{"min": 2000, "max": 2000}]}
    assert scc_admits(pinned, pod, NAMESPACE_ANNOTATIONS) == []
    # The SCC's own range wins over the namespace's: a uid of the namespace's range is refused.
    other = rendered_pods("pytorchjob", run_as_user=1000680042)["Worker"]
    assert scc_admits(pinned, other, NAMESPACE_ANNOTATIONS) == [
        "container pytorch runs as uid 1000680042, outside the range gpuops-training-training allows"
        " (2000-2000)"
    ]


def test_without_a_range_anywhere_a_fixed_uid_cannot_be_judged():
    pod = rendered_pods("indexed_job", run_as_user=1000680042)["pod"]
    assert scc_admits(the_scc(), pod, {}) == [
        "container trainer runs as uid 1000680042, but gpuops-training-training has no uid range of its"
        " own and the namespace no openshift.io/sa.scc.uid-range annotation"
    ]
    # A pod that sets no uid gets the range's first from the admission: nothing to judge.
    assert scc_admits(the_scc(), rendered_pods("indexed_job")["pod"], {}) == []


def spoiled(change):
    pod = copy.deepcopy(rendered_pods("pytorchjob")["Worker"])
    change(pod, pod["containers"][0])
    return pod


BAD_PODS = [
    (
        lambda pod, container: container["securityContext"].update(privileged=True),
        "container pytorch is privileged, which gpuops-training-training does not allow",
    ),
    (
        lambda pod, container: container["securityContext"].update(allowPrivilegeEscalation=True),
        "container pytorch allows privilege escalation, which gpuops-training-training does not allow",
    ),
    (
        lambda pod, container: container["securityContext"]["capabilities"]["add"].append("SYS_ADMIN"),
        "container pytorch adds capability SYS_ADMIN, which gpuops-training-training does not allow"
        " (allowed: IPC_LOCK)",
    ),
    (
        lambda pod, container: pod["volumes"].append({"name": "nvme", "hostPath": {"path": "/mnt/nvme"}}),
        "volume nvme is of type hostPath, which gpuops-training-training does not allow (volumes: configMap,"
        " downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected, secret)",
    ),
    (
        lambda pod, container: pod["volumes"].append({"name": "data", "nfs": {"server": "nas", "path": "/"}}),
        "volume data is of type nfs, which gpuops-training-training does not allow",
    ),
    (
        lambda pod, container: pod["securityContext"].update(runAsUser=0),
        "container pytorch runs as uid 0, outside the range gpuops-training-training allows",
    ),
    (
        lambda pod, container: container["securityContext"].update(runAsUser=999),
        "container pytorch runs as uid 999, outside the range",
    ),
    (
        lambda pod, container: pod.update(hostNetwork=True),
        "the pod sets hostNetwork: true, which gpuops-training-training does not allow"
        " (allowHostNetwork is false)",
    ),
    (
        lambda pod, container: pod.update(hostIPC=True),
        "the pod sets hostIPC: true, which gpuops-training-training does not allow",
    ),
    (
        lambda pod, container: pod.update(hostPID=True),
        "the pod sets hostPID: true",
    ),
    (
        lambda pod, container: container["ports"].append({"containerPort": 2222, "hostPort": 2222}),
        "container pytorch uses host port 2222, which gpuops-training-training does not allow",
    ),
    (
        lambda pod, container: pod["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "container pytorch uses the seccomp profile unconfined, which gpuops-training-training does not allow"
        " (allowed: runtime/default)",
    ),
    (
        lambda pod, container: pod["securityContext"].update(seLinuxOptions={"level": "s0:c1,c2"}),
        "container pytorch sets SELinux level other than gpuops-training-training requires"
        " (level=s0:c26,c15)",
    ),
    (
        lambda pod, container: pod["securityContext"].update(supplementalGroups=[4]),
        "the pod's supplementalGroups 4 is outside the range",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD_PODS)
def test_what_a_training_pod_must_never_ask_for_is_refused_with_the_reason(change, message):
    problems = scc_admits(the_scc(), spoiled(change), NAMESPACE_ANNOTATIONS)
    assert len(problems) == 1, problems
    assert problems[0].startswith(message), problems


def test_the_scc_grants_nothing_beyond_ipc_lock_and_names_no_user_or_group():
    scc = the_scc()
    assert scc["allowedCapabilities"] == ["IPC_LOCK"]
    assert scc["defaultAddCapabilities"] == []
    assert scc["requiredDropCapabilities"] == ["ALL"]
    for flag in (
        "allowPrivilegedContainer",
        "allowPrivilegeEscalation",
        "defaultAllowPrivilegeEscalation",
        "allowHostDirVolumePlugin",
        "allowHostIPC",
        "allowHostNetwork",
        "allowHostPID",
        "allowHostPorts",
    ):
        assert scc[flag] is False, flag
    assert "hostPath" not in scc["volumes"] and "*" not in scc["volumes"]
    assert scc["seccompProfiles"] == ["runtime/default"]
    assert scc["runAsUser"] == {"type": "MustRunAsRange"}
    assert scc["seLinuxContext"] == {"type": "MustRunAs"}
    assert scc["users"] == scc["groups"] == []
    # Compared with restricted-v2: one more capability, fewer volume types, groups from a range.
    assert set(scc["allowedCapabilities"]) - set(RESTRICTED_V2["allowedCapabilities"]) == {"IPC_LOCK"}
    assert set(scc["volumes"]) < set(RESTRICTED_V2["volumes"])


def test_a_wildcard_scc_admits_what_it_names():
    scc = training_scc("any", uid_range=(0, 2**31 - 1))
    scc.update(allowedCapabilities=["*"], volumes=["*"], allowHostDirVolumePlugin=True, seccompProfiles=["*"])
    pod = spoiled(
        lambda pod, container: container["securityContext"]["capabilities"]["add"].append("NET_ADMIN")
    )
    pod["volumes"].append({"name": "nvme", "hostPath": {"path": "/mnt/nvme"}})
    pod["securityContext"].update(seccompProfile={"type": "Unconfined"}, runAsUser=0)
    assert scc_admits(scc, pod, NAMESPACE_ANNOTATIONS) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000680000/10000", (1000680000, 1000689999)),
        ("1000/1", (1000, 1000)),
        ("1000-1999", (1000, 1999)),
        (" 5 - 7 ", (5, 7)),
        ("1000/0", None),
        ("2000-1000", None),
        ("1000", None),
        ("", None),
        (None, None),
        ("a/b", None),
    ],
)
def test_id_ranges_in_both_forms(text, expected):
    assert parse_id_range(text) == expected

"""Every filter, driven with random and adversarial arguments.

A filter either returns a defined result or raises AnsibleFilterError with a message that
names what was wrong; it never lets another exception out (Jinja would show a bare
TypeError or AttributeError), and it never changes its input. The ``*_problems`` filters
(and the few helpers that accept anything) always return.

The filters are found by importing every plugin in plugins/filter and calling its
``FilterModule().filters()``: a filter without an entry in CASES fails the suite.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import math
import pathlib

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from bad_input_values import SETTINGS, TALLY, anything, like, names_one_of, replace_one, text
from hypothesis import example, given
from hypothesis import strategies as st

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE = "ansible_collections.gpuops.training.plugins.filter."

# Kinds of filter: a builder returns or raises AnsibleFilterError; problems always returns a
# list of messages; total always returns.
BUILDER, PROBLEMS, TOTAL = "builder", "problems", "total"


def discovered_filters():
    found = {}
    for path in sorted((REPO_ROOT / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(PACKAGE + path.stem)
        for name, function in module.FilterModule().filters().items():
            found[name] = function
    return found


FILTERS = discovered_filters()


def role_settings(role, drop=()):
    """A role's defaults without the role prefix: settings the role's filters accept."""
    defaults = yaml.safe_load((REPO_ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    prefix = role + "_"
    return {key[len(prefix) :]: value for key, value in defaults.items() if key[len(prefix) :] not in drop}


# --------------------------------------------------------------------------------------
# plausible inputs, each filter's arguments as (args, kwargs)
# --------------------------------------------------------------------------------------

NAMESPACE_OBJ = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training"}}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "op", "namespace": "training"},
    "spec": {},
}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
}
WEBHOOK = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "hook"},
}
manifest_object = st.one_of(
    st.sampled_from([NAMESPACE_OBJ, DEPLOYMENT, CRD, WEBHOOK]),
    replace_one(DEPLOYMENT),
    st.just({"kind": "List", "items": [NAMESPACE_OBJ, DEPLOYMENT]}),
    st.none(),
)
# The objects as a list, or as their JSON text (the form k8s_manifest_json returns).
documents = like(st.lists(manifest_object, max_size=5), st.lists(manifest_object, max_size=5).map(json.dumps))
manifest_text = like(
    st.lists(manifest_object, max_size=4).map(yaml.safe_dump_all),
    st.sampled_from(["", "---\n", "kind: [", "!!binary aGk=", "a: !!set {b: null}", "- 1e+20\n- .nan\n"]),
    text,
)
k8s_result = like(
    st.sampled_from(
        [
            {"changed": True},
            {"changed": False},
            {"error": {"msg": 'Failed to apply object: b\'{"kind":"Status","message":"denied"}\''}},
            {"error": "boom"},
        ]
    )
)
k8s_results = like(st.lists(k8s_result, max_size=5))
string_list = like(st.lists(text, max_size=3))

FILE = {"path": "/etc/crio/crio.conf.d/99-ulimits.conf", "content": "memlock=-1:-1\n", "mode": "0644"}
files = like(st.lists(like(replace_one(FILE), st.just(FILE)), max_size=3))
MACHINECONFIG = {
    "apiVersion": "machineconfiguration.openshift.io/v1",
    "kind": "MachineConfig",
    "metadata": {"name": "99-worker", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
    "spec": {"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": []}}},
}
ROCE = {
    "name": "roce",
    "type": "macvlan",
    "master": "ens1f0",
    "ipam": {"type": "host-local", "subnet": "192.168.10.0/24"},
}
attachment = like(replace_one(ROCE), replace_one(dict(ROCE, ipam={"type": "whereabouts"})))
NETWORK_SETTINGS = role_settings(
    "secondary_networks",
    drop=(
        "state",
        "multus_manifest",
        "multus_namespace",
        "multus_daemonset",
        "multus_wait",
        "multus_wait_timeout",
        "field_manager",
        "kubeconfig",
        "context",
    ),
)
network_settings = like(
    replace_one(NETWORK_SETTINGS),
    replace_one(dict(NETWORK_SETTINGS, attachments=[ROCE])),
    replace_one(dict(NETWORK_SETTINGS, attachments=[ROCE]), st.lists(anything, max_size=2)),
)
NAMESPACE_SETTINGS = role_settings(
    "training_namespace", drop=("field_manager", "delete_timeout", "kubeconfig", "context")
)
namespace_settings = like(replace_one(NAMESPACE_SETTINGS))
# What a k8s_info loop over image pull Secret names registers.
PULL_SECRET_FOUND = {
    "item": "regcred",
    "resources": [{"metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson"}],
}
pull_secret_results = like(
    st.lists(
        like(
            replace_one(PULL_SECRET_FOUND),
            st.sampled_from(
                [PULL_SECRET_FOUND, {"item": "nope", "resources": []}, {"item": "x", "skipped": True}]
            ),
        ),
        max_size=3,
    )
)
# The trainer ServiceAccount as training_namespace_objects builds it, and as a k8s_info read
# returns it once OpenShift's controller appended its entry.
ACCOUNT_OBJECT = {
    "apiVersion": "v1",
    "kind": "ServiceAccount",
    "metadata": {"name": "trainer", "namespace": "training", "labels": {"app.kubernetes.io/managed-by": "x"}},
    "imagePullSecrets": [{"name": "other"}],
}
ACCOUNT_READ = {
    "apiVersion": "v1",
    "kind": "ServiceAccount",
    "metadata": {
        "name": "trainer",
        "namespace": "training",
        "resourceVersion": "42",
        "annotations": {
            "gpuops.training/image-pull-secrets": "regcred",
            "openshift.io/internal-registry-pull-secret-ref": "trainer-dockercfg-abcde",
        },
        "managedFields": [
            {
                "manager": "openshift-controller-manager",
                "operation": "Update",
                "fieldsV1": {"f:imagePullSecrets": {}},
            }
        ],
    },
    "imagePullSecrets": [{"name": "regcred"}, {"name": "trainer-dockercfg-abcde"}],
}
namespace_documents = like(
    st.lists(
        st.one_of(
            st.just(NAMESPACE_OBJ),
            st.just(ACCOUNT_OBJECT),
            replace_one(ACCOUNT_OBJECT),
            st.builds(
                lambda metadata: dict(ACCOUNT_OBJECT, metadata=metadata),
                replace_one(ACCOUNT_OBJECT["metadata"]),
            ),
        ),
        max_size=3,
    )
)
account_reads = like(
    st.lists(
        like(
            st.just(ACCOUNT_READ),
            replace_one(ACCOUNT_READ),
            st.builds(
                lambda metadata: dict(ACCOUNT_READ, metadata=metadata), replace_one(ACCOUNT_READ["metadata"])
            ),
            st.builds(
                lambda annotations: dict(
                    ACCOUNT_READ, metadata=dict(ACCOUNT_READ["metadata"], annotations=annotations)
                ),
                replace_one(ACCOUNT_READ["metadata"]["annotations"]),
            ),
            st.builds(
                lambda entry: dict(
                    ACCOUNT_READ, metadata=dict(ACCOUNT_READ["metadata"], managedFields=[entry])
                ),
                replace_one(ACCOUNT_READ["metadata"]["managedFields"][0]),
            ),
            st.builds(
                lambda entry: dict(ACCOUNT_READ, imagePullSecrets=[{"name": "regcred"}, entry]),
                replace_one({"name": "trainer-dockercfg-abcde"}),
            ),
        ),
        max_size=2,
    ),
    st.just(ACCOUNT_READ),
)
WORKLOAD = {
    "launcher": "pytorchjob",
    "run_id": "rn-1",
    "image": "registry.example/trainer:1",
    "epochs": 1,
}
MPIJOB = dict(WORKLOAD, launcher="mpijob", mpirun_argv=["mpirun", "-np", "2", "all_reduce_perf"])
workload_settings = like(
    replace_one(WORKLOAD),
    replace_one(dict(WORKLOAD, launcher="indexed_job")),
    replace_one(dict(WORKLOAD, launcher="trainjob")),
    replace_one(dict(WORKLOAD, launcher="runai")),
    replace_one(MPIJOB),
    replace_one(dict(WORKLOAD, fabric="roce", network=["rdma-net"])),
)
HOST_RUN = {"launcher": "local", "run_id": "rn-1", "python": "/usr/bin/python3", "epochs": 1}
host_run_settings = like(
    replace_one(HOST_RUN),
    replace_one(dict(HOST_RUN, launcher="ssh")),
    replace_one(dict(HOST_RUN, launcher="ssh", dataset="coco", dataset_path="/data")),
)
# The prefixes the roles pass, and two that are not one.
prefixes = st.sampled_from(["training_job_", "nccl_tests_", "", 5])
ulimit_entries = like(
    st.lists(
        st.one_of(
            st.sampled_from(["memlock=-1:-1", "nofile=65536:65536", "stack=8192:-1", "memlock=1:0"]),
            text,
        ),
        max_size=4,
    )
)
pam_entries = like(
    st.lists(
        like(
            st.sampled_from(
                [
                    {"domain": "*", "type": "-", "item": "memlock", "value": "unlimited"},
                    {"domain": "@training", "type": "soft", "item": "nofile", "value": 65536},
                ]
            ),
            st.sampled_from(["* - memlock unlimited", "memlock=-1:-1"]),
        ),
        max_size=3,
    )
)
RUN = {
    "run_id": "r1",
    "run_dir": "/runs/r1",
    "world_size": 2,
    "rc": 0,
    "timed_out": False,
    "log_paths": ["/runs/r1/logs/*.log"],
}
TRAINING = {"ok": True, "failures": [], "ranks": [], "epochs": [], "loss": {}, "backend": "gloo"}
# A cluster run with a straggler: its pod from the log's name, its node from pod_nodes.
CLUSTER_RUN = dict(RUN, launcher="pytorchjob", pod_nodes={"rn-worker-1": "gpu-b"})
STRAGGLING = dict(
    TRAINING,
    ranks=[{"rank": 0, "host": "rn-worker-0", "node": "gpu-a"}, {"rank": 1, "host": "rn-worker-1"}],
    straggler_percent=20,
    stragglers=[{"rank": 1, "compute_images_per_s": 2.5, "peer_median": 4.0, "percent_below": 37.5,
                 "source": "/runs/r1/logs/rn-worker-1.log"}],
)  # fmt: skip
# A CUDA rank whose GPU device peaked within the margin of its total (training_log_info's shape).
GPU_MEMORY = {
    "samples": 3,
    "cgroup_limit_bytes": None,
    "device_total_bytes": 80 << 30,
    "quantities": {
        "device_used": {"samples": 3, "median_bytes": 70 << 30, "peak_bytes": 78 << 30, "peak_phase": "train",
                        "peak_epoch": 0, "peak_step": 2, "epoch_min_bytes": [], "growth_mib_per_epoch": None},
        "cuda_reserved": {"samples": 3, "median_bytes": 60 << 30, "peak_bytes": 61 << 30,
                          "peak_phase": "train"},
    },
}  # fmt: skip
GPU_RANK = {"rank": 0, "host": "rn-worker-0", "node": "gpu-a", "memory": GPU_MEMORY,
            "sources": ["/runs/r1/logs/rn-worker-0.log"],
            "last_memory": {"source": "/runs/r1/logs/rn-worker-0.log"}}  # fmt: skip
GPU_TRAINING = dict(TRAINING, backend="nccl", ranks=[GPU_RANK])
gpu_training = st.one_of(
    replace_one(GPU_TRAINING),
    st.builds(lambda rank: dict(GPU_TRAINING, ranks=[rank]), replace_one(GPU_RANK)),
    st.builds(
        lambda memory: dict(GPU_TRAINING, ranks=[dict(GPU_RANK, memory=memory)]), replace_one(GPU_MEMORY)
    ),
    st.builds(
        lambda device: dict(
            GPU_TRAINING, ranks=[dict(GPU_RANK, memory=dict(GPU_MEMORY, quantities={"device_used": device}))]
        ),
        replace_one(GPU_MEMORY["quantities"]["device_used"]),
    ),
)
# The run_summary filter's memory options of the GPU's headroom (training_verify's gpu_memory variables).
gpu_memory_options = like(replace_one({"gpu_margin_percent": 5, "gpu_margin_fails": False}))
NCCL = {"ok": True, "failures": [], "nccl_used": False, "ranks": []}
NCCL_TESTS = {
    "launcher": "ssh",
    "collective": "all_reduce",
    "hosts": ["10.1.0.11", "10.1.0.12"],
    "gpus_per_node": 8,
    "gpus_per_process": 1,
    "env": {"NCCL_IB_HCA": "mlx5"},
}
nccl_tests_settings = like(
    replace_one(NCCL_TESTS),
    replace_one(dict(NCCL_TESTS, launcher="local")),
    replace_one(dict(NCCL_TESTS, launcher="mpijob", nnodes=2)),
)
quantity = like(st.sampled_from(["11Gi", "12000Mi", 1024, "1.5Gi", "0", "-1Gi", "12GB"]), st.integers())
small_int = like(st.integers(min_value=-2, max_value=64))
granularity = like(st.sampled_from(["Ki", "Mi", "Gi"]))


def call(*positional, **keywords):
    """A strategy of (args, kwargs) from a strategy per argument."""
    return st.tuples(st.tuples(*positional), st.fixed_dictionaries({}, optional=keywords))


# An earlier run's summary as memory_from_run reads it (tests/unit/fixtures/summaries).
SUMMARY = json.loads(
    (REPO_ROOT / "tests" / "unit" / "fixtures" / "summaries" / "workers-summary.json").read_text()
)
summaries = like(
    replace_one(SUMMARY),
    st.builds(lambda memory: dict(SUMMARY, memory=memory), replace_one(SUMMARY["memory"])),
    st.builds(
        lambda recommendation: dict(SUMMARY, memory=dict(SUMMARY["memory"], recommendation=recommendation)),
        replace_one(SUMMARY["memory"]["recommendation"]),
    ),
    st.just(json.dumps(SUMMARY)),
    text,
)

# A health pass's nodes and Kubernetes nodes, as the health gate's filters read them.
GATE_ITEMS = [
    {"node": "a", "result": {"verdict": "healthy", "findings": [], "not_run": []}, "error": None},
    {"node": "b", "result": None, "error": "unreachable"},
]
GATE_NODE = {
    "metadata": {"name": "a", "labels": {"pool": "a"}},
    "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
}
GATE_SETTINGS = {
    "node_selector": {"pool": "a"},
    "tolerations": [],
    "gpu_toleration": True,
    "gpus_per_node": 1,
    "gpu_resource": "nvidia.com/gpu",
}
gate_items = like(st.just(GATE_ITEMS), replace_one(GATE_ITEMS[0]).map(lambda item: [item]))
gate_nodes = like(st.just([GATE_NODE]), replace_one(GATE_NODE).map(lambda node: [node]))

# An isolate run's summary as history_isolate_records reads it.
ISOLATE_SUMMARY = {
    "tests": [
        {"id": "s1", "nodes": ["a"], "busbw": 480.0},
        {"id": "p1", "nodes": ["a", "b"], "busbw": 190.0},
    ]
}
isolate_summaries = like(
    st.just(ISOLATE_SUMMARY),
    replace_one(ISOLATE_SUMMARY),
    replace_one(ISOLATE_SUMMARY["tests"][1]).map(lambda test: {"tests": [test]}),
)

# What training_log_info reads, as history_training_records takes it.
TRAINING_METRICS = {
    "workload": "retinanet_resnet50_fpn, 2 images, 800-1333 px, fp32, cuda",
    "ranks": [{"rank": 0, "local_rank": 0, "node": "a", "status": "ok", "compute_images_per_s": 8.0}],
}
training_metrics = like(
    st.just(TRAINING_METRICS),
    replace_one(TRAINING_METRICS),
    replace_one(TRAINING_METRICS["ranks"][0]).map(lambda rank: dict(TRAINING_METRICS, ranks=[rank])),
)

# A health pass's nodes, as history_health_records takes them.
HEALTH_NODES = [{"node": "a", "result": {"verdict": "healthy", "findings": [], "not_run": []}}]
health_nodes = like(
    st.just(HEALTH_NODES), replace_one(HEALTH_NODES), replace_one(HEALTH_NODES[0]).map(lambda n: [n])
)

# A measure run's summary, as history_measure_records reads it.
MEASURE_SUMMARY = {"collectives": [{"collective": "all_reduce", "ok": True, "peak_busbw_gbyte_s": 420.5}]}
measure_summaries = like(
    st.just(MEASURE_SUMMARY),
    replace_one(MEASURE_SUMMARY),
    replace_one(MEASURE_SUMMARY["collectives"][0]).map(lambda row: {"collectives": [row]}),
)

# name: (kind, (args, kwargs) strategy, words an error message must name one of)
CASES = {
    "history_measure_records": (
        BUILDER,
        call(measure_summaries, like(st.just(["gpu-a"])), run_id=text, gpus_per_node=small_int),
        ("history_measure_records",),
    ),
    "history_health_records": (
        BUILDER,
        call(health_nodes, run_id=text, checks=like(st.just(["nvidia_smi"]))),
        ("history_health_records",),
    ),
    "history_training_records": (
        BUILDER,
        call(training_metrics, run_id=text),
        ("history_training_records",),
    ),
    "history_isolate_records": (
        BUILDER,
        call(isolate_summaries, like(st.just("all_reduce")), run_id=text, gpus_per_node=small_int),
        ("history_isolate_records",),
    ),
    "health_gate": (
        BUILDER,
        call(
            gate_items,
            like(st.just(["a", "b"])),
            classes=like(st.just(["isolate"])),
            needed=like(st.sampled_from([1, 2])),
            quarantine=like(st.just({"nodes": [{"node": "a", "action": "quarantine"}]})),
            affinity=like(st.just({})),
            more_checks=like(st.just({"a": {"outcome": "not_run", "check": "nccl_tests", "reason": "r"}})),
        ),
        ("health_gate",),
    ),
    "health_gate_candidates": (
        BUILDER,
        call(gate_nodes, like(st.just(GATE_SETTINGS), replace_one(GATE_SETTINGS))),
        ("health_gate_candidates",),
    ),
    "k8s_manifest_problems": (
        PROBLEMS,
        call(documents, required=string_list, what=like(st.just("the manifests"))),
        (),
    ),
    "k8s_manifest_json": (
        BUILDER,
        call(manifest_text, like(st.dictionaries(text, text, max_size=2))),
        ("k8s_manifest_json", "manifests", "labels", "objects"),
    ),
    "k8s_objects": (BUILDER, call(documents), ("k8s_objects", "documents")),
    "k8s_apply_order": (BUILDER, call(documents), ("k8s_apply_order", "documents")),
    "k8s_delete_order": (
        BUILDER,
        call(documents, keep_kinds=string_list),
        ("k8s_delete_order", "documents", "keep_kinds"),
    ),
    "k8s_with_labels": (
        BUILDER,
        call(documents, like(st.dictionaries(text, text, max_size=2))),
        ("k8s_with_labels", "documents", "labels"),
    ),
    "k8s_names": (
        BUILDER,
        call(documents, like(st.sampled_from(["Namespace", "Deployment"]))),
        ("k8s_names",),
    ),
    "k8s_split_by_namespaces": (
        BUILDER,
        call(documents, string_list),
        ("k8s_split_by_namespaces", "documents", "existing_namespaces"),
    ),
    "k8s_rejected": (BUILDER, call(documents, k8s_results), ("k8s_rejected", "documents", "results")),
    "k8s_changed": (BUILDER, call(documents, k8s_results), ("k8s_changed", "documents", "results")),
    "k8s_object_ref": (TOTAL, call(like(manifest_object)), ()),
    "k8s_object_refs": (BUILDER, call(documents), ("k8s_object_refs", "documents")),
    "k8s_api_error_message": (TOTAL, call(like(k8s_result.map(str))), ()),
    "machineconfig": (
        BUILDER,
        call(
            like(st.just("99-worker-crio-ulimits")),
            like(st.just("worker")),
            files,
            version=like(st.sampled_from(["3.2.0", "3.4.0", "2.2.0"])),
            labels=like(st.dictionaries(text, text, max_size=2)),
        ),
        ("MachineConfig", "files", "version", "labels", "pool", "name"),
    ),
    "ignition_problems": (
        PROBLEMS,
        call(like(replace_one(MACHINECONFIG), replace_one(MACHINECONFIG["spec"]))),
        (),
    ),
    "ignition_data_url": (BUILDER, call(like(text)), ("content", "ignition_data_url")),
    "ignition_files_problems": (PROBLEMS, call(files, version=like(st.just("3.2.0"))), ()),
    "network_attachment_definition": (
        BUILDER,
        call(
            attachment,
            like(st.just("training")),
            cni_version=like(st.just("1.0.0")),
            labels=like(st.dictionaries(text, text, max_size=2)),
        ),
        ("attachment", "namespace", "cni_version", "labels"),
    ),
    "cni_config": (
        BUILDER,
        call(attachment, cni_version=like(st.just("1.0.0"))),
        ("attachment", "cni_version"),
    ),
    "secondary_network_problems": (PROBLEMS, call(network_settings), ()),
    "secondary_network_objects": (BUILDER, call(network_settings), ("secondary_networks",)),
    "run_summary": (
        BUILDER,
        call(
            like(replace_one(RUN), replace_one(CLUSTER_RUN)),
            like(replace_one(TRAINING), replace_one(STRAGGLING), gpu_training),
            like(replace_one(NCCL)),
            memory=gpu_memory_options,
            stragglers_fail=like(st.booleans()),
        ),
        ("run_summary",),
    ),
    "shm_size": (
        BUILDER,
        call(
            small_int,
            small_int,
            quantity,
            gpus=small_int,
            prefetch_factor=small_int,
            nccl_per_gpu=quantity,
            margin_percent=like(st.floats()),
            granularity=granularity,
        ),
        ("shm_size",),
    ),
    "memory_sizing": (
        BUILDER,
        call(
            like(st.lists(quantity, max_size=4)),
            margin_percent=like(st.floats()),
            guaranteed=like(st.booleans()),
            granularity=granularity,
        ),
        ("memory_sizing",),
    ),
    "memory_from_run": (
        BUILDER,
        call(summaries, like(st.just("retinanet-20261122T050000Z")), memory=quantity, shm_size=quantity),
        ("training_job_memory_from_run", "memory_from_run"),
    ),
    "training_operator_init_container": (
        BUILDER,
        call(documents, cpu=quantity, memory=quantity),
        ("training_operator_init_container",),
    ),
    "training_operator_init_container_problems": (
        PROBLEMS,
        call(like(st.dictionaries(st.sampled_from(["cpu", "memory", "gpu"]), quantity, max_size=3)), text),
        (),
    ),
    "training_namespace_objects": (BUILDER, call(namespace_settings), ("training_namespace",)),
    "training_namespace_problems": (PROBLEMS, call(namespace_settings), ()),
    "training_namespace_scc_objects": (BUILDER, call(namespace_settings), ("training_namespace",)),
    "image_pull_secret_problems": (PROBLEMS, call(pull_secret_results, text, text), ()),
    "training_namespace_pull_secrets": (
        BUILDER,
        call(namespace_documents, account_reads, like(st.just("gpuops-training"))),
        ("training_namespace_pull_secrets",),
    ),
    "training_workload": (
        BUILDER,
        call(workload_settings, prefix=prefixes),
        ("training_job", "nccl_tests", "prefix"),
    ),
    "training_workload_problems": (
        PROBLEMS,
        call(like(workload_settings, host_run_settings), prefix=prefixes),
        (),
    ),
    "training_setting_names": (
        BUILDER,
        call(
            like(st.lists(like(st.sampled_from(["training_job_cpu", "nccl_tests_cpu", "x"])), max_size=4)),
            prefix=prefixes,
        ),
        ("names", "prefix"),
    ),
    "torchrun_argv": (
        BUILDER,
        call(
            like(host_run_settings, workload_settings),
            prefix=prefixes,
            endpoint=like(st.just("10.0.0.1:29400")),
            nnodes=like(st.sampled_from([2, "1:4"])),
            node_rank=like(st.sampled_from([0, 1])),
            local_addr=like(st.just("10.0.0.2")),
            log_dir=like(st.just("/runs/rn-1/logs")),
            output_dir=like(st.just("/runs/rn-1/output")),
        ),
        (
            "training_job",
            "nccl_tests",
            "prefix",
            "output_dir",
            "endpoint",
            "nnodes",
            "node_rank",
            "local_addr",
            "log_dir",
        ),
    ),
    "nccl_tests_argv": (BUILDER, call(nccl_tests_settings), ("nccl_tests", "hosts")),
    "nccl_tests_argv_problems": (PROBLEMS, call(nccl_tests_settings), ()),
    "validate_ulimits": (BUILDER, call(ulimit_entries), ("ulimit", "ulimits", "entries")),
    "ulimit_problems": (PROBLEMS, call(ulimit_entries), ()),
    "crio_ulimits_toml": (BUILDER, call(ulimit_entries), ("ulimit", "ulimits", "entries")),
    "systemd_limits": (BUILDER, call(ulimit_entries), ("ulimit", "ulimits", "entries")),
    "pam_limit_problems": (PROBLEMS, call(pam_entries), ()),
    "pam_limits_conf": (BUILDER, call(pam_entries), ("limit", "limits", "entries", "entry")),
    "pod_log_merge": (BUILDER, call(like(text), like(text), previous=like(text)), ("pod_log_merge",)),
    "pod_log_past_init": (BUILDER, call(like(text)), ("pod_log_past_init",)),
}


def test_every_filter_has_a_case():
    assert sorted(set(FILTERS) - set(CASES)) == [], "filters without a bad-input case in CASES"
    assert sorted(set(CASES) - set(FILTERS)) == [], "CASES for filters that no longer exist"


def _snapshot(value):
    """A comparable picture of a value, NaN included (NaN != NaN)."""
    return repr(value)


def check_filter(name, arguments):
    kind, _strategy, words = CASES[name]
    args, kwargs = arguments
    before = _snapshot((args, kwargs))
    originals = copy.deepcopy((args, kwargs))
    TALLY["filter calls"] += 1
    try:
        result = FILTERS[name](*args, **kwargs)
    except AnsibleFilterError as error:
        message = str(error.message if hasattr(error, "message") else error)
        assert kind == BUILDER, "%s must not raise, raised %r" % (name, message)
        assert message.strip(), "%s raised an empty message" % name
        assert "Traceback" not in message
        assert names_one_of(message, words), "%s: the message names none of %s: %s" % (
            name,
            words,
            message[:300],
        )
        TALLY["filter calls with a clean error"] += 1
    else:
        if kind == PROBLEMS:
            assert isinstance(result, list) and all(isinstance(line, str) for line in result), result
        TALLY["filter calls accepted"] += 1
    assert _snapshot((args, kwargs)) == before, "%s changed its input" % name
    assert _snapshot(originals) == before


# What the suite found, each once a bare Python exception (TypeError, AttributeError,
# decimal.InvalidOperation) out of the filter; replayed by name.
REGRESSIONS = [
    ("k8s_manifest_problems", (([NAMESPACE_OBJ],), {"required": 5})),
    ("k8s_manifest_problems", (([NAMESPACE_OBJ],), {"required": [None]})),
    ("k8s_manifest_problems", ((7,), {})),
    ("k8s_apply_order", ((7,), {})),
    ("k8s_delete_order", ((["not an object"],), {})),
    ("k8s_delete_order", (([NAMESPACE_OBJ],), {"keep_kinds": 5})),
    ("k8s_with_labels", (([NAMESPACE_OBJ], [["a"]]), {})),
    ("k8s_split_by_namespaces", (([NAMESPACE_OBJ, "x"], [[1]]), {})),
    ("k8s_split_by_namespaces", (([dict(DEPLOYMENT, metadata={"name": "a", "namespace": ["x"]})], []), {})),
    ("k8s_rejected", (([NAMESPACE_OBJ], 5), {})),
    ("k8s_object_ref", ((dict(NAMESPACE_OBJ, metadata=True),), {})),
    ("ignition_problems", ((dict(MACHINECONFIG, metadata=1),), {})),
    ("ignition_problems", ((dict(MACHINECONFIG, spec=[]),), {})),
    ("machineconfig", (("99-x", "worker", [FILE]), {"labels": [1, 2]})),
    ("network_attachment_definition", ((ROCE, "training"), {"labels": [1]})),
    ("secondary_network_problems", ((dict(NETWORK_SETTINGS, attachments=[dict(ROCE, namespace=[1])]),), {})),
    ("run_summary", ((RUN, dict(TRAINING, ranks=["r"]), NCCL), {})),
    ("run_summary", ((dict(RUN, log_paths=3), TRAINING, NCCL), {})),
    ("shm_size", ((2, 2, math.nan), {})),
    ("memory_sizing", (([math.inf],), {})),
    ("memory_sizing", ((["1e99999999999"],), {})),
    ("training_workload", (([],), {})),
    ("training_workload_problems", (("pytorchjob",), {})),
    ("run_summary", ((RUN, GPU_TRAINING, NCCL), {"memory": {"gpu_margin_percent": 10**400}})),
]


@pytest.mark.parametrize("name", sorted(CASES))
def test_filter_returns_or_fails_naming_the_argument(name):
    def run(arguments):
        check_filter(name, arguments)

    for regression, arguments in REGRESSIONS:
        if regression == name:
            run = example(arguments)(run)
    SETTINGS(given(CASES[name][1])(run))()


@SETTINGS
@given(st.sampled_from(sorted(CASES)), anything)
@example("training_workload", None)
def test_any_single_input_is_handled(name, value):
    """Every filter with anything at all as its input and defaults for the rest."""
    kind, _strategy, _words = CASES[name]
    required = [
        parameter
        for parameter in inspect.signature(FILTERS[name]).parameters.values()
        if parameter.default is parameter.empty
    ]
    check_filter(name, ((value,) * len(required), {}))

"""Tests of the Kubernetes test harness itself: a real apiserver with the
upstream CRDs, kwok-simulated GPU nodes, and the real Kubeflow Training
Operator turning PyTorchJobs into pods."""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from k8s_harness import (
    ALL_CRD_NAMES,
    DEFAULT_PORTS,
    START_ORDER,
    Harness,
    HarnessConfig,
    HarnessError,
    to_cri_log,
)
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.slow

HARNESS_SCRIPT = Path(__file__).resolve().parents[2] / "harness" / "k8s_harness.py"
# No registry host: kwok never pulls images.
TEST_IMAGE = "gpuops/trainer:test"
NODES = ["gpu-node-0", "gpu-node-1"]


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.2):
    """Poll until condition() is truthy and return its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def condition_true(obj: dict, condition_type: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == condition_type and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def api(k8s_cluster):
    api_client = k8s_cluster.api_client()
    yield api_client
    api_client.close()


def pytorch_job(name: str, worker_annotations: dict | None = None, master_annotations: dict | None = None):
    def replica(annotations: dict | None) -> dict:
        return {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": TEST_IMAGE,
                            "command": ["torchrun", "train.py"],
                            "resources": {
                                "limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
                            },
                        }
                    ]
                },
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"backoffLimit": 0},
            "pytorchReplicaSpecs": {
                "Master": replica(master_annotations),
                "Worker": replica(worker_annotations),
            },
        },
    }


def test_simulated_gpu_nodes_are_ready_with_gpu_and_rdma_capacity(api):
    nodes = client.CoreV1Api(api).list_node(label_selector="nvidia.com/gpu.present=true").items
    assert [node.metadata.name for node in nodes] == ["gpu-node-0", "gpu-node-1"]
    for node in nodes:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["rdma/rdma_shared_device_a"] == "63"
        assert "node-role.kubernetes.io/worker" in node.metadata.labels
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True"


def test_the_simulated_nodes_leases_are_renewed_as_kubelets_would(api):
    """Without renewals the node lifecycle controller marks every node NotReady after ~55 s."""
    leases = client.CoordinationV1Api(api)

    def renew_times():
        return {name: leases.read_namespaced_lease(name, "kube-node-lease").spec.renew_time for name in NODES}

    first = renew_times()
    assert all(first.values()), first

    def all_renewed_since_first():
        times = renew_times()
        return times if all(times[name] > first[name] for name in NODES) else None

    wait_for(all_renewed_since_first, 60, "every node Lease to be renewed again", interval=1)
    for name in NODES:
        assert leases.read_namespaced_lease(name, "kube-node-lease").spec.holder_identity == name


def test_scheduler_really_counts_gpus(api, k8s_namespace):
    core = client.CoreV1Api(api)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "too-many-gpus"},
        "spec": {
            "containers": [
                {"name": "main", "image": TEST_IMAGE, "resources": {"limits": {"nvidia.com/gpu": "9"}}}
            ]
        },
    }
    core.create_namespaced_pod(k8s_namespace, pod)

    def unschedulable():
        status = core.read_namespaced_pod("too-many-gpus", k8s_namespace).status
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable" and "nvidia.com/gpu" in c.message
            for c in status.conditions or []
        )

    wait_for(unschedulable, 30, "the scheduler to report Insufficient nvidia.com/gpu")


def test_all_upstream_crds_are_established(api):
    extensions = client.ApiextensionsV1Api(api)
    for name in ALL_CRD_NAMES:
        crd = extensions.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", name


def test_server_validation_rejects_invalid_machineconfig(api):
    custom = client.CustomObjectsApi(api)
    group, version, plural = "machineconfiguration.openshift.io", "v1", "machineconfigs"

    def machine_config(name: str, kernel_arguments) -> dict:
        return {
            "apiVersion": f"{group}/{version}",
            "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "worker"}},
            "spec": {
                "config": {"ignition": {"version": "3.4.0"}},
                "kernelArguments": kernel_arguments,
            },
        }

    with pytest.raises(ApiException) as rejected:
        custom.create_cluster_custom_object(
            group, version, plural, machine_config("harness-invalid", "iommu=pt"), dry_run="All"
        )
    assert rejected.value.status == 422
    assert "kernelArguments" in rejected.value.body

    # The same object with a well-typed field is accepted: the rejection was the type.
    accepted = custom.create_cluster_custom_object(
        group, version, plural, machine_config("harness-valid", ["iommu=pt"]), dry_run="All"
    )
    assert accepted["spec"]["kernelArguments"] == ["iommu=pt"]


def test_pytorchjob_becomes_pods_and_services_and_succeeds(api, k8s_cluster, k8s_namespace):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    # A longer run so the test can observe the pods Running.
    slow = {"gpuops.test/run-duration": "3s"}
    custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", k8s_namespace, "pytorchjobs", pytorch_job("ddp", slow, slow)
    )
    selector = "training.kubeflow.org/job-name=ddp"

    def pods_running():
        pods = core.list_namespaced_pod(k8s_namespace, label_selector=selector).items
        return len(pods) == 2 and all(pod.status.phase == "Running" for pod in pods) and pods

    pods = wait_for(pods_running, 60, "the master and worker pods to run")
    by_type = {pod.metadata.labels["training.kubeflow.org/replica-type"]: pod for pod in pods}
    assert set(by_type) == {"master", "worker"}
    assert by_type["master"].spec.node_name != by_type["worker"].spec.node_name  # 8 GPUs each: one per node
    env = {e.name: e.value for e in by_type["worker"].spec.containers[0].env}
    assert env["WORLD_SIZE"] == "2" and env["RANK"] == "1"
    assert env["MASTER_ADDR"] == "ddp-master-0"
    services = core.list_namespaced_service(k8s_namespace, label_selector=selector).items
    assert "ddp-master-0" in {svc.metadata.name for svc in services}

    def job_succeeded():
        job = custom.get_namespaced_custom_object("kubeflow.org", "v1", k8s_namespace, "pytorchjobs", "ddp")
        return condition_true(job, "Succeeded")

    wait_for(job_succeeded, 60, "the PyTorchJob to report Succeeded")
    master = core.read_namespaced_pod("ddp-master-0", k8s_namespace)
    assert master.status.phase == "Succeeded"  # a PyTorchJob succeeds with its master

    def all_pods_succeeded():
        pods = core.list_namespaced_pod(k8s_namespace, label_selector=selector).items
        return {pod.status.phase for pod in pods} == {"Succeeded"}

    wait_for(all_pods_succeeded, 30, "the worker to finish too")


def test_pytorchjob_fails_when_a_pod_fails(api, k8s_namespace):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    job = pytorch_job(
        "ddp-broken",
        worker_annotations={"gpuops.test/fail": "true", "gpuops.test/run-duration": "1s"},
        master_annotations={"gpuops.test/run-duration": "60s"},
    )
    custom.create_namespaced_custom_object("kubeflow.org", "v1", k8s_namespace, "pytorchjobs", job)

    def job_failed():
        obj = custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", k8s_namespace, "pytorchjobs", "ddp-broken"
        )
        return condition_true(obj, "Failed") and obj

    failed = wait_for(job_failed, 60, "the PyTorchJob to report Failed")
    assert not condition_true(failed, "Succeeded")
    message = next(c["message"] for c in failed["status"]["conditions"] if c["type"] == "Failed")
    assert "backoff limit" in message
    # The operator deletes the job's pods on failure; kwok's event remains.
    events = core.list_namespaced_event(
        k8s_namespace, field_selector="involvedObject.name=ddp-broken-worker-0"
    ).items
    assert any(e.reason == "Failed" and "gpuops.test/fail" in e.message for e in events)


def test_mpijob_succeeds_when_its_launcher_completes(api, k8s_namespace):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)

    def replica(replicas: int, name: str, gpus: str) -> dict:
        container = {"name": name, "image": TEST_IMAGE, "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": "mpi"},
        "spec": {
            "slotsPerWorker": 8,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {"Launcher": replica(1, "launcher", "0"), "Worker": replica(2, "worker", "8")},
        },
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", k8s_namespace, "mpijobs", job)

    def job_succeeded():
        obj = custom.get_namespaced_custom_object("kubeflow.org", "v1", k8s_namespace, "mpijobs", "mpi")
        return condition_true(obj, "Succeeded")

    wait_for(job_succeeded, 60, "the MPIJob to report Succeeded")
    launcher = core.read_namespaced_pod("mpi-launcher", k8s_namespace)
    assert launcher.status.phase == "Succeeded"


def test_indexed_job_runs_to_completion(api, k8s_namespace):
    batch = client.BatchV1Api(api)
    core = client.CoreV1Api(api)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 3,
            "parallelism": 3,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"gpuops.test/run-duration": "1s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": TEST_IMAGE,
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }
    batch.create_namespaced_job(k8s_namespace, job)

    def complete():
        status = batch.read_namespaced_job("indexed", k8s_namespace).status
        return any(c.type == "Complete" and c.status == "True" for c in status.conditions or []) and status

    status = wait_for(complete, 60, "the Indexed Job to complete")
    assert status.succeeded == 3
    assert status.completed_indexes == "0-2"
    pods = core.list_namespaced_pod(k8s_namespace, label_selector="job-name=indexed").items
    indexes = sorted(pod.metadata.annotations["batch.kubernetes.io/job-completion-index"] for pod in pods)
    assert indexes == ["0", "1", "2"]


def test_pod_logs_come_from_the_chosen_file(api, k8s_cluster, k8s_namespace, tmp_path: Path):
    core = client.CoreV1Api(api)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer"},
        "spec": {
            "containers": [
                {"name": "pytorch", "image": TEST_IMAGE},
                {"name": "metrics", "image": TEST_IMAGE},
            ]
        },
    }
    core.create_namespaced_pod(k8s_namespace, pod)
    nccl_log = (
        "NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\nNCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n"
    )
    k8s_cluster.serve_pod_log(k8s_namespace, "trainer", nccl_log)
    metrics_file = tmp_path / "metrics.txt"
    metrics_file.write_text("step=1 loss=0.9\nstep=2 loss=0.7\n")
    k8s_cluster.serve_pod_log(k8s_namespace, "trainer", metrics_file, container="metrics")

    wait_for(
        lambda: core.read_namespaced_pod("trainer", k8s_namespace).status.phase == "Running",
        60,
        "the pod to run",
    )
    by_kubectl = k8s_cluster.kubectl("logs", "-n", k8s_namespace, "trainer", "-c", "pytorch").stdout
    assert by_kubectl == nccl_log
    tail = k8s_cluster.kubectl("logs", "-n", k8s_namespace, "trainer", "-c", "metrics", "--tail=1").stdout
    assert tail == "step=2 loss=0.7\n"

    by_client = core.read_namespaced_pod_log("trainer", k8s_namespace, container="pytorch")
    assert by_client == nccl_log
    assert (
        core.read_namespaced_pod_log("trainer", k8s_namespace, container="metrics")
        == metrics_file.read_text()
    )

    # Re-serving replaces the content: kwok re-reads the file on every request.
    k8s_cluster.serve_pod_log(k8s_namespace, "trainer", "replaced\n", container="pytorch")
    assert core.read_namespaced_pod_log("trainer", k8s_namespace, container="pytorch") == "replaced\n"


def test_to_cri_log_converts_plain_text_and_keeps_cri_text():
    start = dt.datetime(2026, 11, 22, 4, 0, tzinfo=dt.UTC)
    converted = to_cri_log("first\nsecond\n", start=start)
    assert converted == (
        "2026-11-22T04:00:00.000000000Z stdout F first\n2026-11-22T04:00:00.001000000Z stdout F second\n"
    )
    assert to_cri_log(converted) == converted
    assert (
        to_cri_log("oops", stream="stderr", start=start) == "2026-11-22T04:00:00.000000000Z stderr F oops\n"
    )


def test_up_again_is_a_no_op_and_status_reports_up(k8s_cluster):
    harness = Harness()
    pids_before = {name: harness._recorded_pid(name) for name in START_ORDER}
    assert Harness().up() is False
    # Nothing was restarted: every component still runs under the same pid.
    assert {name: harness._recorded_pid(name) for name in START_ORDER} == pids_before
    assert all(pids_before.values())
    status = subprocess.run(
        [sys.executable, str(HARNESS_SCRIPT), "status"], capture_output=True, text=True, check=False
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "cluster: UP" in status.stdout
    assert all(f"{name} " in status.stdout for name in START_ORDER)


def test_a_busy_port_is_reported_clearly(tmp_path: Path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy_port = squatter.getsockname()[1]
        config = HarnessConfig.from_environment()
        config.state_dir = tmp_path
        config.ports = {**DEFAULT_PORTS, "kube-apiserver": busy_port}
        with pytest.raises(HarnessError, match=rf"kube-apiserver port {busy_port}.*GPUOPS_HARNESS_PORT_"):
            Harness(config)._check_ports_free()


def test_a_port_offset_moves_every_default_and_a_named_port_still_wins(monkeypatch):
    monkeypatch.setenv("GPUOPS_HARNESS_PORT_OFFSET", "300")
    monkeypatch.setenv("GPUOPS_HARNESS_PORT_KWOK", "23456")
    ports = HarnessConfig.from_environment().ports
    assert ports == {**{name: port + 300 for name, port in DEFAULT_PORTS.items()}, "kwok": 23456}
    monkeypatch.setenv("GPUOPS_HARNESS_PORT_OFFSET", "many")
    with pytest.raises(HarnessError, match="GPUOPS_HARNESS_PORT_OFFSET='many' is not an integer"):
        HarnessConfig.from_environment()

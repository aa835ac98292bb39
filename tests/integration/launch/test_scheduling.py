"""Where the rendered pods are scheduled, on the harness's real kube-apiserver and kube-scheduler.

Simulated GPU nodes of a pool of the test's own are tainted as the GPU Operator and the clouds'
GPU node pools taint them (``nvidia.com/gpu``, NoSchedule), plus a taint of the pool, which
only these tests' pods tolerate (through training_job_tolerations), so that no other test's
pod lands there. The workloads are rendered by the training_workload filter, applied with
server-side apply and created into pods by the real controllers (kube-controller-manager for
Indexed Jobs, the Training Operator for PyTorchJobs); the scheduler's own decisions are read
back: the GPU toleration gets the pods onto the tainted nodes (and without it they stay
Pending on that taint), one pod per node holds even where the GPUs would let two share a node,
the PyTorchJob's schedulingPolicy is stored by the real CRD, and a workload queued to Kueue is
stored with its label and suspended, its pods not created. The training_job role refuses a
LocalQueue that does not exist before it applies anything.
"""

from __future__ import annotations

import dataclasses
import re
import secrets

import pytest
from cluster_helpers import wait_for
from k8s_harness import gpu_node
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gpuops.training.plugins.filter.training_workload import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils import job_status

RENDER = FilterModule().filters()["training_workload"]
IMAGE = "registry.example/gpuops-trainer:test"
POOL_LABEL = "gpuops.test/pool"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# Pods run until the test deletes them (kwok completes batch pods after this long).
RUNNING = {"gpuops.test/run-duration": "600s"}


@dataclasses.dataclass
class GpuPool:
    name: str
    nodes: list[str]

    def placement(self):
        """The settings that put the run on this pool: its label and its own taint."""
        return {
            "node_affinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [self.name]}]}
                    ]
                }
            },
            "tolerations": [
                {"key": POOL_LABEL, "operator": "Equal", "value": self.name, "effect": "NoSchedule"}
            ],
        }


@pytest.fixture
def gpu_pool(k8s_cluster):
    """Two simulated 8-GPU nodes tainted nvidia.com/gpu=present:NoSchedule (and by the pool)."""
    name = "sched-%s" % secrets.token_hex(3)
    nodes = []
    for index in range(2):
        node = gpu_node("%s-%d" % (name, index))
        nodes.append(
            dataclasses.replace(
                node,
                labels=dict(node.labels, **{POOL_LABEL: name}),
                taints=[
                    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    {"key": POOL_LABEL, "value": name, "effect": "NoSchedule"},
                ],
            )
        )
    k8s_cluster.harness.create_nodes(nodes)
    yield GpuPool(name, [node.name for node in nodes])
    k8s_cluster.kubectl("delete", "node", *[node.name for node in nodes], "--wait=false", check=False)


@pytest.fixture
def core(k8s_cluster):
    return client.CoreV1Api(k8s_cluster.api_client())


@pytest.fixture
def custom(k8s_cluster):
    return client.CustomObjectsApi(k8s_cluster.api_client())


def settings(namespace, launcher, **changes):
    base = {
        "launcher": launcher,
        "name": "sched",
        "run_id": "sched-%s" % secrets.token_hex(4),
        "namespace": namespace,
        "image": IMAGE,
        "nnodes": 2,
        # Half a node's GPUs: two pods could share one node, so only the spread keeps them apart.
        "nproc_per_node": 4,
        "gpus_per_node": 4,
        "cpu": "1",
        "memory": "8Gi",
        "shm_size": "1Gi",
        "fabric": "socket",
        "checkpoint_pvc": "",
        "timeout_s": 600,
        "epochs": 1,
        "pod_annotations": dict(RUNNING),
    }
    base.update(changes)
    return base


def launch(k8s_cluster, s):
    workload = RENDER(s)
    k8s_cluster.apply(*workload["manifests"])
    return workload


def pods_of(core, workload):
    return core.list_namespaced_pod(workload["namespace"], label_selector=workload["pod_selector"]).items


def all_placed(core, workload, count):
    """The workload's pods once there are ``count`` and each is bound to a node, else None."""
    pods = pods_of(core, workload)
    return pods if len(pods) == count and all(pod.spec.node_name for pod in pods) else None


def describe(core, workload):
    return [
        (pod.metadata.name, pod.spec.node_name, unschedulable_message(pod)) for pod in pods_of(core, workload)
    ]


def unschedulable_message(pod):
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return condition.message or ""
    return None


@pytest.mark.parametrize("launcher", ["pytorchjob", "indexed_job"])
def test_the_gpu_taint_is_tolerated_and_the_pods_run_on_the_tainted_gpu_nodes(
    k8s_cluster, launch_namespace, gpu_pool, core, launcher
):
    # Without the default toleration the scheduler keeps the pods off the GPU nodes: they tolerate
    # the pool's taint, so nvidia.com/gpu is the taint they do not tolerate.
    refused = launch(
        k8s_cluster, settings(launch_namespace, launcher, gpu_toleration=False, **gpu_pool.placement())
    )
    pending = wait_for(
        lambda: [
            pod for pod in pods_of(core, refused) if "untolerated taint" in (unschedulable_message(pod) or "")
        ],
        timeout=60,
    )
    assert pending, describe(core, refused)
    # The pool's nodes are among those refused for a taint (other nodes of the cluster may carry
    # taints of their own, such as the real node when an earlier test started it).
    tainted = re.search(r"(\d+) node\(s\) had untolerated taint", unschedulable_message(pending[0]))
    assert tainted and int(tainted.group(1)) >= len(gpu_pool.nodes), unschedulable_message(pending[0])
    assert all(not pod.spec.node_name for pod in pods_of(core, refused))

    workload = launch(k8s_cluster, settings(launch_namespace, launcher, **gpu_pool.placement()))
    placed = wait_for(lambda: all_placed(core, workload, 2), timeout=90)
    assert placed, describe(core, workload)
    for pod in placed:
        assert pod.spec.node_name in gpu_pool.nodes
        tolerations = [
            {key: value for key, value in item.to_dict().items() if value is not None}
            for item in pod.spec.tolerations
        ]
        # The user's toleration, then the GPU taint's; the rest are the API server's defaults.
        assert tolerations[:2] == [gpu_pool.placement()["tolerations"][0], GPU_TOLERATION]


def test_one_pod_per_node_even_where_the_gpus_would_let_two_share_a_node(
    k8s_cluster, launch_namespace, gpu_pool, core
):
    # Three pods of 4 GPUs on two 8-GPU nodes: without a spread two of them share a node.
    packed = launch(k8s_cluster, settings(launch_namespace, "indexed_job", nnodes=3, **gpu_pool.placement()))
    placed = wait_for(lambda: all_placed(core, packed, 3), timeout=90)
    assert placed, describe(core, packed)
    assert len({pod.spec.node_name for pod in placed}) == 2
    k8s_cluster.kubectl("delete", "job", packed["name"], "-n", launch_namespace, "--cascade=foreground")
    assert wait_for(lambda: not pods_of(core, packed), timeout=90), describe(core, packed)

    # With require the two nodes take one pod each, and the third waits for a node of its own.
    spread = launch(
        k8s_cluster,
        settings(
            launch_namespace, "indexed_job", nnodes=3, spread_across_nodes="require", **gpu_pool.placement()
        ),
    )

    def two_placed_one_refused():
        pods = pods_of(core, spread)
        placed = [pod for pod in pods if pod.spec.node_name]
        refused = [pod for pod in pods if unschedulable_message(pod)]
        return (placed, refused) if len(placed) == 2 and len(refused) == 1 else None

    outcome = wait_for(two_placed_one_refused, timeout=90)
    assert outcome, describe(core, spread)
    placed, (refused,) = outcome
    assert sorted(pod.spec.node_name for pod in placed) == sorted(gpu_pool.nodes)
    assert "didn't match pod topology spread constraints" in unschedulable_message(refused)
    (constraint,) = refused.spec.topology_spread_constraints
    assert (constraint.max_skew, constraint.min_domains, constraint.when_unsatisfiable) == (
        1,
        3,
        "DoNotSchedule",
    )


def test_a_pytorchjobs_scheduling_policy_is_stored_by_the_real_crd(
    k8s_cluster, launch_namespace, core, custom
):
    s = settings(
        launch_namespace,
        "pytorchjob",
        gpus_per_node=0,
        nproc_per_node=1,
        backend="gloo",
        pytorchjob_gang=True,
        pytorchjob_gang_queue="research",
        pytorchjob_gang_timeout_s=300,
        priority_class="",
    )
    workload = launch(k8s_cluster, s)
    stored = custom.get_namespaced_custom_object(
        "kubeflow.org", "v1", launch_namespace, "pytorchjobs", workload["name"]
    )
    assert stored["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": 2,
        "queue": "research",
        "scheduleTimeoutSeconds": 300,
    }
    # The harness's operator runs without a gang scheduler: it stores the policy and starts the pods.
    assert wait_for(lambda: len(pods_of(core, workload)) == 2, timeout=90), describe(core, workload)
    # The real CRD holds the field to its type: what the role's checks keep from ever being sent.
    bad = dict(workload["manifests"][0])
    bad["metadata"] = dict(bad["metadata"], name=workload["name"] + "-bad")
    bad["spec"] = dict(
        bad["spec"], runPolicy=dict(bad["spec"]["runPolicy"], schedulingPolicy={"minAvailable": "all"})
    )
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object("kubeflow.org", "v1", launch_namespace, "pytorchjobs", bad)
    assert "schedulingPolicy.minAvailable" in refused.value.body


@pytest.fixture
def local_queue(k8s_cluster, launch_namespace):
    """A ClusterQueue with a GPU quota and a LocalQueue in the namespace pointing at it."""
    name = "cq-%s" % launch_namespace
    k8s_cluster.apply(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": name,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "16"},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": launch_namespace},
            "spec": {"clusterQueue": name},
        },
    )
    yield "team-a"
    k8s_cluster.kubectl("delete", "clusterqueue,resourceflavor", name, "--wait=false", check=False)


# launcher: the workload's (group, version, plural).
QUEUED_KINDS = {
    "indexed_job": ("batch", "v1", "jobs"),
    "pytorchjob": ("kubeflow.org", "v1", "pytorchjobs"),
    "trainjob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
}


@pytest.mark.parametrize("launcher", sorted(QUEUED_KINDS))
def test_a_queued_workload_carries_the_queue_label_and_waits_suspended(
    k8s_cluster, launch_namespace, local_queue, core, custom, launcher
):
    s = settings(
        launch_namespace,
        launcher,
        gpus_per_node=0,
        nproc_per_node=1,
        backend="gloo",
        kueue_local_queue=local_queue,
    )
    workload = launch(k8s_cluster, s)
    group, version, plural = QUEUED_KINDS[launcher]
    batch = client.BatchV1Api(k8s_cluster.api_client())

    def read():
        """The workload as the server stores it, as a plain mapping."""
        if launcher == "indexed_job":
            job = batch.read_namespaced_job(workload["name"], launch_namespace)
            return batch.api_client.sanitize_for_serialization(job)
        return custom.get_namespaced_custom_object(group, version, launch_namespace, plural, workload["name"])

    stored = read()
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert (stored["spec"]["runPolicy"] if launcher == "pytorchjob" else stored["spec"])["suspend"] is True
    if launcher != "trainjob":
        # The Job controller and the Training Operator say so themselves (the harness runs no
        # Trainer v2 controller), and create no pod while the workload is suspended.
        suspended = wait_for(
            lambda: (
                {"type": "Suspended", "status": "True"}
                in [
                    {"type": item["type"], "status": item["status"]}
                    for item in read().get("status", {}).get("conditions") or []
                ]
            ),
            timeout=60,
        )
        assert suspended, read().get("status")
    assert pods_of(core, workload) == []
    # What training_job_wait makes of it: a wait for Kueue's admission, not for slow pods.
    kind = {"indexed_job": "Job", "pytorchjob": "PyTorchJob", "trainjob": "TrainJob"}[launcher]
    verdict = job_status.judge(kind, workload["name"], launch_namespace, read(), [], None)
    assert (verdict["phase"], verdict["queue"]) == ("Suspended", "team-a"), verdict["progress"]
    assert "Kueue did not admit it" in job_status.timeout_message(verdict, 60)


def test_the_role_refuses_a_local_queue_that_does_not_exist_before_applying_anything(
    k8s_cluster, launch_namespace, run_playbook, tmp_path, custom
):
    variables = {
        "training_job_launcher": "pytorchjob",
        "training_job_name": "queued",
        "training_job_runs_dir": str(tmp_path / "runs"),
        "training_job_namespace": launch_namespace,
        "training_job_kubeconfig": str(k8s_cluster.kubeconfig),
        "training_job_image": IMAGE,
        "training_job_nnodes": 2,
        "training_job_nproc_per_node": 1,
        "training_job_gpus_per_node": 0,
        "training_job_cpu": "1",
        "training_job_memory": "8Gi",
        "training_job_shm_size": "1Gi",
        "training_job_checkpoint_pvc": "",
        "training_job_kueue_local_queue": "no-such-queue",
    }
    run = run_playbook("playbooks/train.yml", "inventories/local", variables, timeout=300)
    assert run.rc != 0, run
    assert (
        "training_job_kueue_local_queue is no-such-queue, but namespace %s has no LocalQueue of that name"
        % launch_namespace
    ) in run.output, run
    stored = custom.list_namespaced_custom_object("kubeflow.org", "v1", launch_namespace, "pytorchjobs")
    assert stored["items"] == []

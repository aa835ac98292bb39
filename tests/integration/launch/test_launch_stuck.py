"""playbooks/train.yml against workloads that will not go on without a change, on the harness's
real API server, Job controller, scheduler and Training Operator:

- a ResourceQuota the Indexed Job exceeds (its second pod is refused: the Job controller's
  FailedCreate), a LimitRange the PyTorchJob's pods exceed (no pod is created: the Training
  Operator's FailedCreatePod), and pods no node can hold (Unschedulable) each end the run at the
  stuck time (training_job_stuck_timeout), naming the object, the server's reason and the remedy,
  and the workload is deleted;
- with training_job_stuck_timeout 0 the unschedulable pods wait for the deadline, as before there
  was a stuck time, and the deadline names them;
- on OpenShift (its ClusterVersion named version), a launch whose IPC_LOCK pods would run as the
  namespace's default ServiceAccount is refused before anything is created.

The four runs that wait are launched at once, each in a namespace of its own (module-scoped),
and the tests read their outcome: the harness lane waits once, for the longest of them.
"""

from __future__ import annotations

import json
import re
import threading

import pytest
from cluster_helpers import create_checkpoint_pvc, create_launch_namespace, delete_launch_namespace, wait_for
from test_launch_kubernetes import INVENTORY, PLAYBOOK, get_json, launch_vars, only_run_dir

STUCK_S = 15
# Far beyond the stuck time: a run that ends by it does not end by this.
LONG_DEADLINE_S = 300
# The deadline of the run without a stuck time.
DEADLINE_S = 25
# Pods that run for an hour hold their quota.
HOLD = {"gpuops.test/run-duration": "3600s"}


def one_line(output):
    return " ".join(output.split())


def quota(namespace):
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": namespace},
        "spec": {"hard": {"requests.nvidia.com/gpu": "1"}},
    }


def limit_range(namespace):
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "per-container", "namespace": namespace},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}}]},
    }


# name: (launcher, objects of the namespace, settings)
SCENARIOS = {
    "quota": (
        "indexed_job",
        quota,
        {
            "training_job_gpus_per_node": 1,
            "training_job_stuck_timeout": STUCK_S,
            "training_job_timeout_s": LONG_DEADLINE_S,
            "training_job_pod_annotations": HOLD,
        },
    ),
    "limitrange": (
        "pytorchjob",
        limit_range,
        {
            "training_job_cpu": "4",
            "training_job_stuck_timeout": STUCK_S,
            "training_job_timeout_s": LONG_DEADLINE_S,
        },
    ),
    "unschedulable": (
        "indexed_job",
        None,
        {
            "training_job_gpus_per_node": 9,  # the simulated nodes have 8
            "training_job_stuck_timeout": STUCK_S,
            "training_job_timeout_s": LONG_DEADLINE_S,
        },
    ),
    "deadline": (
        "indexed_job",
        None,
        {
            "training_job_gpus_per_node": 9,
            "training_job_stuck_timeout": 0,
            "training_job_timeout_s": DEADLINE_S,
        },
    ),
}


class Outcome:
    def __init__(self, namespace, runs_dir):
        self.namespace = namespace
        self.runs_dir = runs_dir
        self.run = None
        self.error = None

    @property
    def output(self):
        return one_line(self.run.output)


@pytest.fixture(scope="module")
def stuck_runs(k8s_cluster, run_playbook, tmp_path_factory):
    """Every scenario's train.yml run, launched at once; the namespaces are deleted afterwards."""
    outcomes = {}
    for name, (_launcher, objects, _settings) in SCENARIOS.items():
        namespace = create_launch_namespace(k8s_cluster)
        outcomes[name] = Outcome(namespace, tmp_path_factory.mktemp("runs-" + name))
        create_checkpoint_pvc(k8s_cluster, namespace, tmp_path_factory.mktemp("checkpoints-" + name))
        if objects:
            k8s_cluster.apply(objects(namespace))

    def play(name):
        launcher, _objects, settings = SCENARIOS[name]
        outcome = outcomes[name]
        variables = launch_vars(k8s_cluster, outcome.namespace, outcome.runs_dir, launcher, **settings)
        try:
            outcome.run = run_playbook(PLAYBOOK, INVENTORY, variables, timeout=600)
        except Exception as error:  # the test of that scenario reports it
            outcome.error = repr(error)

    threads = [threading.Thread(target=play, args=(name,)) for name in SCENARIOS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    yield outcomes
    for outcome in outcomes.values():
        delete_launch_namespace(k8s_cluster, outcome.namespace)


def ended(outcome):
    assert outcome.error is None, outcome.error
    assert outcome.run.rc != 0, outcome.run
    return outcome.output


def stuck_for(output):
    """The seconds the message says the workload had been stuck."""
    return int(
        re.search(r"is stuck: it has not gone on for (\d+) s \(stuck_timeout %d s\)" % STUCK_S, output)[1]
    )


def assert_ended_at_the_stuck_time(cluster, outcome, resource):
    output = ended(outcome)
    assert STUCK_S <= stuck_for(output) < STUCK_S + 30, output
    assert "did not finish within" not in output
    # The workload was deleted, so that it does not start later unwatched (or keep its GPUs).
    assert wait_for(lambda: not get_json(cluster, resource, "-n", outcome.namespace)["items"], timeout=60)
    launcher_log = (only_run_dir(outcome.runs_dir) / "launcher.log").read_text()
    assert "is stuck: it has not gone on for" in launcher_log
    return output


def test_a_quota_the_job_exceeds_ends_the_run_at_the_stuck_time_naming_the_quota_and_the_remedy(
    k8s_cluster, stuck_runs
):
    outcome = stuck_runs["quota"]
    output = assert_ended_at_the_stuck_time(k8s_cluster, outcome, "jobs")
    namespace = outcome.namespace
    # The Job, the Job controller's reason in the API server's words, the remedy; pod 0 runs.
    assert re.search(
        r"Job %s/rn-[0-9a-f]+: the API server refuses its pods for \d+ s \(FailedCreate: " % namespace, output
    )
    assert (
        "is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, used: "
        "requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1)" in output
    ), output
    assert (
        "to go on, raise the hard limits of ResourceQuota gpus in namespace %s, free what other workloads "
        "there hold, or ask for less per pod" % namespace in output
    ), output
    assert "Pods: 0 pending, 1 running, 0 succeeded, 0 failed of 2 expected (1 not created)." in output, (
        output
    )


def test_a_limitrange_the_pods_exceed_ends_the_run_at_the_stuck_time_naming_it_and_the_remedy(
    k8s_cluster, stuck_runs
):
    outcome = stuck_runs["limitrange"]
    output = assert_ended_at_the_stuck_time(k8s_cluster, outcome, "pytorchjobs")
    namespace = outcome.namespace
    # The Training Operator's own reason, FailedCreatePod; no pod was ever created.
    assert re.search(
        r"PyTorchJob %s/rn-[0-9a-f]+: the API server refuses its pods for \d+ s \(FailedCreatePod: "
        r'pods "rn-[0-9a-f]+-(master|worker)-0" is forbidden: '
        r"maximum cpu usage per Container is 2, but limit is 4\)" % namespace,
        output,
    ), output
    assert (
        "to go on, size the pods within the namespace's LimitRange (its maximum and minimum per Container "
        "and per Pod: kubectl describe limitrange -n %s) or have it raised" % namespace in output
    ), output
    assert "Pods: 0 pending, 0 running, 0 succeeded, 0 failed of 2 expected (2 not created)." in output, (
        output
    )


def scheduler_refusal(cluster, output):
    """Every untainted node refuses the pod for its GPUs (the real node, when an earlier test
    started it, carries a taint and is refused for that instead)."""
    nodes = get_json(cluster, "nodes")["items"]
    untainted = [node for node in nodes if not node["spec"].get("taints")]
    assert "Unschedulable: 0/%d nodes are available: " % len(nodes) in output
    assert "%d Insufficient nvidia.com/gpu" % len(untainted) in output


def test_a_pod_that_never_schedules_ends_at_the_stuck_time_naming_it_the_reason_and_the_remedy(
    k8s_cluster, stuck_runs
):
    outcome = stuck_runs["unschedulable"]
    output = assert_ended_at_the_stuck_time(k8s_cluster, outcome, "jobs")
    scheduler_refusal(k8s_cluster, output)
    # Both pods, refused for the same reason, named together with the remedy.
    assert re.search(
        r"pod %s/rn-[0-9a-f]+-0-[a-z0-9]+, pod %s/rn-[0-9a-f]+-1-[a-z0-9]+: not scheduled for \d+ s "
        r"\(Unschedulable: " % (outcome.namespace, outcome.namespace),
        output,
    ), output
    assert (
        "to go on, free nvidia.com/gpu on the nodes (other pods hold it) or add nodes that have it" in output
    )


def test_a_pod_that_never_schedules_ends_at_the_deadline_naming_it_and_the_reason(k8s_cluster, stuck_runs):
    """training_job_stuck_timeout 0: the wait as before there was a stuck time."""
    outcome = stuck_runs["deadline"]
    output = ended(outcome)
    # Ended by its own deadline (the message says so), not by the playbook's outer timeout.
    assert "did not finish within %d s" % DEADLINE_S in output
    assert "stuck pods: rn-" in output
    assert "is stuck:" not in output
    scheduler_refusal(k8s_cluster, output)
    # The Job was stopped so that it does not keep waiting for GPUs.
    assert wait_for(lambda: not get_json(k8s_cluster, "jobs", "-n", outcome.namespace)["items"], timeout=30)
    assert "Pending" in (only_run_dir(outcome.runs_dir) / "launcher.log").read_text()


# --------------------------------------------------------------------------------------
# OpenShift: IPC_LOCK pods need a ServiceAccount of their own
# --------------------------------------------------------------------------------------

# Enough of OpenShift's ClusterVersion API for the roles to find the ClusterVersion named version,
# which every OpenShift 4 cluster has and the roles take as its marker.
ANY_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
CLUSTER_VERSION_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterversions.config.openshift.io"},
    "spec": {
        "group": "config.openshift.io",
        "scope": "Cluster",
        "names": {"plural": "clusterversions", "singular": "clusterversion", "kind": "ClusterVersion"},
        "versions": [
            {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": ANY_OBJECT}}
        ],
    },
}
CLUSTER_VERSION = {
    "apiVersion": "config.openshift.io/v1",
    "kind": "ClusterVersion",
    "metadata": {"name": "version"},
    "spec": {"clusterID": "test"},
}


def test_on_openshift_a_launch_as_the_default_serviceaccount_is_refused_before_anything_is_created(
    k8s_cluster, run_playbook, launch_namespace, tmp_path
):
    crd = tmp_path / "clusterversion-crd.json"
    crd.write_text(json.dumps(CLUSTER_VERSION_CRD))
    k8s_cluster.kubectl("apply", "-f", str(crd))
    try:
        k8s_cluster.harness.wait_crds_established(["clusterversions.config.openshift.io"])
        version = tmp_path / "clusterversion.json"
        version.write_text(json.dumps(CLUSTER_VERSION))
        k8s_cluster.kubectl("apply", "-f", str(version))
        settings = launch_vars(k8s_cluster, launch_namespace, tmp_path / "runs", "pytorchjob")
        assert settings.get("training_job_service_account", "") == ""
        run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=300)
    finally:
        # Other tests share the harness: it is not OpenShift once this one ends.
        k8s_cluster.kubectl("delete", "-f", str(crd), "--wait=true", check=False)
    assert run.rc != 0, run
    output = one_line(run.output)
    assert (
        'training_job_service_account is "", so the pods would run as the namespace\'s default '
        "ServiceAccount, and the cluster is OpenShift" in output
    ), output
    assert "restricted-v2) refuses the IPC_LOCK capability the pods add" in output
    assert "Run the training_namespace role on namespace %s" % launch_namespace in output
    assert "set training_job_service_account=trainer" in output
    # Nothing was created: no workload, no run definition.
    for resource in ("pytorchjobs", "jobs", "pods", "configmaps"):
        items = get_json(k8s_cluster, resource, "-n", launch_namespace)["items"]
        assert [
            item["metadata"]["name"] for item in items if item["metadata"]["name"] != "kube-root-ca.crt"
        ] == []

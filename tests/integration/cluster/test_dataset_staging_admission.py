"""dataset_staging's checks before anything is created, against the harness's real API server:
a node folder (a hostPath volume) in a namespace whose Pod Security level refuses it, or on
OpenShift; a quota that admits no pod; a missing source claim. Each used to leave a Job
without a pod until its deadline (24 hours by default); each now fails at once, naming the
refusal and, for a node folder, the PVC source to use instead, and the namespace holds no Job.

Staging from a PVC source for real is tested on the real node (real_node/test_dataset_staging.py).
"""

from __future__ import annotations

import json
import secrets

import pytest

pytestmark = pytest.mark.slow

# Enough of OpenShift's ClusterVersion API for the role to find the ClusterVersion named version,
# which every OpenShift 4 cluster has and the role takes as its marker.
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
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": ANY_OBJECT},
            }
        ],
    },
}
CLUSTER_VERSION = {
    "apiVersion": "config.openshift.io/v1",
    "kind": "ClusterVersion",
    "metadata": {"name": "version"},
    "spec": {"clusterID": "test"},
}


@pytest.fixture
def namespace(k8s_cluster, tmp_path):
    """A namespace with the dataset PVC the role stages into."""
    name = "dsa-%s" % secrets.token_hex(3)
    k8s_cluster.kubectl("create", "namespace", name)
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "dataset", "namespace": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    manifest = tmp_path / "claim.json"
    manifest.write_text(json.dumps(claim))
    k8s_cluster.kubectl("apply", "-f", str(manifest))
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def stage(run_role, k8s_cluster, namespace, **settings):
    return run_role(
        "dataset_staging",
        {
            "dataset_staging_kubeconfig": str(k8s_cluster.kubeconfig),
            "dataset_staging_namespace": namespace,
            "dataset_staging_image": "gpuops-trainer:test",
            "dataset_staging_subdir": "coco",
            "dataset_staging_timeout_s": 30,
            "dataset_staging_poll_interval_s": 1,
            **settings,
        },
    )


def created(k8s_cluster, namespace) -> list[str]:
    """The Jobs and pods in the namespace, by kind and name."""
    items = json.loads(k8s_cluster.kubectl("get", "jobs,pods", "-n", namespace, "-o", "json").stdout)["items"]
    return ["%s/%s" % (item["kind"], item["metadata"]["name"]) for item in items]


def flat(run) -> str:
    return " ".join(run.output.split())


NODE_FOLDER = {"dataset_staging_source": "path", "dataset_staging_node_path": "/srv/datasets/coco"}
PVC_HINT = "set dataset_staging_source=pvc with dataset_staging_source_pvc=<the claim>"


def test_a_node_folder_on_openshift_is_refused_naming_the_pvc_source(
    k8s_cluster, run_role, namespace, tmp_path
):
    manifest = tmp_path / "clusterversion-crd.json"
    manifest.write_text(json.dumps(CLUSTER_VERSION_CRD))
    k8s_cluster.kubectl("apply", "-f", str(manifest))
    try:
        k8s_cluster.harness.wait_crds_established(["clusterversions.config.openshift.io"])
        version = tmp_path / "clusterversion.json"
        version.write_text(json.dumps(CLUSTER_VERSION))
        k8s_cluster.kubectl("apply", "-f", str(version))
        run = stage(run_role, k8s_cluster, namespace, **NODE_FOLDER)
    finally:
        k8s_cluster.kubectl("delete", "-f", str(manifest), "--wait=true", check=False)
    assert run.rc != 0, run
    output = flat(run)
    assert "the node folder /srv/datasets/coco as a hostPath volume, and the cluster is OpenShift" in output
    assert PVC_HINT in output, run
    assert created(k8s_cluster, namespace) == []


def test_a_node_folder_under_pod_security_baseline_is_refused_before_anything_is_created(
    k8s_cluster, run_role, namespace
):
    # Run after the OpenShift test: the discovery cache that remembers its ClusterVersion API
    # must not make this cluster OpenShift.
    k8s_cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=baseline")
    run = stage(run_role, k8s_cluster, namespace, **NODE_FOLDER)
    assert run.rc != 0, run
    output = flat(run)
    # The API server's own words (Pod Security admission), then the way out.
    assert "The API server refuses the staging pod in namespace %s" % namespace in output, run
    assert 'violates PodSecurity "baseline:latest": hostPath volumes (volume "source")' in output, run
    assert PVC_HINT in output, run
    assert created(k8s_cluster, namespace) == []


def test_a_quota_that_admits_no_pod_is_named_before_the_job_is_created(k8s_cluster, run_role, namespace):
    k8s_cluster.kubectl("create", "quota", "no-pods", "--hard=pods=0", "-n", namespace)
    run = stage(run_role, k8s_cluster, namespace, dataset_staging_url="http://datasets.invalid/coco/")
    assert run.rc != 0, run
    output = flat(run)
    assert "The API server refuses the staging pod in namespace %s" % namespace in output, run
    assert "exceeded quota: no-pods" in output, run
    # Not a node folder: no PVC hint.
    assert PVC_HINT not in output
    assert created(k8s_cluster, namespace) == []


def test_a_missing_source_claim_is_named_and_a_folder_outside_it_refused(k8s_cluster, run_role, namespace):
    source = {"dataset_staging_source": "pvc", "dataset_staging_source_pvc": "coco-source"}
    run = stage(run_role, k8s_cluster, namespace, **source)
    assert run.rc != 0, run
    missing = "dataset_staging_source_pvc: no PersistentVolumeClaim coco-source in namespace %s" % namespace
    assert missing in flat(run), run
    bad = stage(run_role, k8s_cluster, namespace, **source, dataset_staging_source_pvc_subdir="../other")
    assert bad.rc != 0, bad
    outside = "dataset_staging_source_pvc_subdir must be a relative path inside the source PVC without .."
    assert outside + ', got "../other"' in flat(bad), bad
    assert created(k8s_cluster, namespace) == []

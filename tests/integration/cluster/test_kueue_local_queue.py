"""training_namespace's Kueue LocalQueue on the real control plane, whose API server validates it
against Kueue's own CRDs (installed by the harness from the sigs.k8s.io/kueue module).

The cluster administrator's ResourceFlavor and ClusterQueue are created by the test; the role
makes the LocalQueue in the namespace point at that ClusterQueue, and a second run changes
nothing.
"""

from __future__ import annotations

import secrets

import pytest
from kubernetes import client

KUEUE = ("kueue.x-k8s.io", "v1beta2")


@pytest.fixture
def cluster_queue(k8s_cluster):
    name = "cq-%s" % secrets.token_hex(3)
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
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {"name": name, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16"}]}
                        ],
                    }
                ],
            },
        },
    )
    yield name
    k8s_cluster.kubectl("delete", "clusterqueue,resourceflavor", name, "--wait=false", check=False)


def test_the_role_creates_a_local_queue_pointing_at_the_cluster_queue(k8s_cluster, run_role, cluster_queue):
    namespace = "tq-%s" % secrets.token_hex(3)
    variables = {
        "training_namespace_name": namespace,
        "training_namespace_kubeconfig": str(k8s_cluster.kubeconfig),
        # Cluster-wide and shared by other tests: not this test's to create or delete.
        "training_namespace_priority_class": "",
        "training_namespace_kueue_cluster_queue": cluster_queue,
        "training_namespace_kueue_local_queue": "team-a",
    }
    try:
        first = run_role("training_namespace", variables)
        assert first.rc == 0, first
        assert "LocalQueue %s/team-a" % namespace in " ".join(first.reported("changed_objects")), first
        custom = client.CustomObjectsApi(k8s_cluster.api_client())
        stored = custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", "team-a")
        assert stored["spec"]["clusterQueue"] == cluster_queue
        assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuops.training"
        second = run_role("training_namespace", variables)
        assert second.rc == 0, second
        assert second.reported("changed_objects") == [], second
    finally:
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)

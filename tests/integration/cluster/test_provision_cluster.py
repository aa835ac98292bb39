"""playbooks/provision_cluster.yml against the real test control plane: the playbook composes
the cluster roles in order, a second run changes nothing, and a wrong platform or role name
stops it before any API call.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import sys

import pytest
from kubernetes import client
from playbook_runner import DEV_COLLECTIONS, ansible_playbook

pytestmark = pytest.mark.slow
PLAYBOOK = "playbooks/provision_cluster.yml"


def provision(k8s_cluster, tmp_path, **variables):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "cluster_controllers": {
                            "hosts": {
                                "localhost": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable,
                                }
                            }
                        }
                    }
                }
            }
        )  # fmt: skip
    )
    kubeconfig = str(k8s_cluster.kubeconfig)
    settings = {
        "training_namespace_kubeconfig": kubeconfig,
        "secondary_networks_kubeconfig": kubeconfig,
        **variables,
    }
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(settings))
    return ansible_playbook(
        "-i", str(inventory), "-e", "@" + str(extra), PLAYBOOK, collections_path=DEV_COLLECTIONS, timeout=600
    )


def recap_changed(output):
    return int(re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", output).group(1))


@pytest.fixture
def names(k8s_cluster):
    suffix = secrets.token_hex(3)
    namespace, priority_class = "prov-" + suffix, "prov-" + suffix
    yield namespace, priority_class
    core = client.CoreV1Api(k8s_cluster.api_client())
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(namespace)
    with contextlib.suppress(client.ApiException):
        client.SchedulingV1Api(k8s_cluster.api_client()).delete_priority_class(priority_class)
    # The harness serves OpenShift's SCC API, so training_namespace made the trainer's SCC.
    with contextlib.suppress(client.ApiException):
        client.CustomObjectsApi(k8s_cluster.api_client()).delete_cluster_custom_object(
            "security.openshift.io", "v1", "securitycontextconstraints", "gpuops-training-" + namespace
        )


def test_the_namespace_and_its_network_converge_and_a_second_run_changes_nothing(
    k8s_cluster, names, tmp_path
):
    namespace, priority_class = names
    variables = {
        "provision_cluster_roles": ["training_namespace", "secondary_networks"],
        "training_namespace_name": namespace,
        "training_namespace_priority_class": priority_class,
        "training_namespace_dataset_pvc": False,
        "training_namespace_checkpoint_pvc": False,
        "secondary_networks_namespace": namespace,
        "secondary_networks_attachments": [
            {
                "name": "rdma-net",
                "type": "macvlan",
                "master": "eth1",
                "ipam": {"type": "whereabouts", "subnet": "192.168.100.0/24"},
            },
        ],  # fmt: skip
    }
    first = provision(k8s_cluster, tmp_path, **variables)
    assert first.rc == 0, first.output[-2500:]
    assert recap_changed(first.output) > 0
    # Composed in order: the namespace exists before the attachment that lives in it.
    custom = client.CustomObjectsApi(k8s_cluster.api_client())
    nad = custom.get_namespaced_custom_object(
        "k8s.cni.cncf.io", "v1", namespace, "network-attachment-definitions", "rdma-net"
    )
    assert json.loads(nad["spec"]["config"])["ipam"]["range"] == "192.168.100.0/24"
    quota = client.CoreV1Api(k8s_cluster.api_client()).read_namespaced_resource_quota(
        "training-quota", namespace
    )
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "16"
    second = provision(k8s_cluster, tmp_path, **variables)
    assert second.rc == 0, second
    assert recap_changed(second.output) == 0


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"provision_cluster_platform": "eks"}, "provision_cluster_platform must be kubernetes or openshift"),
        ({"provision_cluster_roles": ["training_namespace", "gpu_drivers"]}, "gpu_drivers"),
    ],
)
def test_a_wrong_platform_or_role_stops_before_any_api_call(k8s_cluster, tmp_path, variables, named):
    run = provision(
        k8s_cluster, tmp_path, training_namespace_kubeconfig="/nonexistent/kubeconfig", **variables
    )
    assert run.rc != 0
    assert named in run.output
    assert "TASK [gpuops.training." not in run.output  # no role started

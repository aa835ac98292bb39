"""secondary_networks against the real control plane with the upstream CRDs.

NetworkAttachmentDefinition (network-attachment-definition-client v1.7.7), SriovNetworkNodePolicy,
SriovNetwork and SriovIBNetwork (sriov-network-operator v1.6.0) and NicClusterPolicy (Network
Operator v1.4.0) are the CRDs the harness installs from their Go modules, so the server checks
every typed field the way a real cluster does. It does not check a NetworkAttachmentDefinition's
CNI JSON (an opaque string): the role must, before any API call.
"""

from __future__ import annotations

import copy
import json
import re
import secrets

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gpuops.training.plugins.module_utils.cni import cni_config

pytestmark = pytest.mark.slow

NAD = ("k8s.cni.cncf.io", "v1", "network-attachment-definitions")
SRIOV = ("sriovnetwork.openshift.io", "v1")
NIC = ("mellanox.com", "v1alpha1", "nicclusterpolicies")

ATTACHMENTS = [
    {
        "name": "roce",
        "type": "macvlan",
        "master": "ens1f0np0",
        "mtu": 9000,
        "ipam": {
            "type": "host-local",
            "subnet": "192.168.10.0/24",
            "range_start": "192.168.10.100",
            "range_end": "192.168.10.200",
            "gateway": "192.168.10.1",
            "routes": [{"dst": "192.168.0.0/16", "gw": "192.168.10.1"}],
        },
    },
    {
        "name": "roce-l3",
        "type": "ipvlan",
        "master": "ens1f1np1",
        "mode": "l3",
        "ipam": {"type": "whereabouts", "subnet": "10.10.0.0/16", "exclude": ["10.10.0.0/24"]},
    },
    {
        "name": "hostdev",
        "type": "host-device",
        "device": "ens2f0",
        "ipam": {"type": "host-local", "subnet": "192.168.30.0/24"},
    },
    {
        "name": "vf-eth",
        "type": "sriov",
        "resource_name": "openshift.io/mlnx_eth",
        "vlan": 100,
        "trust": "on",
        "spoofchk": "off",
        "ipam": {"type": "whereabouts", "subnet": "192.168.40.0/24", "range_start": "192.168.40.10"},
    },
    {
        "name": "vf-ib",
        "type": "ib-sriov",
        "resource_name": "openshift.io/mlnx_ib",
        "pkey": "0x00FF",
        "link_state": "enable",
        "ipam": {"type": "whereabouts", "subnet": "192.168.20.0/24"},
    },
]
POLICIES = [
    {
        "name": "mlnx-eth",
        "resource_name": "mlnx_eth",
        "num_vfs": 8,
        "nic_selector": {"vendor": "15b3", "device_id": "101b", "pf_names": ["ens1f0np0#0-7"]},
        "is_rdma": True,
        "link_type": "eth",
        "mtu": 9000,
    },
    {
        "name": "mlnx-ib",
        "resource_name": "mlnx_ib",
        "num_vfs": 4,
        "nic_selector": {"vendor": "15b3", "pf_names": ["ibs2f0"]},
        "is_rdma": True,
        "link_type": "ib",
        "priority": 10,
    },
]
NETWORKS = [
    {
        "name": "eth-net",
        "resource_name": "mlnx_eth",
        "vlan": 200,
        "ipam": {"type": "whereabouts", "subnet": "192.168.50.0/24"},
    },
    {
        "name": "ib-net",
        "type": "ib-sriov",
        "resource_name": "mlnx_ib",
        "link_state": "enable",
        "capabilities": {"ips": True},
        "ipam": {"type": "host-local", "subnet": "192.168.60.0/24"},
    },
]


def recap_changed(run):
    match = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", run.output)
    assert match, run
    return int(match.group(1))


@pytest.fixture(scope="module")
def namespaces(k8s_cluster):
    suffix = secrets.token_hex(3)
    names = ("sn-%s" % suffix, "sn-sriov-%s" % suffix)
    for name in names:
        k8s_cluster.kubectl("create", "namespace", name)
    yield names
    for name in names:
        k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
    k8s_cluster.kubectl("delete", "nicclusterpolicy", "nic-cluster-policy", "--ignore-not-found", check=False)


def role_vars(k8s_cluster, namespaces, **changes):
    variables = {
        "secondary_networks_namespace": namespaces[0],
        "secondary_networks_sriov_namespace": namespaces[1],
        "secondary_networks_kubeconfig": str(k8s_cluster.kubeconfig),
        "secondary_networks_labels": {"gpuops.test/suite": "secondary-networks"},
        "secondary_networks_attachments": copy.deepcopy(ATTACHMENTS),
        "secondary_networks_sriov_policies": copy.deepcopy(POLICIES),
        "secondary_networks_sriov_networks": copy.deepcopy(NETWORKS),
        "secondary_networks_nic_cluster_policy": True,
        "secondary_networks_rdma_shared_device_plugin_repository": "registry.example/nvidia/mellanox",
        "secondary_networks_rdma_shared_devices": [
            {
                "resource_name": "rdma_shared_device_a",
                "rdma_hca_max": 63,
                "vendors": ["15b3"],
                "device_ids": ["101b"],
            }
        ],
        "secondary_networks_nic_cluster_policy_spec": {
            "secondaryNetwork": {
                "multus": {
                    "image": "multus-cni",
                    "repository": "registry.example/nvidia/mellanox",
                    "version": "network-operator-v25.7.0",
                }
            }
        },
    }
    variables.update(changes)
    return variables


@pytest.fixture(scope="module")
def converged(k8s_cluster, namespaces, run_role):
    variables = role_vars(k8s_cluster, namespaces)
    run = run_role("secondary_networks", variables)
    assert run.rc == 0, run
    return variables, run


@pytest.fixture(scope="module")
def custom(k8s_cluster):
    return client.CustomObjectsApi(k8s_cluster.api_client())


def without_namespace(reference):
    """``Kind name`` of a ``Kind namespace/name`` the report printed."""
    kind, name = reference.split(" ", 1)
    return "%s %s" % (kind, name.rsplit("/", 1)[-1])


def test_first_run_applies_every_object_and_a_second_run_changes_nothing(converged, run_role):
    variables, first = converged
    # One apply call for all of them; the report after it names each object that changed.
    changed = [without_namespace(reference) for reference in first.reported("changed_objects")]
    for item in (
        "NicClusterPolicy nic-cluster-policy",
        "SriovNetworkNodePolicy mlnx-eth",
        "SriovNetworkNodePolicy mlnx-ib",
        "SriovNetwork eth-net",
        "SriovIBNetwork ib-net",
        "NetworkAttachmentDefinition roce",
        "NetworkAttachmentDefinition roce-l3",
        "NetworkAttachmentDefinition hostdev",
        "NetworkAttachmentDefinition vf-eth",
        "NetworkAttachmentDefinition vf-ib",
    ):
        assert item in changed, item
    assert len(changed) == 10, first
    second = run_role("secondary_networks", variables)
    assert second.rc == 0, second
    assert recap_changed(second) == 0, second
    assert second.reported("changed_objects") == [], second


def test_stored_cni_json_decodes_to_what_was_asked(converged, namespaces, custom):
    stored = {
        item["metadata"]["name"]: item
        for item in custom.list_namespaced_custom_object(*NAD[:2], namespaces[0], NAD[2])["items"]
    }
    assert sorted(stored) == sorted(attachment["name"] for attachment in ATTACHMENTS)
    for attachment in ATTACHMENTS:
        document = stored[attachment["name"]]
        assert json.loads(document["spec"]["config"]) == cni_config(attachment), attachment["name"]
        assert document["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuops.training"
    assert stored["vf-eth"]["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/resourceName": "openshift.io/mlnx_eth"
    }
    roce = json.loads(stored["roce"]["spec"]["config"])
    assert roce["ipam"]["ranges"] == [
        [
            {
                "subnet": "192.168.10.0/24",
                "rangeStart": "192.168.10.100",
                "rangeEnd": "192.168.10.200",
                "gateway": "192.168.10.1",
            }
        ]
    ]
    vf_ib = json.loads(stored["vf-ib"]["spec"]["config"])
    assert (vf_ib["type"], vf_ib["pkey"], vf_ib["rdmaIsolation"]) == ("ib-sriov", "0x00FF", True)


def test_the_upstream_schemas_accept_and_store_the_operator_objects(converged, namespaces, custom):
    policy = custom.get_namespaced_custom_object(*SRIOV, namespaces[1], "sriovnetworknodepolicies", "mlnx-ib")
    assert policy["spec"] == {
        "resourceName": "mlnx_ib",
        "numVfs": 4,
        "nicSelector": {"vendor": "15b3", "pfNames": ["ibs2f0"]},
        "nodeSelector": {"feature.node.kubernetes.io/network-sriov.capable": "true"},
        "deviceType": "netdevice",
        "isRdma": True,
        "linkType": "ib",
        "priority": 10,
    }
    eth = custom.get_namespaced_custom_object(*SRIOV, namespaces[1], "sriovnetworks", "eth-net")
    assert eth["spec"]["networkNamespace"] == namespaces[0]
    assert eth["spec"]["vlan"] == 200
    assert json.loads(eth["spec"]["ipam"]) == {"type": "whereabouts", "range": "192.168.50.0/24"}
    assert eth["spec"]["logLevel"] == "info"  # the CRD's default, filled in by the server
    ib = custom.get_namespaced_custom_object(*SRIOV, namespaces[1], "sriovibnetworks", "ib-net")
    assert json.loads(ib["spec"]["ipam"])["ranges"] == [[{"subnet": "192.168.60.0/24"}]]
    assert json.loads(ib["spec"]["capabilities"]) == {"ips": True}

    nic = custom.get_cluster_custom_object(*NIC, "nic-cluster-policy")
    plugin = nic["spec"]["rdmaSharedDevicePlugin"]
    assert (plugin["image"], plugin["repository"]) == (
        "k8s-rdma-shared-dev-plugin",
        "registry.example/nvidia/mellanox",
    )
    assert json.loads(plugin["config"]) == {
        "configList": [
            {
                "resourceName": "rdma_shared_device_a",
                "rdmaHcaMax": 63,
                "selectors": {"vendors": ["15b3"], "deviceIDs": ["101b"]},
            }
        ]
    }
    assert nic["spec"]["secondaryNetwork"]["multus"]["image"] == "multus-cni"


def test_check_mode_reports_changes_and_the_server_keeps_the_old_objects(
    converged, namespaces, run_role, custom
):
    variables, _first = converged
    changed = copy.deepcopy(variables)
    changed["secondary_networks_attachments"][0]["ipam"]["range_end"] = "192.168.10.150"
    changed["secondary_networks_sriov_policies"][0]["num_vfs"] = 16
    run = run_role("secondary_networks", changed, "--check", "--diff")
    assert run.rc == 0, run
    # The two changed objects would change; the others, hostdev among them, would not.
    assert sorted(run.reported("changed_objects")) == [
        "NetworkAttachmentDefinition %s/roce" % namespaces[0],
        "SriovNetworkNodePolicy %s/mlnx-eth" % namespaces[1],
    ], run
    assert re.search(r"^\+\s+numVfs: 16$", run.output, re.MULTILINE), run
    roce = custom.get_namespaced_custom_object(*NAD[:2], namespaces[0], NAD[2], "roce")
    assert json.loads(roce["spec"]["config"])["ipam"]["ranges"][0][0]["rangeEnd"] == "192.168.10.200"
    policy = custom.get_namespaced_custom_object(
        *SRIOV, namespaces[1], "sriovnetworknodepolicies", "mlnx-eth"
    )
    assert policy["spec"]["numVfs"] == 8


def test_a_server_rejection_names_the_object_and_the_field(k8s_cluster, namespaces, run_role, custom):
    policy = {
        "name": "typed-wrong",
        "resource_name": "typed_wrong",
        "num_vfs": 2,
        "nic_selector": {"vendor": "15b3"},
        # Past the role's own checks on purpose: the upstream schema types numVfs as an integer.
        "extra": {"numVfs": "2"},
    }
    variables = role_vars(
        k8s_cluster,
        namespaces,
        secondary_networks_attachments=[],
        secondary_networks_sriov_networks=[],
        secondary_networks_nic_cluster_policy=False,
        secondary_networks_sriov_policies=[policy],
    )
    run = run_role("secondary_networks", variables)
    assert run.rc != 0
    assert run.output.count("fatal: [localhost]") == 1, run
    message = " ".join(run.output.split())
    assert (
        "The API server rejected 1 of the 1 objects of the secondary networks:"
        " - SriovNetworkNodePolicy %s/typed-wrong: " % namespaces[1]
    ) in message
    assert ".spec.numVfs: expected numeric (int or float), got string" in message
    with pytest.raises(ApiException):
        custom.get_namespaced_custom_object(*SRIOV, namespaces[1], "sriovnetworknodepolicies", "typed-wrong")


def test_bad_networks_fail_with_one_message_before_any_api_call(k8s_cluster, run_role, custom):
    namespace = "sn-bad-%s" % secrets.token_hex(3)
    k8s_cluster.kubectl("create", "namespace", namespace)
    try:
        attachments = [
            {"name": "roce", "type": "macvlan", "ipam": {"type": "host-local", "subnet": "192.168.10.0/33"}},
            {
                "name": "ib",
                "type": "ib-sriov",
                "resource_name": "openshift.io/mlnx_ib",
                "ipam": {
                    "type": "whereabouts",
                    "subnet": "192.168.20.0/24",
                    "range_start": "192.168.21.10",
                    "range_end": "192.168.20.5",
                    "gateway": "10.0.0.1",
                },
            },
            {"name": "br", "type": "bridge", "master": "br0"},
            {"name": "ok", "type": "host-device", "device": "ens2f0"},
        ]
        run = run_role(
            "secondary_networks",
            {
                "secondary_networks_namespace": namespace,
                "secondary_networks_kubeconfig": str(k8s_cluster.kubeconfig),
                "secondary_networks_attachments": attachments,
            },
        )
        assert run.rc != 0
        assert run.output.count("fatal: [localhost]") == 1, run
        output = " ".join(run.output.split())
        for expected in (
            "The secondary network settings are not valid:",
            "secondary_networks_attachments[0] (roce): master is required for type macvlan",
            "secondary_networks_attachments[0] (roce): ipam.subnet '192.168.10.0/33' is not a valid CIDR",
            "secondary_networks_attachments[1] (ib): ipam.range_start 192.168.21.10 is outside ipam.subnet"
            " 192.168.20.0/24",
            "secondary_networks_attachments[1] (ib): ipam.gateway 10.0.0.1 is outside ipam.subnet"
            " 192.168.20.0/24",
            "secondary_networks_attachments[2] (br): type must be one of macvlan, ipvlan, host-device, sriov,"
            " ib-sriov",
        ):
            assert expected in output, expected
        assert "attachments[3]" not in output
        assert "Read which CustomResourceDefinitions" not in run.output  # stopped before the first API call
        assert custom.list_namespaced_custom_object(*NAD[:2], namespace, NAD[2])["items"] == []
    finally:
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_a_missing_namespace_is_named_and_check_mode_lists_its_objects(k8s_cluster, run_role):
    namespace = "sn-none-%s" % secrets.token_hex(3)
    variables = {
        "secondary_networks_namespace": namespace,
        "secondary_networks_kubeconfig": str(k8s_cluster.kubeconfig),
        "secondary_networks_attachments": [ATTACHMENTS[2]],
    }
    check = run_role("secondary_networks", variables, "--check", "--diff")
    assert check.rc == 0, check
    assert check.reported("deferred_objects") == ["NetworkAttachmentDefinition %s/hostdev" % namespace], check
    run = run_role("secondary_networks", variables)
    assert run.rc != 0
    assert (
        "Namespace %s not found: create it first (gpuops.training.training_namespace)" % namespace
        in " ".join(run.output.split())
    )
    assert k8s_cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0


def test_absent_deletes_every_object(converged, namespaces, run_role, custom):
    variables, _first = converged
    run = run_role("secondary_networks", dict(variables, secondary_networks_state="absent"))
    assert run.rc == 0, run
    assert recap_changed(run) == 1, run  # one call deleting all ten
    assert custom.list_namespaced_custom_object(*NAD[:2], namespaces[0], NAD[2])["items"] == []
    for plural in ("sriovnetworknodepolicies", "sriovnetworks", "sriovibnetworks"):
        assert custom.list_namespaced_custom_object(*SRIOV, namespaces[1], plural)["items"] == []
    with pytest.raises(ApiException):
        custom.get_cluster_custom_object(*NIC, "nic-cluster-policy")
    again = run_role("secondary_networks", dict(variables, secondary_networks_state="absent"))
    assert again.rc == 0 and recap_changed(again) == 0, again


MANIFEST = """\
apiVersion: v1
kind: Namespace
metadata:
  name: {namespace}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: multus
  namespace: {namespace}
---
# an empty document, as manifests often have
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: multus-daemon-config
  namespace: {namespace}
data:
  daemon-config.json: '{{"cniVersion": "0.3.1"}}'
"""


def test_a_multi_document_multus_manifest_is_applied_labelled_and_deleted(k8s_cluster, run_role, tmp_path):
    namespace = "sn-multus-%s" % secrets.token_hex(3)
    manifest = tmp_path / "multus.yml"
    manifest.write_text(MANIFEST.format(namespace=namespace))
    variables = {
        "secondary_networks_kubeconfig": str(k8s_cluster.kubeconfig),
        "secondary_networks_multus_manifest": str(manifest),
        "secondary_networks_multus_wait": False,
    }
    core = client.CoreV1Api(k8s_cluster.api_client())
    try:
        first = run_role("secondary_networks", variables)
        assert first.rc == 0, first
        assert first.reported("changed_objects") == [
            "Namespace %s" % namespace,
            "ServiceAccount %s/multus" % namespace,
            "ConfigMap %s/multus-daemon-config" % namespace,
        ], first
        # Every object carries the role's label, so the apply owns a field of each.
        account = core.read_namespaced_service_account("multus", namespace)
        assert account.metadata.labels == {"app.kubernetes.io/managed-by": "gpuops.training"}
        second = run_role("secondary_networks", variables)
        assert second.rc == 0 and recap_changed(second) == 0, second

        run = run_role("secondary_networks", dict(variables, secondary_networks_state="absent"))
        assert run.rc == 0, run
        with pytest.raises(ApiException):
            core.read_namespaced_config_map("multus-daemon-config", namespace)
    finally:
        k8s_cluster.kubectl(
            "delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False
        )


def test_a_manifest_that_is_not_kubernetes_objects_is_refused_before_any_api_call(tmp_path, run_role):
    manifest = tmp_path / "multus.yml"
    manifest.write_text("- just\n- a list\n")
    run = run_role(
        "secondary_networks",
        {
            "secondary_networks_kubeconfig": str(tmp_path / "absent-kubeconfig"),
            "secondary_networks_multus_manifest": str(manifest),
        },
    )
    assert run.rc != 0
    assert "must hold Kubernetes objects, each with apiVersion, kind and metadata.name" in " ".join(
        run.output.split()
    )
    missing = run_role(
        "secondary_networks",
        {
            "secondary_networks_kubeconfig": str(tmp_path / "absent-kubeconfig"),
            "secondary_networks_multus_manifest": str(tmp_path / "nowhere.yml"),
        },
    )
    assert missing.rc != 0
    assert (
        "secondary_networks_multus_manifest %s is not a file" % (tmp_path / "nowhere.yml") in missing.output
    )


def test_a_manifest_without_the_awaited_daemonset_is_refused_before_any_api_call(tmp_path, run_role):
    manifest = tmp_path / "multus.yml"
    manifest.write_text(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: kube-multus-ds, namespace: multus-system}\n"
        "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: whereabouts}\n"
    )
    variables = {
        "secondary_networks_kubeconfig": str(tmp_path / "absent-kubeconfig"),
        "secondary_networks_multus_manifest": str(manifest),
    }
    run = run_role("secondary_networks", variables)
    assert run.rc != 0
    message = " ".join(run.output.split())
    assert "creates no DaemonSet kube-system/kube-multus-ds" in message, run.output
    assert "its DaemonSets: multus-system/kube-multus-ds, default/whereabouts." in message, run.output
    # Pointed at the manifest's own DaemonSet, the settings pass the check and the role goes on
    # to the API server (absent here), so the failure is the connection's, not the check's.
    run = run_role("secondary_networks", dict(variables, secondary_networks_multus_namespace="multus-system"))
    assert run.rc != 0 and "creates no DaemonSet" not in run.output
    assert "Apply every object of the Multus thick-plugin manifest in one call" in run.output, run.output

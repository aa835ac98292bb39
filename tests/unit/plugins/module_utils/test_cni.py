"""CNI configurations, SR-IOV and Network Operator objects, and the checks before any API call."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.cni import (
    NetworkError,
    attachment_problems,
    cni_config,
    ipam_problems,
    network_attachment_definition,
    networks_objects,
    networks_problems,
    nic_cluster_policy,
    render_ipam,
    sriov_network,
    sriov_network_node_policy,
    sriov_policy_problems,
)

HOST_LOCAL = {
    "type": "host-local",
    "subnet": "192.168.10.0/24",
    "range_start": "192.168.10.100",
    "range_end": "192.168.10.200",
    "gateway": "192.168.10.1",
}


def base_settings(**changes):
    settings = {
        "namespace": "training",
        "sriov_namespace": "sriov-network-operator",
        "cni_version": "0.3.1",
        "labels": {},
        "attachments": [],
        "sriov_policies": [],
        "sriov_networks": [],
        "nic_cluster_policy": False,
        "rdma_shared_devices": [
            {"resource_name": "rdma_shared_device_a", "rdma_hca_max": 63, "vendors": ["15b3"]}
        ],
        "rdma_shared_device_plugin_image": "k8s-rdma-shared-dev-plugin",
        "rdma_shared_device_plugin_repository": "registry.example/nvidia/mellanox",
        "rdma_shared_device_plugin_version": "network-operator-v25.7.0",
        "nic_cluster_policy_spec": {},
    }
    settings.update(changes)
    return settings


# --------------------------------------------------------------------------- rendering


def test_macvlan_with_host_local_ranges():
    config = cni_config(
        {"name": "roce", "type": "macvlan", "master": "ens1f0", "mtu": 9000, "ipam": dict(HOST_LOCAL)}
    )
    assert config == {
        "cniVersion": "0.3.1",
        "name": "roce",
        "type": "macvlan",
        "master": "ens1f0",
        "mode": "bridge",
        "mtu": 9000,
        "ipam": {
            "type": "host-local",
            "ranges": [
                [
                    {
                        "subnet": "192.168.10.0/24",
                        "rangeStart": "192.168.10.100",
                        "rangeEnd": "192.168.10.200",
                        "gateway": "192.168.10.1",
                    }
                ]
            ],
        },
    }


def test_ipvlan_with_whereabouts_exclude_and_routes():
    config = cni_config(
        {
            "name": "ipv",
            "type": "ipvlan",
            "master": "bond0.100",
            "mode": "l3",
            "cni_version": "1.0.0",
            "ipam": {
                "type": "whereabouts",
                "subnet": "10.10.0.0/16",
                "range_start": "10.10.1.1",
                "range_end": "10.10.9.254",
                "exclude": ["10.10.5.0/24"],
                "routes": [{"dst": "10.20.0.0/16", "gw": "10.10.0.1"}],
            },
        }
    )
    assert config["cniVersion"] == "1.0.0"
    assert config["mode"] == "l3"
    assert config["ipam"] == {
        "type": "whereabouts",
        "range": "10.10.0.0/16",
        "range_start": "10.10.1.1",
        "range_end": "10.10.9.254",
        "exclude": ["10.10.5.0/24"],
        "routes": [{"dst": "10.20.0.0/16", "gw": "10.10.0.1"}],
    }


def test_host_device_sriov_and_ib_sriov():
    assert cni_config({"name": "hd", "type": "host-device", "pci_bus_id": "0000:3b:00.1"}) == {
        "cniVersion": "0.3.1",
        "name": "hd",
        "type": "host-device",
        "pciBusID": "0000:3b:00.1",
        "ipam": {},
    }
    sriov = cni_config(
        {
            "name": "vf",
            "type": "sriov",
            "resource_name": "openshift.io/mlnx_eth",
            "vlan": 100,
            "vlan_qos": 3,
            "spoofchk": "off",
            "trust": "on",
            "link_state": "enable",
            "max_tx_rate": 100000,
        }
    )
    assert sriov == {
        "cniVersion": "0.3.1",
        "name": "vf",
        "type": "sriov",
        "vlan": 100,
        "vlanQoS": 3,
        "spoofchk": "off",
        "trust": "on",
        "link_state": "enable",
        "max_tx_rate": 100000,
        "ipam": {},
    }
    ib = cni_config(
        {
            "name": "ib",
            "type": "ib-sriov",
            "resource_name": "openshift.io/mlnx_ib",
            "pkey": "0x00FF",
            "ipam": {"type": "whereabouts", "subnet": "192.168.20.0/24"},
        }
    )
    assert ib["pkey"] == "0x00FF"
    assert ib["rdmaIsolation"] is True
    assert ib["ibKubernetesEnabled"] is False
    assert ib["ipam"] == {"type": "whereabouts", "range": "192.168.20.0/24"}


def test_extra_fields_are_merged_into_the_plugin_config():
    config = cni_config(
        {"name": "m", "type": "macvlan", "master": "eth1", "extra": {"linkInContainer": False}}
    )
    assert config["linkInContainer"] is False


def test_network_attachment_definition_carries_the_json_and_the_resource_annotation():
    attachment = {
        "name": "vf",
        "type": "sriov",
        "resource_name": "openshift.io/mlnx_eth",
        "ipam": {"type": "whereabouts", "subnet": "192.168.40.0/24"},
    }
    document = network_attachment_definition(attachment, "training", labels={"team": "ml"})
    assert document["apiVersion"] == "k8s.cni.cncf.io/v1"
    assert document["kind"] == "NetworkAttachmentDefinition"
    assert document["metadata"] == {
        "name": "vf",
        "namespace": "training",
        "labels": {"app.kubernetes.io/managed-by": "gpuops.training", "team": "ml"},
        "annotations": {"k8s.v1.cni.cncf.io/resourceName": "openshift.io/mlnx_eth"},
    }
    assert json.loads(document["spec"]["config"]) == cni_config(attachment)
    # The same input gives the same text: a second run changes nothing.
    assert network_attachment_definition(attachment, "training", labels={"team": "ml"}) == document


def test_an_attachment_namespace_overrides_the_default():
    document = network_attachment_definition(
        {"name": "m", "type": "macvlan", "master": "eth1", "namespace": "other"}, "training"
    )
    assert document["metadata"]["namespace"] == "other"
    assert "annotations" not in document["metadata"]


def test_render_ipam_without_optional_fields():
    assert render_ipam({"type": "host-local", "subnet": "fd00:10::/64"}) == {
        "type": "host-local",
        "ranges": [[{"subnet": "fd00:10::/64"}]],
    }


# --------------------------------------------------------------------------- IPAM checks


@pytest.mark.parametrize(
    ("ipam", "message"),
    [
        (
            {"type": "host-local", "subnet": "192.168.10.0"},
            "ipam.subnet must be a CIDR such as 192.168.10.0/24",
        ),
        (
            {"type": "host-local", "subnet": "192.168.300.0/24"},
            "ipam.subnet '192.168.300.0/24' is not a valid CIDR",
        ),
        (
            {"type": "host-local", "subnet": "192.168.10.0/33"},
            "ipam.subnet '192.168.10.0/33' is not a valid CIDR",
        ),
        (
            {"type": "host-local", "subnet": "192.168.10.5/24"},
            "ipam.subnet '192.168.10.5/24' has host bits set: the network is 192.168.10.0/24",
        ),
        (
            dict(HOST_LOCAL, range_start="192.168.11.100"),
            "ipam.range_start 192.168.11.100 is outside ipam.subnet 192.168.10.0/24",
        ),
        (
            dict(HOST_LOCAL, range_end="10.0.0.1"),
            "ipam.range_end 10.0.0.1 is outside ipam.subnet 192.168.10.0/24",
        ),
        (
            dict(HOST_LOCAL, range_end="192.168.10.50"),
            "ipam.range_start 192.168.10.100 is after ipam.range_end",
        ),
        (dict(HOST_LOCAL, gateway="192.168.9.1"), "ipam.gateway 192.168.9.1 is outside ipam.subnet"),
        (
            dict(HOST_LOCAL, gateway="192.168.10.255"),
            "ipam.gateway 192.168.10.255 is the network or broadcast address of 192.168.10.0/24",
        ),
        (dict(HOST_LOCAL, range_start="192.168.10.0"), "ipam.range_start 192.168.10.0 is the network"),
        (dict(HOST_LOCAL, gateway="192.168.10.x"), "ipam.gateway '192.168.10.x' is not an IP address"),
        (
            dict(HOST_LOCAL, gateway="fd00::1"),
            "ipam.gateway fd00::1 is IPv6 but subnet 192.168.10.0/24 is IPv4",
        ),
        ({"type": "dhcp", "subnet": "192.168.10.0/24"}, "ipam.type must be one of host-local, whereabouts"),
        (dict(HOST_LOCAL, rangeStart="192.168.10.5"), "ipam: unknown key rangeStart"),
        (dict(HOST_LOCAL, exclude=["192.168.10.0/28"]), "ipam: unknown key exclude"),
        (
            {"type": "whereabouts", "subnet": "10.10.0.0/16", "exclude": ["10.20.0.0/24"]},
            r"ipam.exclude\[0\] 10.20.0.0/24 is outside ipam.subnet 10.10.0.0/16",
        ),
        (
            dict(HOST_LOCAL, routes=[{"dst": "10.0.0.0/8", "gw": "10.0.0.1"}]),
            r"ipam.routes\[0\].gw 10.0.0.1 is outside ipam.subnet 192.168.10.0/24",
        ),
        (
            dict(HOST_LOCAL, routes=[{"dst": "10.0.0.1/8"}]),
            r"ipam.routes\[0\].dst '10.0.0.1/8' has host bits set",
        ),
        (dict(HOST_LOCAL, routes=[{"dst": "fd00::/8"}]), r"ipam.routes\[0\].dst fd00::/8 is IPv6"),
        ("192.168.10.0/24", "ipam must be a mapping with type and subnet"),
    ],
)
def test_ipam_problems_name_the_field(ipam, message):
    problems = ipam_problems(ipam)
    assert any(re.search(message, problem) for problem in problems), problems


def test_valid_ipam_in_both_families_has_no_problems():
    assert ipam_problems(HOST_LOCAL) == []
    assert (
        ipam_problems(
            {
                "type": "whereabouts",
                "subnet": "fd00:10::/64",
                "range_start": "fd00:10::10",
                "range_end": "fd00:10::ff",
                "gateway": "fd00:10::1",
                "exclude": ["fd00:10::/120"],
                "routes": [{"dst": "fd00::/8", "gw": "fd00:10::1"}],
            }
        )
        == []
    )
    # A /31 point-to-point subnet has two usable addresses (RFC 3021).
    assert ipam_problems({"type": "host-local", "subnet": "10.0.0.0/31", "range_start": "10.0.0.0"}) == []


# --------------------------------------------------------------------------- attachment checks


@pytest.mark.parametrize(
    ("attachment", "message"),
    [
        ({"name": "roce", "type": "macvlan"}, r"\(roce\): master is required for type macvlan"),
        ({"name": "roce", "type": "ipvlan", "master": ""}, r"\(roce\): master is required for type ipvlan"),
        (
            {"name": "r", "type": "macvlan", "master": "a-very-long-ifname"},
            "master must be a host interface name",
        ),
        (
            {"name": "r", "type": "macvlan", "master": "eth0", "mode": "l2"},
            "mode must be one of bridge, private",
        ),
        (
            {"name": "r", "type": "ipvlan", "master": "eth0", "mode": "bridge"},
            "mode must be one of l2, l3, l3s",
        ),
        (
            {"name": "r", "type": "bridge"},
            "type must be one of macvlan, ipvlan, host-device, sriov, ib-sriov",
        ),
        ({"name": "R_1", "type": "macvlan", "master": "eth0"}, "name must be a DNS-1123 label"),
        ({"name": "r", "type": "macvlan", "master": "eth0", "vlan": 5}, "unknown key vlan for type macvlan"),
        ({"name": "r", "type": "macvlan", "master": "eth0", "mtu": 10}, "mtu must be from 68 to 65535"),
        (
            {"name": "h", "type": "host-device"},
            "host-device needs one of device, hwaddr, kernelpath, pci_bus_id",
        ),
        ({"name": "h", "type": "host-device", "device": "a", "hwaddr": "0c:42:a1:00:00:01"}, "give one of"),
        ({"name": "h", "type": "host-device", "pci_bus_id": "3b:00"}, "pci_bus_id must be a PCI address"),
        ({"name": "h", "type": "host-device", "hwaddr": "0c42a1000001"}, "hwaddr must be a MAC address"),
        ({"name": "v", "type": "sriov"}, "resource_name is required for type sriov"),
        ({"name": "v", "type": "sriov", "resource_name": "mlnx"}, "resource_name must have a domain prefix"),
        (
            {"name": "v", "type": "sriov", "resource_name": "a.io/x", "vlan": 4095},
            "vlan must be from 0 to 4094",
        ),
        (
            {"name": "v", "type": "sriov", "resource_name": "a.io/x", "trust": True},
            "trust must be one of on, off",
        ),
        (
            {"name": "i", "type": "ib-sriov", "resource_name": "a.io/x", "pkey": 255},
            "pkey must be a hex string",
        ),
        (
            {"name": "i", "type": "ib-sriov", "resource_name": "a.io/x", "link_state": "up"},
            "link_state must be one",
        ),
        (
            {"name": "m", "type": "macvlan", "master": "eth0", "extra": {"type": "x"}},
            "extra must not set type",
        ),
        (
            {"name": "m", "type": "macvlan", "master": "eth0", "cni_version": "1.0"},
            "cni_version must be a version",
        ),
        (
            {"name": "m", "type": "macvlan", "master": "eth0", "ipam": {"type": "host-local", "subnet": "x"}},
            r"attachment \(m\): ipam.subnet must be a CIDR",
        ),
    ],
)
def test_attachment_problems_name_the_network_and_field(attachment, message):
    problems = attachment_problems(attachment)
    assert any(re.search(message, problem) for problem in problems), problems


def test_cni_config_refuses_invalid_input_with_every_problem():
    with pytest.raises(NetworkError, match=r"attachment \(roce\): master is required.*ipam.range_end"):
        cni_config({"name": "roce", "type": "macvlan", "ipam": dict(HOST_LOCAL, range_end="10.0.0.1")})


# --------------------------------------------------------------------------- SR-IOV


POLICY = {
    "name": "mlnx-ib",
    "resource_name": "mlnx_ib",
    "num_vfs": 8,
    "nic_selector": {"vendor": "15b3", "device_id": "101b", "pf_names": ["ibs1f0"]},
    "is_rdma": True,
    "link_type": "IB",
    "priority": 10,
}


def test_sriov_policy_spec_uses_the_crd_field_names():
    document = sriov_network_node_policy(POLICY, "sriov-network-operator")
    assert document["apiVersion"] == "sriovnetwork.openshift.io/v1"
    assert document["metadata"]["namespace"] == "sriov-network-operator"
    assert document["spec"] == {
        "resourceName": "mlnx_ib",
        "numVfs": 8,
        "nicSelector": {"vendor": "15b3", "deviceID": "101b", "pfNames": ["ibs1f0"]},
        "nodeSelector": {"feature.node.kubernetes.io/network-sriov.capable": "true"},
        "deviceType": "netdevice",
        "isRdma": True,
        "linkType": "ib",
        "priority": 10,
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"resource_name": "openshift.io/mlnx"},
            "resource_name must be letters, digits and '_' without a prefix",
        ),
        ({"num_vfs": -1}, "num_vfs must be from 0 to 256"),
        ({"num_vfs": "8"}, "num_vfs must be a whole number"),
        ({"nic_selector": {}}, "nic_selector must select the NICs by at least one of"),
        ({"nic_selector": {"vendor": "0x15b3"}}, "nic_selector.vendor must be 4 hex digits"),
        ({"nic_selector": {"vendor": "15b3", "pf_name": ["x"]}}, "nic_selector: unknown key pf_name"),
        ({"device_type": "vfio-pci"}, "is_rdma needs device_type netdevice"),
        ({"link_type": "roce"}, "link_type must be one of eth, ib"),
        ({"priority": 100}, "priority must be from 0 to 99"),
        ({"node_selector": {}}, "node_selector must be a non-empty mapping"),
        ({"numVfs": 8}, "unknown key numVfs"),
    ],
)
def test_sriov_policy_problems(changes, message):
    problems = sriov_policy_problems(dict(POLICY, **changes), "secondary_networks_sriov_policies[0]")
    assert any(message in problem for problem in problems), problems
    assert all(problem.startswith("secondary_networks_sriov_policies[0] (mlnx-ib): ") for problem in problems)


def test_sriov_networks_render_ipam_as_a_json_string():
    network = sriov_network(
        {
            "name": "eth-net",
            "resource_name": "mlnx_eth",
            "vlan": 200,
            "spoof_chk": "off",
            "capabilities": {"ips": True},
            "ipam": {"type": "whereabouts", "subnet": "192.168.50.0/24"},
        },
        "sriov-network-operator",
        "training",
    )
    assert network["kind"] == "SriovNetwork"
    assert network["spec"]["networkNamespace"] == "training"
    assert network["spec"]["vlan"] == 200
    assert network["spec"]["spoofChk"] == "off"
    assert json.loads(network["spec"]["ipam"]) == {"type": "whereabouts", "range": "192.168.50.0/24"}
    assert json.loads(network["spec"]["capabilities"]) == {"ips": True}
    ib = sriov_network(
        {"name": "ib-net", "type": "ib-sriov", "resource_name": "mlnx_ib", "network_namespace": "other"},
        "sriov-network-operator",
        "training",
    )
    assert ib["kind"] == "SriovIBNetwork"
    assert ib["spec"] == {"resourceName": "mlnx_ib", "networkNamespace": "other", "ipam": "{}"}


def test_ib_networks_refuse_ethernet_only_fields():
    with pytest.raises(NetworkError, match="unknown key vlan for type ib-sriov"):
        sriov_network({"name": "ib", "type": "ib-sriov", "resource_name": "x", "vlan": 3}, "ns", "training")


# --------------------------------------------------------------------------- NicClusterPolicy


def test_nic_cluster_policy_with_the_rdma_shared_device_plugin():
    policy = nic_cluster_policy(
        [
            {
                "resource_name": "rdma_shared_device_a",
                "rdma_hca_max": 63,
                "vendors": ["15b3"],
                "if_names": ["ens1f0"],
            }
        ],
        "k8s-rdma-shared-dev-plugin",
        "registry.example/nvidia/mellanox",
        "network-operator-v25.7.0",
        spec_extra={
            "nvPeerDriver": {"image": "nv-peer-mem-driver", "repository": "mellanox", "version": "1.1-0"}
        },
    )
    assert policy["apiVersion"] == "mellanox.com/v1alpha1"
    assert policy["metadata"]["name"] == "nic-cluster-policy"
    assert "namespace" not in policy["metadata"]
    plugin = policy["spec"]["rdmaSharedDevicePlugin"]
    assert plugin["image"] == "k8s-rdma-shared-dev-plugin"
    assert json.loads(plugin["config"]) == {
        "configList": [
            {
                "resourceName": "rdma_shared_device_a",
                "rdmaHcaMax": 63,
                "selectors": {"vendors": ["15b3"], "ifNames": ["ens1f0"]},
            }
        ]
    }
    assert policy["spec"]["nvPeerDriver"]["version"] == "1.1-0"


# --------------------------------------------------------------------------- the role's settings


def test_role_settings_problems_name_the_variable():
    problems = networks_problems(
        base_settings(
            namespace="Training",
            attachments=[
                {
                    "name": "roce",
                    "type": "macvlan",
                    "master": "ens1f0",
                    "ipam": dict(HOST_LOCAL, subnet="10.0.0.0/8"),
                },
                {"name": "roce", "type": "macvlan", "master": "ens1f1"},
            ],
            nic_cluster_policy=True,
            rdma_shared_devices=[{"resource_name": "rdma/a"}],
            nic_cluster_policy_spec={"rdmaSharedDevicePlugin": {}},
        )
    )
    expected = [
        "secondary_networks_namespace must be a DNS-1123 label",
        "secondary_networks_attachments[0] (roce): ipam.range_start 192.168.10.100 is outside ipam.subnet"
        " 10.0.0.0/8",
        "secondary_networks_attachments[1] (roce): name 'roce' is also used by"
        " secondary_networks_attachments[0]",
        "secondary_networks_rdma_shared_devices[0] (rdma/a): resource_name must be letters",
        "secondary_networks_rdma_shared_devices[0] (rdma/a): needs at least one selector",
        "secondary_networks_nic_cluster_policy_spec must not set rdmaSharedDevicePlugin",
    ]
    for start in expected:
        assert any(problem.startswith(start) for problem in problems), (start, problems)


def test_the_same_name_in_two_namespaces_is_fine():
    attachments = [
        {"name": "roce", "type": "macvlan", "master": "ens1f0"},
        {"name": "roce", "type": "macvlan", "master": "ens1f0", "namespace": "other"},
    ]
    assert networks_problems(base_settings(attachments=attachments)) == []


def test_sriov_networks_are_checked_against_the_policies_of_the_same_run():
    policies = [dict(POLICY), dict(POLICY, name="mlnx-eth", resource_name="mlnx_eth", link_type="eth")]
    problems = networks_problems(
        base_settings(
            sriov_policies=policies,
            sriov_networks=[
                {"name": "a", "resource_name": "mlnx_other"},
                {"name": "b", "type": "ib-sriov", "resource_name": "mlnx_eth"},
                {"name": "c", "type": "sriov", "resource_name": "mlnx_ib"},
                {"name": "d", "type": "ib-sriov", "resource_name": "mlnx_ib"},
            ],
        )
    )
    assert problems == [
        "secondary_networks_sriov_networks[0] (a): resource_name 'mlnx_other' matches no"
        " secondary_networks_sriov_policies entry (their resource names: mlnx_eth, mlnx_ib)",
        "secondary_networks_sriov_networks[1] (b): type ib-sriov needs VFs with link_type ib, but the policy"
        " of resource 'mlnx_eth' has link_type eth",
        "secondary_networks_sriov_networks[2] (c): type sriov needs VFs with link_type eth, but the policy"
        " of resource 'mlnx_ib' has link_type ib",
    ]
    # Without policies in this run, a network may use any resource.
    assert (
        networks_problems(base_settings(sriov_networks=[{"name": "a", "resource_name": "elsewhere"}])) == []
    )


def test_objects_come_in_apply_order():
    settings = base_settings(
        attachments=[{"name": "roce", "type": "macvlan", "master": "ens1f0", "ipam": dict(HOST_LOCAL)}],
        sriov_policies=[dict(POLICY)],
        sriov_networks=[{"name": "ib-net", "type": "ib-sriov", "resource_name": "mlnx_ib"}],
        nic_cluster_policy=True,
        labels={"team": "ml"},
    )
    assert networks_problems(settings) == []
    objects = networks_objects(settings)
    assert [(item["kind"], item["metadata"]["name"]) for item in objects] == [
        ("NicClusterPolicy", "nic-cluster-policy"),
        ("SriovNetworkNodePolicy", "mlnx-ib"),
        ("SriovIBNetwork", "ib-net"),
        ("NetworkAttachmentDefinition", "roce"),
    ]
    assert all(item["metadata"]["labels"]["team"] == "ml" for item in objects)


def test_settings_that_are_not_lists_or_mappings():
    assert networks_problems("x") == ["secondary_networks settings must be a mapping, got str"]
    assert "secondary_networks_attachments must be a list, got dict" in networks_problems(
        base_settings(attachments={"name": "x"})
    )

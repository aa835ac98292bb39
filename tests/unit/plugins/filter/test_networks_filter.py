"""The networks and training namespace filters: thin wrappers over module_utils."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.networks import FilterModule as NetworkFilters
from ansible_collections.gpuops.training.plugins.filter.training_namespace import (
    FilterModule as NamespaceFilters,
)

NETWORKS = NetworkFilters().filters()
NAMESPACE = NamespaceFilters().filters()
ROCE = {
    "name": "roce",
    "type": "macvlan",
    "master": "ens1f0",
    "ipam": {"type": "host-local", "subnet": "192.168.10.0/24"},
}


def test_network_attachment_definition_filter():
    document = NETWORKS["network_attachment_definition"](ROCE, namespace="training", cni_version="1.0.0")
    assert document["metadata"]["namespace"] == "training"
    assert json.loads(document["spec"]["config"])["cniVersion"] == "1.0.0"


def test_network_filters_fail_naming_the_network_and_field():
    with pytest.raises(AnsibleFilterError, match=r"attachment \(roce\): master is required for type macvlan"):
        NETWORKS["cni_config"](dict(ROCE, master=""))


def test_secondary_network_objects_filter_refuses_invalid_settings_with_every_problem():
    settings = {
        "namespace": "training",
        "sriov_namespace": "sriov-network-operator",
        "cni_version": "0.3.1",
        "attachments": [dict(ROCE, ipam={"type": "host-local", "subnet": "192.168.10.1/24"})],
        "nic_cluster_policy": False,
    }
    assert NETWORKS["secondary_network_problems"](settings) == [
        "secondary_networks_attachments[0] (roce): ipam.subnet '192.168.10.1/24' has host bits set:"
        " the network is 192.168.10.0/24"
    ]
    with pytest.raises(AnsibleFilterError, match="has host bits set"):
        NETWORKS["secondary_network_objects"](settings)
    settings["attachments"] = [ROCE]
    assert [item["kind"] for item in NETWORKS["secondary_network_objects"](settings)] == [
        "NetworkAttachmentDefinition"
    ]


def test_training_namespace_filters():
    assert NAMESPACE["training_namespace_problems"]({"name": "Bad", "state": "absent"}) == [
        "training_namespace_name must be a DNS-1123 label: lower-case letters, digits and '-', starting and"
        " ending with a letter or digit, got 'Bad'"
    ]
    with pytest.raises(AnsibleFilterError, match="training_namespace_name must be a DNS-1123 label"):
        NAMESPACE["training_namespace_objects"]({"name": "Bad", "state": "absent"})

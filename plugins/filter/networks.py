# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: network_attachment_definition
short_description: Build a Multus NetworkAttachmentDefinition with a checked CNI configuration
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Builds a C(k8s.cni.cncf.io/v1) NetworkAttachmentDefinition whose C(spec.config) is the CNI
    configuration (JSON) of a secondary network for training pods - V(macvlan), V(ipvlan),
    V(host-device), V(sriov) or V(ib-sriov) - with V(host-local) or V(whereabouts) IPAM.
  - The API server stores C(spec.config) as an opaque string, so this checks the input first with
    Python's C(ipaddress) and fails naming the network and the field - a subnet that is not a CIDR or
    has host bits set, a C(range_start), C(range_end) or C(gateway) outside the subnet, a start after
    the end, a bad type or mode, a missing C(master) for macvlan and ipvlan, a missing
    C(resource_name) for sriov and ib-sriov, unknown keys.
  - "The input keys: C(name) (DNS-1123 label), C(type), optional C(namespace), C(mtu), C(resource_name)
    (the device plugin resource, set as the C(k8s.v1.cni.cncf.io/resourceName) annotation),
    C(cni_version), C(extra) (further CNI fields); macvlan and ipvlan: C(master), C(mode); host-device:
    one of C(device), C(hwaddr), C(kernelpath), C(pci_bus_id); sriov: C(vlan), C(vlan_qos), C(spoofchk),
    C(trust), C(link_state), C(min_tx_rate), C(max_tx_rate); ib-sriov: C(pkey), C(link_state),
    C(rdma_isolation) (default true), C(ib_kubernetes_enabled); C(ipam) with C(type), C(subnet),
    C(range_start), C(range_end), C(gateway), C(routes) (C(dst), C(gw)) and, for whereabouts, C(exclude)."
  - "The same plugin file holds C(cni_config) (the CNI configuration as a dict), C(secondary_network_problems)
    (every problem of the secondary_networks role's settings as a list of messages naming the variable,
    empty when valid) and C(secondary_network_objects) (the NicClusterPolicy, SriovNetworkNodePolicies,
    SriovNetworks or SriovIBNetworks and NetworkAttachmentDefinitions the role applies, in order).
    Their input is a dict of the role's variables without the C(secondary_networks_) prefix."
options:
  _input:
    description: The network, a dict with the keys above.
    type: dict
    required: true
  namespace:
    description: Namespace of the NetworkAttachmentDefinition, unless the input sets C(namespace).
    type: str
    required: true
  cni_version:
    description: CNI specification version of the configuration, unless the input sets C(cni_version).
    type: str
    default: 0.3.1
  labels:
    description: Further labels of the object.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: A macvlan network on the RoCE NIC with host-local IPAM
  kubernetes.core.k8s:
    state: present
    apply: true
    server_side_apply: {field_manager: gpuops-training}
    definition: >-
      {{ {'name': 'roce', 'type': 'macvlan', 'master': 'ens1f0', 'mtu': 9000,
          'ipam': {'type': 'host-local', 'subnet': '192.168.10.0/24',
                   'range_start': '192.168.10.100', 'range_end': '192.168.10.200'}}
         | gpuops.training.network_attachment_definition(namespace='training') }}

- name: Stop before any API call when a network is wrong
  ansible.builtin.assert:
    that: settings | gpuops.training.secondary_network_problems | length == 0
    fail_msg: "{{ settings | gpuops.training.secondary_network_problems | join('\n') }}"
  vars:
    settings:
      namespace: training
      sriov_namespace: sriov-network-operator
      cni_version: 0.3.1
      attachments:
        - {name: ib0, type: ib-sriov, resource_name: openshift.io/mlnx_ib, pkey: "0x00FF",
           ipam: {type: whereabouts, subnet: 192.168.20.0/24}}
      sriov_policies: []
      sriov_networks: []
      nic_cluster_policy: false

- name: Show the CNI configuration a network gets
  ansible.builtin.debug:
    msg: "{{ {'name': 'hd', 'type': 'host-device', 'device': 'ens2f0'} | gpuops.training.cni_config }}"
"""

RETURN = r"""
_value:
  description: The NetworkAttachmentDefinition as a dict, ready for M(kubernetes.core.k8s).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.cni import (
    DEFAULT_CNI_VERSION,
    NetworkError,
    cni_config,
    network_attachment_definition,
    networks_objects,
    networks_problems,
)


def _wrap(function, *args):
    try:
        return function(*args)
    except NetworkError as error:
        raise AnsibleFilterError(str(error)) from error


def network_attachment_definition_filter(attachment, namespace, cni_version=DEFAULT_CNI_VERSION, labels=None):
    return _wrap(network_attachment_definition, attachment, namespace, cni_version, labels)


def cni_config_filter(attachment, cni_version=DEFAULT_CNI_VERSION):
    return _wrap(cni_config, attachment, cni_version)


def secondary_network_objects_filter(settings):
    problems = networks_problems(settings)
    if problems:
        raise AnsibleFilterError("\n".join(problems))
    return networks_objects(settings)


class FilterModule:
    def filters(self):
        return {
            "network_attachment_definition": network_attachment_definition_filter,
            "cni_config": cni_config_filter,
            "secondary_network_problems": networks_problems,
            "secondary_network_objects": secondary_network_objects_filter,
        }

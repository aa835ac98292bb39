# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Secondary networks for training pods: CNI configurations and the objects that carry them.

Multus attaches the networks a pod names in ``k8s.v1.cni.cncf.io/networks``; each is a
NetworkAttachmentDefinition whose ``spec.config`` is a CNI configuration in JSON. The API
server stores that JSON as an opaque string: a wrong CIDR, a range outside its subnet or a
missing ``master`` is accepted there and only fails when a pod starts, on its node, as a
pod stuck in ContainerCreating. So everything is checked here before any API call, with
Python's ``ipaddress``, and every problem names the variable, the network and the field.

Built here, in apply order:

- the NVIDIA Network Operator's NicClusterPolicy with the RDMA shared device plugin,
- SR-IOV Network Operator SriovNetworkNodePolicies (VFs and their device-plugin resource),
- SriovNetworks and SriovIBNetworks (the operator renders their NetworkAttachmentDefinition),
- NetworkAttachmentDefinitions written directly: macvlan, ipvlan, host-device, sriov,
  ib-sriov, with host-local or whereabouts IPAM.

Inputs use snake_case keys; unknown keys are problems (they are usually typos). Pure
functions only: the filter plugin and the role call them, the unit tests exercise them.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re

from ansible_collections.gpuops.training.plugins.module_utils.k8s_names import (
    dns_label_problem,
    dns_subdomain_problem,
    labels_problems,
    qualified_name_problem,
)

PREFIX = "secondary_networks_"
DEFAULT_CNI_VERSION = "0.3.1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuops.training"}
NAD_API_VERSION = "k8s.cni.cncf.io/v1"
SRIOV_API_VERSION = "sriovnetwork.openshift.io/v1"
NIC_API_VERSION = "mellanox.com/v1alpha1"
# The NVIDIA Network Operator reconciles only the NicClusterPolicy of this name.
NIC_CLUSTER_POLICY_NAME = "nic-cluster-policy"
RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"

NETWORK_TYPES = ("macvlan", "ipvlan", "host-device", "sriov", "ib-sriov")
IPAM_TYPES = ("host-local", "whereabouts")
MODES = {"macvlan": ("bridge", "private", "vepa", "passthru", "source"), "ipvlan": ("l2", "l3", "l3s")}
DEFAULT_MODES = {"macvlan": "bridge", "ipvlan": "l2"}
HOST_DEVICE_KEYS = ("device", "hwaddr", "kernelpath", "pci_bus_id")
ON_OFF = ("on", "off")
LINK_STATES = ("auto", "enable", "disable")

COMMON_KEYS = ("name", "type", "namespace", "ipam", "mtu", "resource_name", "cni_version", "extra")
TYPE_KEYS = {
    "macvlan": ("master", "mode"),
    "ipvlan": ("master", "mode"),
    "host-device": HOST_DEVICE_KEYS,
    "sriov": ("vlan", "vlan_qos", "spoofchk", "trust", "link_state", "min_tx_rate", "max_tx_rate"),
    "ib-sriov": ("pkey", "link_state", "rdma_isolation", "ib_kubernetes_enabled"),
}
IPAM_KEYS = {
    "host-local": ("type", "subnet", "range_start", "range_end", "gateway", "routes"),
    "whereabouts": ("type", "subnet", "range_start", "range_end", "gateway", "routes", "exclude"),
}

POLICY_KEYS = (
    "name",
    "resource_name",
    "num_vfs",
    "nic_selector",
    "node_selector",
    "device_type",
    "is_rdma",
    "link_type",
    "mtu",
    "priority",
    "extra",
)
NIC_SELECTOR_KEYS = {
    "vendor": "vendor",
    "device_id": "deviceID",
    "pf_names": "pfNames",
    "root_devices": "rootDevices",
    "net_filter": "netFilter",
}
DEFAULT_NODE_SELECTOR = {"feature.node.kubernetes.io/network-sriov.capable": "true"}
DEVICE_TYPES = ("netdevice", "vfio-pci")
LINK_TYPES = ("eth", "ib")
SRIOV_NETWORK_KINDS = {"sriov": "SriovNetwork", "ib-sriov": "SriovIBNetwork"}
SRIOV_NETWORK_KEYS = {
    "sriov": (
        "name",
        "type",
        "resource_name",
        "network_namespace",
        "ipam",
        "vlan",
        "vlan_qos",
        "spoof_chk",
        "trust",
        "link_state",
        "min_tx_rate",
        "max_tx_rate",
        "capabilities",
        "extra",
    ),
    "ib-sriov": (
        "name",
        "type",
        "resource_name",
        "network_namespace",
        "ipam",
        "link_state",
        "capabilities",
        "extra",
    ),
}
RDMA_DEVICE_KEYS = (
    "resource_name",
    "rdma_hca_max",
    "vendors",
    "device_ids",
    "drivers",
    "if_names",
    "link_types",
)
RDMA_SELECTORS = {
    "vendors": "vendors",
    "device_ids": "deviceIDs",
    "drivers": "drivers",
    "if_names": "ifNames",
    "link_types": "linkTypes",
}

_HEX4_RE = re.compile(r"^[0-9a-fA-F]{4}$")
# What the SR-IOV operator and the RDMA shared device plugin accept as a resource name
# (their own prefix, such as openshift.io/ or rdma/, is added by them).
_PLAIN_RESOURCE_RE = re.compile(r"^[a-zA-Z0-9_]+$")
_INTERFACE_RE = re.compile(r"^[^\s/:]{1,15}$")
_PKEY_RE = re.compile(r"^0[xX][0-9a-fA-F]{1,4}$")
_MAC_RE = re.compile(r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$")
_PCI_RE = re.compile(r"^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_CNI_VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


class NetworkError(ValueError):
    """An input that cannot be rendered; the message names the network and field."""


# --------------------------------------------------------------------------- helpers


def _label(where, item):
    name = item.get("name") if isinstance(item, dict) else None
    return "%s (%s)" % (where, name) if isinstance(name, str) and name else where


def _int_problem(value, minimum, maximum):
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be a whole number from %d to %d, got %r" % (minimum, maximum, value)
    if not minimum <= value <= maximum:
        return "must be from %d to %d, got %d" % (minimum, maximum, value)
    return None


def _choice_problem(value, choices):
    if value not in choices:
        return "must be one of %s, got %r" % (", ".join(choices), value)
    return None


def _string_list_problem(value, check=None):
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        return "must be a list of non-empty strings, got %r" % (value,)
    if check:
        for item in value:
            problem = check(item)
            if problem:
                return problem
    return None


def _unknown_keys(item, allowed, context=""):
    unknown = sorted(str(key) for key in set(item) - set(allowed))
    if unknown:
        return "unknown key%s %s%s (allowed: %s)" % (
            "s" if len(unknown) > 1 else "",
            ", ".join(unknown),
            context,
            ", ".join(allowed),
        )
    return None


def _hex4_problem(value):
    if not isinstance(value, str) or not _HEX4_RE.match(value):
        return "must be 4 hex digits as a string, such as '15b3', got %r" % (value,)
    return None


# --------------------------------------------------------------------------- IPAM


def _network(value):
    """(network, problem): a CIDR with no host bits set."""
    if not isinstance(value, str) or "/" not in value:
        return None, "must be a CIDR such as 192.168.10.0/24, got %r" % (value,)
    try:
        return ipaddress.ip_network(value, strict=True), None
    except ValueError:
        try:
            loose = ipaddress.ip_network(value, strict=False)
        except ValueError:
            return None, "%r is not a valid CIDR (such as 192.168.10.0/24)" % value
        return None, "%r has host bits set: the network is %s" % (value, loose)


def _address(value):
    try:
        return ipaddress.ip_address(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _usable(subnet, address):
    """Whether an address may be handed out or used as gateway in the subnet."""
    if address not in subnet:
        return False
    if subnet.version == 4:
        # /31 and /32 have no network or broadcast address (RFC 3021).
        return subnet.prefixlen >= 31 or address not in (subnet.network_address, subnet.broadcast_address)
    return subnet.prefixlen >= 127 or address != subnet.network_address


def ipam_problems(ipam, where="ipam"):
    """Problems of an IPAM section; each starts with ``where``."""
    if not isinstance(ipam, dict):
        return ["%s must be a mapping with type and subnet, got %r" % (where, ipam)]
    ipam_type = ipam.get("type")
    problem = _choice_problem(ipam_type, IPAM_TYPES)
    if problem:
        return ["%s.type %s" % (where, problem)]
    problems = []
    problem = _unknown_keys(ipam, IPAM_KEYS[ipam_type])
    if problem:
        problems.append("%s: %s" % (where, problem))
    subnet, problem = _network(ipam.get("subnet"))
    if problem:
        return problems + ["%s.subnet %s" % (where, problem)]

    addresses = {}
    for key in ("range_start", "range_end", "gateway"):
        if ipam.get(key) in (None, ""):
            continue
        address = _address(ipam[key])
        if address is None:
            problems.append("%s.%s %r is not an IP address" % (where, key, ipam[key]))
        elif address.version != subnet.version:
            problems.append(
                "%s.%s %s is IPv%d but subnet %s is IPv%d"
                % (where, key, address, address.version, subnet, subnet.version)
            )
        elif address not in subnet:
            problems.append("%s.%s %s is outside %s.subnet %s" % (where, key, address, where, subnet))
        elif not _usable(subnet, address):
            problems.append(
                "%s.%s %s is the network or broadcast address of %s" % (where, key, address, subnet)
            )
        else:
            addresses[key] = address
    if (
        "range_start" in addresses
        and "range_end" in addresses
        and addresses["range_start"] > addresses["range_end"]
    ):
        problems.append(
            "%s.range_start %s is after %s.range_end %s"
            % (where, addresses["range_start"], where, addresses["range_end"])
        )

    routes = ipam.get("routes", [])
    if not isinstance(routes, list):
        problems.append("%s.routes must be a list of {dst, gw}, got %r" % (where, routes))
        routes = []
    for index, route in enumerate(routes):
        label = "%s.routes[%d]" % (where, index)
        if not isinstance(route, dict):
            problems.append("%s must be a mapping with dst and optional gw, got %r" % (label, route))
            continue
        problem = _unknown_keys(route, ("dst", "gw"))
        if problem:
            problems.append("%s: %s" % (label, problem))
        destination, problem = _network(route.get("dst"))
        if problem:
            problems.append("%s.dst %s" % (label, problem))
        elif destination.version != subnet.version:
            problems.append(
                "%s.dst %s is IPv%d but subnet %s is IPv%d"
                % (label, destination, destination.version, subnet, subnet.version)
            )
        if route.get("gw") not in (None, ""):
            gateway = _address(route["gw"])
            if gateway is None:
                problems.append("%s.gw %r is not an IP address" % (label, route["gw"]))
            elif gateway.version != subnet.version or gateway not in subnet:
                problems.append(
                    "%s.gw %s is outside %s.subnet %s: a route's gateway must be on the network"
                    % (label, gateway, where, subnet)
                )

    exclude = ipam.get("exclude", [])
    if not isinstance(exclude, list):
        problems.append("%s.exclude must be a list of CIDRs, got %r" % (where, exclude))
        exclude = []
    for index, entry in enumerate(exclude):
        network, problem = _network(entry)
        if problem:
            problems.append("%s.exclude[%d] %s" % (where, index, problem))
        elif network.version != subnet.version or not network.subnet_of(subnet):
            problems.append(
                "%s.exclude[%d] %s is outside %s.subnet %s" % (where, index, network, where, subnet)
            )
    return problems


def render_ipam(ipam):
    """The CNI ``ipam`` section: host-local with ``ranges``, or whereabouts."""
    ipam_type = ipam["type"]
    routes = [
        dict({"dst": route["dst"]}, **({"gw": route["gw"]} if route.get("gw") else {}))
        for route in ipam.get("routes") or []
    ]
    if ipam_type == "host-local":
        address_range = {"subnet": ipam["subnet"]}
        for key, field in (("range_start", "rangeStart"), ("range_end", "rangeEnd"), ("gateway", "gateway")):
            if ipam.get(key):
                address_range[field] = ipam[key]
        rendered = {"type": "host-local", "ranges": [[address_range]]}
    else:
        rendered = {"type": "whereabouts", "range": ipam["subnet"]}
        for key in ("range_start", "range_end", "gateway"):
            if ipam.get(key):
                rendered[key] = ipam[key]
        if ipam.get("exclude"):
            rendered["exclude"] = list(ipam["exclude"])
    if routes:
        rendered["routes"] = routes
    return rendered


# --------------------------------------------------------------------------- attachments


def attachment_problems(attachment, where="attachment"):
    """Problems of one NetworkAttachmentDefinition input; each starts with ``where (name)``."""
    if not isinstance(attachment, dict):
        return ["%s must be a mapping with name, type and ipam, got %r" % (where, attachment)]
    label = _label(where, attachment)
    problems = []

    def add(message):
        problems.append("%s: %s" % (label, message))

    problem = dns_label_problem(attachment.get("name"))
    if problem:
        add("name " + problem)
    network_type = attachment.get("type")
    problem = _choice_problem(network_type, NETWORK_TYPES)
    if problem:
        add("type " + problem)
        return problems
    problem = _unknown_keys(attachment, COMMON_KEYS + TYPE_KEYS[network_type], " for type " + network_type)
    if problem:
        add(problem)
    if attachment.get("namespace") not in (None, ""):
        problem = dns_label_problem(attachment["namespace"])
        if problem:
            add("namespace " + problem)
    if attachment.get("cni_version") not in (None, "") and not _CNI_VERSION_RE.match(
        str(attachment["cni_version"])
    ):
        add("cni_version must be a version such as '0.3.1' or '1.0.0', got %r" % attachment["cni_version"])
    if "mtu" in attachment:
        problem = _int_problem(attachment["mtu"], 68, 65535)
        if problem:
            add("mtu " + problem)
    resource = attachment.get("resource_name")
    if resource not in (None, ""):
        problem = qualified_name_problem(resource, require_prefix=True)
        if problem:
            add("resource_name %s (the device plugin's resource, such as openshift.io/mlnx_rdma)" % problem)
    elif network_type in ("sriov", "ib-sriov"):
        add(
            "resource_name is required for type %s: the device plugin resource its VFs come from,"
            " such as openshift.io/mlnx_rdma" % network_type
        )
    extra = attachment.get("extra", {})
    if not isinstance(extra, dict):
        add("extra must be a mapping of further CNI fields, got %r" % (extra,))
    else:
        clash = sorted(set(extra) & {"cniVersion", "name", "type", "ipam"})
        if clash:
            add("extra must not set %s; use the attachment's own keys" % ", ".join(clash))

    if network_type in MODES:
        master = attachment.get("master")
        if master in (None, ""):
            add(
                "master is required for type %s: the host interface it attaches to, such as ens1f0"
                % network_type
            )
        elif not isinstance(master, str) or not _INTERFACE_RE.match(master):
            add(
                "master must be a host interface name (at most 15 characters, no '/', ':' or spaces), got %r"
                % master
            )
        if "mode" in attachment:
            problem = _choice_problem(attachment["mode"], MODES[network_type])
            if problem:
                add("mode %s for type %s" % (problem, network_type))
    elif network_type == "host-device":
        given = [key for key in HOST_DEVICE_KEYS if attachment.get(key) not in (None, "")]
        if len(given) > 1:
            add("give one of %s, got %s" % (", ".join(HOST_DEVICE_KEYS), ", ".join(given)))
        elif not given and resource in (None, ""):
            add(
                "host-device needs one of %s, or a resource_name whose device plugin picks the device"
                % ", ".join(HOST_DEVICE_KEYS)
            )
        if attachment.get("device") not in (None, "") and not _INTERFACE_RE.match(str(attachment["device"])):
            add("device must be a host interface name, got %r" % attachment["device"])
        if attachment.get("hwaddr") not in (None, "") and not _MAC_RE.match(str(attachment["hwaddr"])):
            add("hwaddr must be a MAC address such as 0c:42:a1:00:00:01, got %r" % attachment["hwaddr"])
        if attachment.get("pci_bus_id") not in (None, "") and not _PCI_RE.match(
            str(attachment["pci_bus_id"])
        ):
            add("pci_bus_id must be a PCI address such as 0000:3b:00.0, got %r" % attachment["pci_bus_id"])
    elif network_type == "sriov":
        if "vlan" in attachment:
            problem = _int_problem(attachment["vlan"], 0, 4094)
            if problem:
                add("vlan " + problem)
        if "vlan_qos" in attachment:
            problem = _int_problem(attachment["vlan_qos"], 0, 7)
            if problem:
                add("vlan_qos " + problem)
        for key in ("spoofchk", "trust"):
            if key in attachment:
                problem = _choice_problem(attachment[key], ON_OFF)
                if problem:
                    add("%s %s" % (key, problem))
        for key in ("min_tx_rate", "max_tx_rate"):
            if key in attachment:
                problem = _int_problem(attachment[key], 0, 1000000)
                if problem:
                    add("%s %s (Mbps)" % (key, problem))
    elif network_type == "ib-sriov":
        if "pkey" in attachment and (
            not isinstance(attachment["pkey"], str) or not _PKEY_RE.match(attachment["pkey"])
        ):
            add("pkey must be a hex string such as '0x00FF', got %r" % (attachment["pkey"],))
        for key in ("rdma_isolation", "ib_kubernetes_enabled"):
            if key in attachment and not isinstance(attachment[key], bool):
                add("%s must be true or false, got %r" % (key, attachment[key]))
    if "link_state" in attachment:
        problem = _choice_problem(attachment["link_state"], LINK_STATES)
        if problem:
            add("link_state " + problem)

    if attachment.get("ipam") not in (None, {}):
        problems.extend("%s: %s" % (label, problem) for problem in ipam_problems(attachment["ipam"]))
    return problems


def cni_config(attachment, cni_version=DEFAULT_CNI_VERSION):
    """The CNI configuration of one attachment as a dict (valid input assumed)."""
    problems = attachment_problems(attachment)
    if problems:
        raise NetworkError("; ".join(problems))
    network_type = attachment["type"]
    config = {
        "cniVersion": str(attachment.get("cni_version") or cni_version),
        "name": attachment["name"],
        "type": network_type,
    }
    if network_type in MODES:
        config["master"] = attachment["master"]
        config["mode"] = attachment.get("mode", DEFAULT_MODES[network_type])
    elif network_type == "host-device":
        for key, field in (
            ("device", "device"),
            ("hwaddr", "hwaddr"),
            ("kernelpath", "kernelpath"),
            ("pci_bus_id", "pciBusID"),
        ):
            if attachment.get(key):
                config[field] = attachment[key]
    elif network_type == "sriov":
        for key, field in (
            ("vlan", "vlan"),
            ("vlan_qos", "vlanQoS"),
            ("spoofchk", "spoofchk"),
            ("trust", "trust"),
            ("link_state", "link_state"),
            ("min_tx_rate", "min_tx_rate"),
            ("max_tx_rate", "max_tx_rate"),
        ):
            if key in attachment:
                config[field] = attachment[key]
    else:  # ib-sriov
        if "pkey" in attachment:
            config["pkey"] = attachment["pkey"]
        if "link_state" in attachment:
            config["link_state"] = attachment["link_state"]
        config["rdmaIsolation"] = attachment.get("rdma_isolation", True)
        config["ibKubernetesEnabled"] = attachment.get("ib_kubernetes_enabled", False)
    if "mtu" in attachment:
        config["mtu"] = attachment["mtu"]
    config.update(copy.deepcopy(attachment.get("extra") or {}))
    config["ipam"] = render_ipam(attachment["ipam"]) if attachment.get("ipam") else {}
    return config


def config_json(config):
    """The JSON text stored in spec.config: stable, so a second run changes nothing."""
    return json.dumps(config, indent=2)


def network_attachment_definition(attachment, namespace, cni_version=DEFAULT_CNI_VERSION, labels=None):
    """A NetworkAttachmentDefinition whose spec.config is the attachment's CNI JSON."""
    config = cni_config(attachment, cni_version)
    if labels is not None and not isinstance(labels, dict):
        raise NetworkError(
            "labels must be a mapping of label names to values, got %s" % type(labels).__name__
        )
    metadata = {
        "name": attachment["name"],
        "namespace": attachment.get("namespace") or namespace,
        "labels": dict(MANAGED_BY, **(labels or {})),
    }
    if attachment.get("resource_name"):
        metadata["annotations"] = {RESOURCE_NAME_ANNOTATION: attachment["resource_name"]}
    return {
        "apiVersion": NAD_API_VERSION,
        "kind": "NetworkAttachmentDefinition",
        "metadata": metadata,
        "spec": {"config": config_json(config)},
    }


# --------------------------------------------------------------------------- SR-IOV


def sriov_policy_problems(policy, where="sriov_policy"):
    if not isinstance(policy, dict):
        return [
            "%s must be a mapping with name, resource_name, num_vfs and nic_selector, got %r"
            % (where, policy)
        ]
    label = _label(where, policy)
    problems = []

    def add(message):
        problems.append("%s: %s" % (label, message))

    problem = _unknown_keys(policy, POLICY_KEYS)
    if problem:
        add(problem)
    problem = dns_subdomain_problem(policy.get("name"))
    if problem:
        add("name " + problem)
    resource = policy.get("resource_name")
    if not isinstance(resource, str) or not _PLAIN_RESOURCE_RE.match(resource):
        add(
            "resource_name must be letters, digits and '_' without a prefix (the operator adds its own,"
            " such as openshift.io/), got %r" % (resource,)
        )
    problem = _int_problem(policy.get("num_vfs"), 0, 256)
    if problem:
        add("num_vfs " + problem)
    selector = policy.get("nic_selector")
    if not isinstance(selector, dict) or not any(selector.get(key) for key in NIC_SELECTOR_KEYS):
        add(
            "nic_selector must select the NICs by at least one of %s, got %r"
            % (", ".join(NIC_SELECTOR_KEYS), selector)
        )
    else:
        problem = _unknown_keys(selector, tuple(NIC_SELECTOR_KEYS))
        if problem:
            add("nic_selector: " + problem)
        for key in ("vendor", "device_id"):
            if selector.get(key) not in (None, ""):
                problem = _hex4_problem(selector[key])
                if problem:
                    add("nic_selector.%s %s" % (key, problem))
        for key in ("pf_names", "root_devices"):
            if selector.get(key) not in (None, []):
                problem = _string_list_problem(selector[key])
                if problem:
                    add("nic_selector.%s %s" % (key, problem))
        if selector.get("net_filter") not in (None, "") and not isinstance(selector["net_filter"], str):
            add("nic_selector.net_filter must be a string, got %r" % (selector["net_filter"],))
    node_selector = policy.get("node_selector", DEFAULT_NODE_SELECTOR)
    if not isinstance(node_selector, dict) or not node_selector:
        add("node_selector must be a non-empty mapping of node labels, got %r" % (node_selector,))
    else:
        problems.extend(
            "%s: %s" % (label, problem) for problem in labels_problems(node_selector, "node_selector")
        )
    if "device_type" in policy:
        problem = _choice_problem(policy["device_type"], DEVICE_TYPES)
        if problem:
            add("device_type " + problem)
    if "is_rdma" in policy and not isinstance(policy["is_rdma"], bool):
        add("is_rdma must be true or false, got %r" % (policy["is_rdma"],))
    if policy.get("is_rdma") is True and policy.get("device_type") == "vfio-pci":
        add("is_rdma needs device_type netdevice: the operator refuses RDMA with vfio-pci")
    if "link_type" in policy:
        problem = _choice_problem(str(policy["link_type"]).lower(), LINK_TYPES)
        if problem:
            add("link_type " + problem)
    if "mtu" in policy:
        problem = _int_problem(policy["mtu"], 1, 65535)
        if problem:
            add("mtu " + problem)
    if "priority" in policy:
        problem = _int_problem(policy["priority"], 0, 99)
        if problem:
            add("priority %s (0 is the highest)" % problem)
    if not isinstance(policy.get("extra", {}), dict):
        add("extra must be a mapping of further spec fields, got %r" % (policy["extra"],))
    return problems


def sriov_network_node_policy(policy, namespace, labels=None):
    problems = sriov_policy_problems(policy)
    if problems:
        raise NetworkError("; ".join(problems))
    selector = {
        NIC_SELECTOR_KEYS[key]: value
        for key, value in policy["nic_selector"].items()
        if value not in (None, "", [])
    }
    spec = {
        "resourceName": policy["resource_name"],
        "numVfs": policy["num_vfs"],
        "nicSelector": selector,
        "nodeSelector": dict(policy.get("node_selector", DEFAULT_NODE_SELECTOR)),
        "deviceType": policy.get("device_type", "netdevice"),
    }
    for key, field in (
        ("is_rdma", "isRdma"),
        ("link_type", "linkType"),
        ("mtu", "mtu"),
        ("priority", "priority"),
    ):
        if key in policy:
            spec[field] = policy[key].lower() if key == "link_type" else policy[key]
    spec.update(copy.deepcopy(policy.get("extra") or {}))
    return {
        "apiVersion": SRIOV_API_VERSION,
        "kind": "SriovNetworkNodePolicy",
        "metadata": {
            "name": policy["name"],
            "namespace": namespace,
            "labels": dict(MANAGED_BY, **(labels or {})),
        },
        "spec": spec,
    }


def sriov_network_problems(network, where="sriov_network"):
    if not isinstance(network, dict):
        return ["%s must be a mapping with name, type and resource_name, got %r" % (where, network)]
    label = _label(where, network)
    problems = []

    def add(message):
        problems.append("%s: %s" % (label, message))

    network_type = network.get("type", "sriov")
    problem = _choice_problem(network_type, tuple(SRIOV_NETWORK_KINDS))
    if problem:
        add("type %s (SriovNetwork or SriovIBNetwork)" % problem)
        return problems
    problem = _unknown_keys(network, SRIOV_NETWORK_KEYS[network_type], " for type " + network_type)
    if problem:
        add(problem)
    problem = dns_label_problem(network.get("name"))
    if problem:
        add("name " + problem)
    resource = network.get("resource_name")
    if not isinstance(resource, str) or not _PLAIN_RESOURCE_RE.match(resource):
        add(
            "resource_name must be the resource_name of a SriovNetworkNodePolicy"
            " (letters, digits, '_'), got %r" % (resource,)
        )
    if network.get("network_namespace") not in (None, ""):
        problem = dns_label_problem(network["network_namespace"])
        if problem:
            add("network_namespace " + problem)
    if "vlan" in network:
        problem = _int_problem(network["vlan"], 0, 4094)
        if problem:
            add("vlan " + problem)
    if "vlan_qos" in network:
        problem = _int_problem(network["vlan_qos"], 0, 7)
        if problem:
            add("vlan_qos " + problem)
    for key in ("spoof_chk", "trust"):
        if key in network:
            problem = _choice_problem(network[key], ON_OFF)
            if problem:
                add("%s %s" % (key, problem))
    if "link_state" in network:
        problem = _choice_problem(network["link_state"], LINK_STATES)
        if problem:
            add("link_state " + problem)
    for key in ("min_tx_rate", "max_tx_rate"):
        if key in network:
            problem = _int_problem(network[key], 0, 1000000)
            if problem:
                add("%s %s (Mbps)" % (key, problem))
    if "capabilities" in network and not isinstance(network["capabilities"], dict):
        add("capabilities must be a mapping such as {ips: true}, got %r" % (network["capabilities"],))
    if not isinstance(network.get("extra", {}), dict):
        add("extra must be a mapping of further spec fields, got %r" % (network["extra"],))
    if network.get("ipam") not in (None, {}):
        problems.extend("%s: %s" % (label, problem) for problem in ipam_problems(network["ipam"]))
    return problems


def sriov_network(network, namespace, network_namespace, labels=None):
    """A SriovNetwork or SriovIBNetwork; the operator renders its NetworkAttachmentDefinition
    into ``network_namespace``."""
    problems = sriov_network_problems(network)
    if problems:
        raise NetworkError("; ".join(problems))
    network_type = network.get("type", "sriov")
    spec = {
        "resourceName": network["resource_name"],
        "networkNamespace": network.get("network_namespace") or network_namespace,
        "ipam": json.dumps(render_ipam(network["ipam"]), sort_keys=True) if network.get("ipam") else "{}",
    }
    for key, field in (
        ("vlan", "vlan"),
        ("vlan_qos", "vlanQoS"),
        ("spoof_chk", "spoofChk"),
        ("trust", "trust"),
        ("link_state", "linkState"),
        ("min_tx_rate", "minTxRate"),
        ("max_tx_rate", "maxTxRate"),
    ):
        if key in network:
            spec[field] = network[key]
    if "capabilities" in network:
        spec["capabilities"] = json.dumps(network["capabilities"], sort_keys=True)
    spec.update(copy.deepcopy(network.get("extra") or {}))
    return {
        "apiVersion": SRIOV_API_VERSION,
        "kind": SRIOV_NETWORK_KINDS[network_type],
        "metadata": {
            "name": network["name"],
            "namespace": namespace,
            "labels": dict(MANAGED_BY, **(labels or {})),
        },
        "spec": spec,
    }


# --------------------------------------------------------------------------- NicClusterPolicy


def rdma_device_problems(device, where="rdma_shared_device"):
    if not isinstance(device, dict):
        return ["%s must be a mapping with resource_name and selectors, got %r" % (where, device)]
    label = "%s (%s)" % (where, device.get("resource_name")) if device.get("resource_name") else where
    problems = []

    def add(message):
        problems.append("%s: %s" % (label, message))

    problem = _unknown_keys(device, RDMA_DEVICE_KEYS)
    if problem:
        add(problem)
    resource = device.get("resource_name")
    if not isinstance(resource, str) or not _PLAIN_RESOURCE_RE.match(resource):
        add(
            "resource_name must be letters, digits and '_' (pods request it as rdma/<resource_name>), got %r"
            % (resource,)
        )
    if "rdma_hca_max" in device:
        problem = _int_problem(device["rdma_hca_max"], 1, 10000)
        if problem:
            add("rdma_hca_max %s (pods that may share one HCA)" % problem)
    if not any(device.get(key) for key in RDMA_SELECTORS):
        add("needs at least one selector of %s, or the plugin selects no device" % ", ".join(RDMA_SELECTORS))
    for key in RDMA_SELECTORS:
        if device.get(key) in (None, []):
            continue
        check = _hex4_problem if key in ("vendors", "device_ids") else None
        problem = _string_list_problem(device[key], check)
        if problem:
            add("%s %s" % (key, problem))
    return problems


def rdma_shared_device_config(devices):
    """The JSON the RDMA shared device plugin reads (NicClusterPolicy rdmaSharedDevicePlugin.config)."""
    config_list = []
    for device in devices:
        entry = {"resourceName": device["resource_name"], "rdmaHcaMax": device.get("rdma_hca_max", 63)}
        entry["selectors"] = {
            field: list(device[key]) for key, field in RDMA_SELECTORS.items() if device.get(key)
        }
        config_list.append(entry)
    return json.dumps({"configList": config_list}, indent=2)


def nic_cluster_policy(devices, image, repository, version, spec_extra=None, labels=None):
    spec = copy.deepcopy(spec_extra or {})
    spec["rdmaSharedDevicePlugin"] = {
        "image": image,
        "repository": repository,
        "version": version,
        "config": rdma_shared_device_config(devices),
    }
    return {
        "apiVersion": NIC_API_VERSION,
        "kind": "NicClusterPolicy",
        "metadata": {"name": NIC_CLUSTER_POLICY_NAME, "labels": dict(MANAGED_BY, **(labels or {}))},
        "spec": spec,
    }


# --------------------------------------------------------------------------- the role's settings


def _list_setting(settings, key, problems):
    value = settings.get(key, [])
    if not isinstance(value, list):
        problems.append("%s%s must be a list, got %s" % (PREFIX, key, type(value).__name__))
        return []
    return value


def networks_problems(settings):
    """Every problem of the secondary_networks role's settings (keys without the
    ``secondary_networks_`` prefix), as messages naming the variable; [] when valid."""
    if not isinstance(settings, dict):
        return ["secondary_networks settings must be a mapping, got %s" % type(settings).__name__]
    problems = []
    for key in ("namespace", "sriov_namespace"):
        problem = dns_label_problem(settings.get(key))
        if problem:
            problems.append("%s%s %s" % (PREFIX, key, problem))
    if not _CNI_VERSION_RE.match(str(settings.get("cni_version", ""))):
        problems.append(
            "%scni_version must be a version such as '0.3.1', got %r" % (PREFIX, settings.get("cni_version"))
        )
    problems.extend(labels_problems(settings.get("labels") or {}, PREFIX + "labels"))

    seen = {}

    def unique(kind, namespace, item, where):
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            key = (kind, namespace if isinstance(namespace, str) else repr(namespace), item["name"])
            if key in seen:
                problems.append(
                    "%s: name %r is also used by %s" % (_label(where, item), item["name"], seen[key])
                )
            seen[key] = where

    attachments = _list_setting(settings, "attachments", problems)
    for index, attachment in enumerate(attachments):
        where = "%sattachments[%d]" % (PREFIX, index)
        problems.extend(attachment_problems(attachment, where))
        namespace = (attachment.get("namespace") if isinstance(attachment, dict) else None) or settings.get(
            "namespace"
        )
        unique("NetworkAttachmentDefinition", namespace, attachment, where)

    policies = _list_setting(settings, "sriov_policies", problems)
    link_types = {}
    for index, policy in enumerate(policies):
        where = "%ssriov_policies[%d]" % (PREFIX, index)
        problems.extend(sriov_policy_problems(policy, where))
        unique("SriovNetworkNodePolicy", settings.get("sriov_namespace"), policy, where)
        if isinstance(policy, dict) and isinstance(policy.get("resource_name"), str):
            link_types.setdefault(policy["resource_name"], set()).add(
                str(policy.get("link_type", "eth")).lower()
            )

    networks = _list_setting(settings, "sriov_networks", problems)
    for index, network in enumerate(networks):
        where = "%ssriov_networks[%d]" % (PREFIX, index)
        network_problems = sriov_network_problems(network, where)
        problems.extend(network_problems)
        if network_problems:
            continue
        unique(
            SRIOV_NETWORK_KINDS[network.get("type", "sriov")], settings.get("sriov_namespace"), network, where
        )
        # A network is only usable when a policy creates its resource: check against the
        # policies this role manages, when it manages any.
        if policies and network["resource_name"] not in link_types:
            problems.append(
                "%s: resource_name %r matches no %ssriov_policies entry (their resource names: %s)"
                % (_label(where, network), network["resource_name"], PREFIX, ", ".join(sorted(link_types)))
            )
        elif network["resource_name"] in link_types:
            wanted = "ib" if network.get("type") == "ib-sriov" else "eth"
            if wanted not in link_types[network["resource_name"]]:
                problems.append(
                    "%s: type %s needs VFs with link_type %s, but the policy of resource %r has link_type %s"
                    % (
                        _label(where, network),
                        network.get("type", "sriov"),
                        wanted,
                        network["resource_name"],
                        "/".join(sorted(link_types[network["resource_name"]])),
                    )
                )

    if settings.get("nic_cluster_policy") not in (True, False):
        problems.append(
            "%snic_cluster_policy must be true or false, got %r"
            % (PREFIX, settings.get("nic_cluster_policy"))
        )
    elif settings.get("nic_cluster_policy"):
        devices = _list_setting(settings, "rdma_shared_devices", problems)
        if not devices:
            problems.append(
                "%srdma_shared_devices must list at least one device when %snic_cluster_policy is true"
                % (PREFIX, PREFIX)
            )
        resources = {}
        for index, device in enumerate(devices):
            where = "%srdma_shared_devices[%d]" % (PREFIX, index)
            problems.extend(rdma_device_problems(device, where))
            if isinstance(device, dict) and device.get("resource_name") in resources:
                problems.append(
                    "%s: resource_name %r is also used by %s"
                    % (where, device["resource_name"], resources[device["resource_name"]])
                )
            elif isinstance(device, dict):
                resources[device.get("resource_name")] = where
        for key in ("image", "repository", "version"):
            value = settings.get("rdma_shared_device_plugin_" + key)
            if not isinstance(value, str) or not value or any(character.isspace() for character in value):
                problems.append(
                    "%srdma_shared_device_plugin_%s must be a non-empty string without spaces, got %r"
                    % (PREFIX, key, value)
                )
        extra = settings.get("nic_cluster_policy_spec", {})
        if not isinstance(extra, dict):
            problems.append(
                "%snic_cluster_policy_spec must be a mapping of further NicClusterPolicy spec fields, got %r"
                % (PREFIX, extra)
            )
        elif "rdmaSharedDevicePlugin" in extra:
            problems.append(
                "%snic_cluster_policy_spec must not set rdmaSharedDevicePlugin: use %srdma_shared_devices"
                % (PREFIX, PREFIX)
            )
    return problems


def networks_objects(settings):
    """The objects in apply order. Call networks_problems first: this assumes valid input."""
    labels = settings.get("labels") or {}
    objects = []
    if settings.get("nic_cluster_policy"):
        objects.append(
            nic_cluster_policy(
                settings["rdma_shared_devices"],
                settings["rdma_shared_device_plugin_image"],
                settings["rdma_shared_device_plugin_repository"],
                settings["rdma_shared_device_plugin_version"],
                settings.get("nic_cluster_policy_spec"),
                labels,
            )
        )
    for policy in settings.get("sriov_policies") or []:
        objects.append(sriov_network_node_policy(policy, settings["sriov_namespace"], labels))
    for network in settings.get("sriov_networks") or []:
        objects.append(sriov_network(network, settings["sriov_namespace"], settings["namespace"], labels))
    for attachment in settings.get("attachments") or []:
        objects.append(
            network_attachment_definition(attachment, settings["namespace"], settings["cni_version"], labels)
        )
    return objects

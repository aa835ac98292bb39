# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: machineconfig
short_description: Build an OpenShift MachineConfig that ships files through Ignition 3.x
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Builds a C(machineconfiguration.openshift.io/v1) MachineConfig named by the input, labelled
    C(machineconfiguration.openshift.io/role=POOL), whose C(spec.config) is an Ignition document
    with one C(storage.files) entry per file - the content as a base64 C(data:) URL, the mode as
    the integer Ignition wants (V(420) for C(0644)) and C(overwrite=true).
  - Fails naming the field when a path is not absolute, a mode is not a mode, the Ignition
    version is not 3.x or the name is not a lower-case DNS subdomain.
  - The same plugin file holds C(ignition_problems) - every problem of a MachineConfig or a bare
    Ignition document as a list of messages (empty when valid), C(ignition_files_problems) - the
    same for the files and version given to this filter - and C(ignition_data_url).
options:
  _input:
    description: Name of the MachineConfig, for example V(99-worker-crio-ulimits).
    type: str
    required: true
  pool:
    description: Role of the MachineConfigPool that must pick it up, for example V(worker).
    type: str
    required: true
  files:
    description:
      - Files to ship, each a dict with C(path) (absolute), C(content) (text), optional C(mode)
        (an integer, or an octal string such as V('0644'); default V(420)) and optional
        C(overwrite) (default V(true)).
    type: list
    elements: dict
    required: true
  version:
    description: Ignition specification version.
    type: str
    default: 3.2.0
  labels:
    description: Further labels of the MachineConfig.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Ship the CRI-O ulimits drop-in to the worker pool
  kubernetes.core.k8s:
    state: present
    definition: >-
      {{ '99-worker-crio-ulimits' | gpuops.training.machineconfig('worker', files=[{
           'path': '/etc/crio/crio.conf.d/99-ulimits.conf',
           'content': ['memlock=-1:-1'] | gpuops.training.crio_ulimits_toml,
           'mode': '0644'}]) }}

- name: Stop before any API call when a MachineConfig is wrong
  ansible.builtin.assert:
    that: my_machineconfig | gpuops.training.ignition_problems | length == 0
    fail_msg: "{{ my_machineconfig | gpuops.training.ignition_problems | join('; ') }}"
"""

RETURN = r"""
_value:
  description: The MachineConfig as a dict, ready for M(kubernetes.core.k8s).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.ignition import (
    DEFAULT_IGNITION_VERSION,
    IgnitionError,
    data_url,
    files_problems,
    ignition_problems,
    machineconfig,
    machineconfig_problems,
)


def machineconfig_filter(name, pool, files, version=DEFAULT_IGNITION_VERSION, labels=None):
    try:
        return machineconfig(name, pool, files, version, labels)
    except IgnitionError as error:
        raise AnsibleFilterError("MachineConfig %s: %s" % (name, error)) from error


def ignition_problems_filter(document):
    """Problems of a MachineConfig (kind set) or of a bare Ignition document."""
    if isinstance(document, dict) and "kind" in document:
        return machineconfig_problems(document)
    return ignition_problems(document, where="config")


def ignition_files_problems_filter(files, version=DEFAULT_IGNITION_VERSION):
    return files_problems(files, version)


def ignition_data_url_filter(content):
    try:
        return data_url(content)
    except IgnitionError as error:
        raise AnsibleFilterError(str(error)) from error


class FilterModule:
    def filters(self):
        return {
            "machineconfig": machineconfig_filter,
            "ignition_problems": ignition_problems_filter,
            "ignition_data_url": ignition_data_url_filter,
            "ignition_files_problems": ignition_files_problems_filter,
        }

#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mcp_wait
short_description: Wait until OpenShift MachineConfigPools have rolled out their MachineConfigs
description:
  - Polls each MachineConfigPool in O(pools) until it has really rolled out, and fails
    after O(timeout) seconds naming every pool that has not, with its conditions.
  - A pool counts as rolled out only when C(status.observedGeneration) has caught up with
    C(metadata.generation), C(status.configuration.name) equals C(spec.configuration.name),
    C(status.configuration.source) lists every MachineConfig in O(machine_configs) and in the
    pool's entry of O(pool_machine_configs) and none in
    O(removed_machine_configs), the rendered configuration differs from the one given for the
    pool in O(previous_rendered), C(updatedMachineCount) equals C(machineCount),
    C(degradedMachineCount) is 0, and the conditions are Updated=True, Updating=False and
    Degraded=False.
  - Checking the Updated condition alone passes too early, because right after a
    MachineConfig is applied the pool still reports the old rendered configuration as Updated.
  - A pool that does not exist fails at once.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
  - gpuops.training.kubernetes

options:
  pools:
    description: Names of the MachineConfigPools to wait for, for example V(worker).
    type: list
    elements: str
    required: true
  machine_configs:
    description: MachineConfigs every pool's rendered configuration must include.
    type: list
    elements: str
    default: []
  pool_machine_configs:
    description:
      - Per pool, further MachineConfigs its rendered configuration must include, as a dict
        of pool name to a list of names; for MachineConfigs that only some pools select.
    type: dict
    default: {}
  removed_machine_configs:
    description: MachineConfigs each pool's rendered configuration must no longer include.
    type: list
    elements: str
    default: []
  previous_rendered:
    description:
      - Per pool, the rendered configuration it ran before a MachineConfig's content changed;
        the wait then also needs the pool to have moved on to another one.
      - A changed MachineConfig keeps its name in C(source), so this is what tells the old
        render from the new one. Leave a pool out when nothing it renders changed.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for all pools together before failing.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between two reads of the pools.
    type: int
    default: 10
requirements:
  - kubernetes (the Python client)
seealso:
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Wait until the worker and gpu pools run a configuration with the CRI-O ulimits
  gpuops.training.mcp_wait:
    pools: [worker, gpu]
    pool_machine_configs:
      worker: [99-worker-crio-ulimits]
      gpu: [99-gpu-crio-ulimits]
    timeout: 3600

- name: Wait for a changed MachineConfig to replace the rendered configuration seen before
  gpuops.training.mcp_wait:
    pools: [worker]
    machine_configs: [99-worker-crio-ulimits]
    previous_rendered:
      worker: rendered-worker-5f1c0b8a7e0d4c1f9a3b2c6d8e7f6a5b
"""

RETURN = r"""
pools:
  description:
    - Per pool, the verdict of the last read - C(name), C(done), C(degraded), C(pending) (one
      line per unmet check), C(rendered_configuration), C(wanted_configuration), C(source),
      the machine counts and C(conditions) (a one-line summary).
  returned: always
  type: list
  elements: dict
  sample:
    - name: worker
      done: true
      degraded: false
      pending: []
      rendered_configuration: rendered-worker-5f1c0b8a
      wanted_configuration: rendered-worker-5f1c0b8a
      source: [00-worker, 99-worker-crio-ulimits]
      machine_count: 3
      updated_machine_count: 3
      degraded_machine_count: 0
      conditions: "Updated=True, Updating=False, Degraded=False"
elapsed:
  description: Seconds spent waiting.
  returned: always
  type: float
"""

from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    ApiException,
    build_kubernetes_module,
    client,
    connect,
    connection_error_message,
    poll,
    wait_options_problem,
)
from ansible_collections.gpuops.training.plugins.module_utils.mcp import pool_rollout, timeout_message

GROUP = "machineconfiguration.openshift.io"
VERSION = "v1"
PLURAL = "machineconfigpools"


def read_pool(custom_objects, name):
    return custom_objects.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def main():
    module = build_kubernetes_module(
        {
            "pools": {"type": "list", "elements": "str", "required": True},
            "machine_configs": {"type": "list", "elements": "str", "default": []},
            "pool_machine_configs": {"type": "dict", "default": {}},
            "removed_machine_configs": {"type": "list", "elements": "str", "default": []},
            "previous_rendered": {"type": "dict", "default": {}},
            "timeout": {"type": "int", "default": 3600},
            "poll_interval": {"type": "int", "default": 10},
        }
    )
    params = module.params
    if not params["pools"]:
        module.fail_json(msg="pools must name at least one MachineConfigPool")
    if wait_options_problem(params):
        module.fail_json(msg=wait_options_problem(params))

    expected_by_pool = {}
    for pool_name, names in params["pool_machine_configs"].items():
        if isinstance(names, str) or not isinstance(names, list):
            module.fail_json(msg="pool_machine_configs[%s] must be a list of MachineConfig names" % pool_name)
        expected_by_pool[pool_name] = [str(name) for name in names]

    api = connect(module)
    custom_objects = client.CustomObjectsApi(api)

    def read_and_judge():
        verdicts = []
        for name in params["pools"]:
            try:
                pool = read_pool(custom_objects, name)
            except ApiException as error:
                if error.status == 404:
                    module.fail_json(msg="MachineConfigPool %s not found" % name, pools=verdicts)
                module.fail_json(
                    msg="cannot read MachineConfigPool %s: %s %s" % (name, error.status, error.reason),
                    pools=verdicts,
                )
            except Exception as error:  # no answer (connection refused, TLS, DNS) or a refused value
                module.fail_json(
                    msg=connection_error_message(
                        error, api, params["kubeconfig"], "MachineConfigPool %s" % name
                    ),
                    pools=verdicts,
                )
            verdicts.append(
                pool_rollout(
                    pool,
                    params["machine_configs"] + expected_by_pool.get(name, []),
                    params["removed_machine_configs"],
                    str(params["previous_rendered"].get(name) or ""),
                )
            )
        return verdicts

    # A Degraded pool is not a failure here: it often recovers while the rollout goes on.
    outcome, verdicts, elapsed = poll(read_and_judge, params["timeout"], params["poll_interval"])
    if outcome == "done":
        module.exit_json(changed=False, pools=verdicts, elapsed=elapsed)
    module.fail_json(msg=timeout_message(verdicts, params["timeout"]), pools=verdicts, elapsed=elapsed)


if __name__ == "__main__":
    main()

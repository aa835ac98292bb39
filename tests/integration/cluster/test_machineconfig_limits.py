"""machineconfig_limits and mcp_wait against the real control plane (upstream MCP/MC CRDs).

No machine-config operator runs here: these tests write the pool's status subresource the
way the operator would and show that the wait passes only when every field agrees, that
check mode changes nothing, and that bad input and server rejections end in one message.
The full apply-and-wait cycle with a simulated operator is the Molecule scenario
molecule/machineconfig_limits.
"""

from __future__ import annotations

import copy
import json
import pathlib
import secrets
import subprocess

import jsonschema
import pytest
from kubernetes import client

from ansible_collections.gpuops.training.plugins.module_utils.ignition import (
    decode_data_url,
    machineconfig,
    machineconfig_problems,
)
from ansible_collections.gpuops.training.plugins.module_utils.mcp import pool_rollout
from ansible_collections.gpuops.training.plugins.module_utils.ulimits import render_crio_dropin
from ansible_collections.gpuops.training.plugins.modules.mcp_wait import read_pool

pytestmark = pytest.mark.slow

GROUP, VERSION = "machineconfiguration.openshift.io", "v1"
API_VERSION = GROUP + "/" + VERSION
DROPIN = render_crio_dropin(["memlock=-1:-1", "nproc=1048576:1048576", "nofile=65536:65536"])


@pytest.fixture
def pool(k8s_cluster):
    """A MachineConfigPool no operator touches, deleted afterwards, with its API."""
    name = "t-" + secrets.token_hex(4)
    api = client.CustomObjectsApi(k8s_cluster.api_client())
    api.create_cluster_custom_object(
        GROUP,
        VERSION,
        "machineconfigpools",
        {
            "apiVersion": API_VERSION,
            "kind": "MachineConfigPool",
            "metadata": {"name": name},
            "spec": {
                "machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": name}}
            },
        },
    )
    yield name, api
    api.delete_cluster_custom_object(GROUP, VERSION, "machineconfigpools", name)
    for machine_config in api.list_cluster_custom_object(GROUP, VERSION, "machineconfigs")["items"]:
        if machine_config["metadata"]["name"].startswith("99-%s-" % name):
            api.delete_cluster_custom_object(
                GROUP, VERSION, "machineconfigs", machine_config["metadata"]["name"]
            )


def _condition(condition_type, status):
    return {"type": condition_type, "status": status, "lastTransitionTime": "2026-11-22T04:00:00Z"}


def rendered_status(name, rendered, source, generation):
    return {
        "observedGeneration": generation,
        "configuration": {"name": rendered, "source": source},
        "machineCount": 2,
        "updatedMachineCount": 2,
        "readyMachineCount": 2,
        "unavailableMachineCount": 0,
        "degradedMachineCount": 0,
        "conditions": [
            _condition("Updated", "True"),
            _condition("Updating", "False"),
            _condition("Degraded", "False"),
        ],
    }


def test_wait_passes_only_when_every_stored_field_agrees(pool):
    name, api = pool
    new_mc = "99-%s-crio-ulimits" % name
    source = [{"apiVersion": API_VERSION, "kind": "MachineConfig", "name": n} for n in ("00-worker", new_mc)]
    rendered = "rendered-%s-new" % name
    # The render controller's step: a spec change, so metadata.generation goes up.
    api.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "machineconfigpools",
        name,
        {"spec": {"configuration": {"name": rendered, "source": source}}},
    )
    generation = read_pool(api, name)["metadata"]["generation"]
    done = rendered_status(name, rendered, source, generation)

    variants = {
        "stale observedGeneration": {"observedGeneration": generation - 1},
        "old rendered configuration": {"configuration": {"name": "rendered-%s-old" % name, "source": source}},
        "source without the MachineConfig": {"configuration": {"name": rendered, "source": source[:1]}},
        "one machine not updated": {"updatedMachineCount": 1},
        "a degraded machine": {"degradedMachineCount": 1},
        "Updated=False": {"conditions": [_condition("Updated", "False"), *done["conditions"][1:]]},
        "Updating=True": {
            "conditions": [done["conditions"][0], _condition("Updating", "True"), done["conditions"][2]]
        },
        "Degraded=True": {"conditions": [*done["conditions"][:2], _condition("Degraded", "True")]},
    }
    for label, change in variants.items():
        status = copy.deepcopy(done)
        status.update(change)
        api.patch_cluster_custom_object_status(GROUP, VERSION, "machineconfigpools", name, {"status": status})
        verdict = pool_rollout(read_pool(api, name), [new_mc])
        assert not verdict["done"], label
        assert len(verdict["pending"]) == 1, (label, verdict["pending"])

    api.patch_cluster_custom_object_status(GROUP, VERSION, "machineconfigpools", name, {"status": done})
    stored = read_pool(api, name)
    assert stored["status"]["configuration"]["name"] == rendered
    assert pool_rollout(stored, [new_mc])["done"]


def test_check_mode_reports_the_machineconfig_and_creates_nothing(k8s_cluster, pool, run_role):
    name, api = pool
    run = run_role(
        "machineconfig_limits",
        {
            "machineconfig_limits_pools": [name],
            "machineconfig_limits_kubeconfig": str(k8s_cluster.kubeconfig),
        },
        "--check",
        "--diff",
    )
    assert run.rc == 0, run
    assert run.reported("changed_objects") == ["MachineConfig 99-%s-crio-ulimits" % name], run
    assert "data:text/plain;charset=utf-8;base64," in run.output  # the diff shows the object
    names = [
        mc["metadata"]["name"]
        for mc in api.list_cluster_custom_object(GROUP, VERSION, "machineconfigs")["items"]
    ]
    assert "99-%s-crio-ulimits" % name not in names


def test_invalid_ignition_input_fails_before_any_api_call(tmp_path, run_role):
    # A kubeconfig that does not exist: any API call would fail with another message.
    run = run_role(
        "machineconfig_limits",
        {
            "machineconfig_limits_pools": ["worker"],
            "machineconfig_limits_kubeconfig": str(tmp_path / "absent-kubeconfig"),
            "machineconfig_limits_ignition_version": "2.2.0",
            "machineconfig_limits_extra_files": [
                {"path": "etc/nccl.conf", "content": "NCCL_DEBUG=INFO\n", "mode": "rw"}
            ],
        },
    )
    assert run.rc != 0
    assert "The MachineConfig files are not valid Ignition:" in run.output
    assert "ignition version '2.2.0' is not an Ignition 3.x version string" in run.output
    assert "files[1] (etc/nccl.conf): path 'etc/nccl.conf' must be an absolute path" in run.output
    assert "files[1] (etc/nccl.conf): mode 'rw' is not a file mode" in run.output
    assert "absent-kubeconfig" not in run.output.split("The MachineConfig files are not valid")[1]


def test_bad_ulimit_fails_naming_the_entry(tmp_path, run_role):
    run = run_role(
        "machineconfig_limits",
        {
            "machineconfig_limits_kubeconfig": str(tmp_path / "absent-kubeconfig"),
            "machineconfig_limits_ulimits": ["memlock=-1:-1", "noproc=1048576:1048576"],
        },
    )
    assert run.rc != 0
    assert "machineconfig_limits_ulimits has bad entries:" in run.output
    assert "unknown name 'noproc' (CRI-O calls it nproc)" in run.output


def test_server_rejection_names_the_machineconfig_and_field(k8s_cluster, pool, run_role):
    name, _api = pool
    run = run_role(
        "machineconfig_limits",
        {
            "machineconfig_limits_pools": [name],
            "machineconfig_limits_kubeconfig": str(k8s_cluster.kubeconfig),
            "machineconfig_limits_labels": {"team": "not a valid label value!"},
        },
    )
    assert run.rc != 0
    assert run.output.count("fatal: [localhost]") == 1, run
    message = " ".join(run.output.split())
    assert (
        "The API server rejected 1 of the 1 objects of the MachineConfigs of pool %s:"
        " - MachineConfig 99-%s-crio-ulimits: " % (name, name)
    ) in message
    assert "metadata.labels: Invalid value" in message


def test_missing_pool_is_named(k8s_cluster, run_role):
    run = run_role(
        "machineconfig_limits",
        {
            "machineconfig_limits_pools": ["no-such-pool"],
            "machineconfig_limits_kubeconfig": str(k8s_cluster.kubeconfig),
        },
    )
    assert run.rc != 0
    assert "MachineConfigPool no-such-pool not found" in run.output


IGNITION_MODULE = "github.com/coreos/ignition/v2@v2.20.0"


@pytest.fixture(scope="session")
def ignition_32_schema(k8s_cluster):
    """Upstream Ignition's own JSON schema of spec 3.2.0, read from its Go module."""
    builder = k8s_cluster.harness.builder  # its Go and module cache, where the CRD modules are
    completed = subprocess.run(
        [builder.go, "mod", "download", "-json", IGNITION_MODULE],
        env=builder.go_environment() | {"GOFLAGS": "-modcacherw"},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    module_dir = pathlib.Path(json.loads(completed.stdout)["Dir"])
    return json.loads((module_dir / "config" / "v3_2" / "schema" / "ignition.json").read_text())


def test_stored_machineconfig_passes_upstream_ignition_schema(k8s_cluster, ignition_32_schema):
    name = "99-t%s-crio-ulimits" % secrets.token_hex(3)
    document = machineconfig(
        name, "worker", [{"path": "/etc/crio/crio.conf.d/99-ulimits.conf", "content": DROPIN}]
    )
    api = client.CustomObjectsApi(k8s_cluster.api_client())
    api.create_cluster_custom_object(GROUP, VERSION, "machineconfigs", document)
    try:
        stored = api.get_cluster_custom_object(GROUP, VERSION, "machineconfigs", name)
        jsonschema.validate(stored["spec"]["config"], ignition_32_schema)
        source = stored["spec"]["config"]["storage"]["files"][0]["contents"]["source"]
        assert decode_data_url(source).decode() == DROPIN

        # The server stores a string mode without complaint (spec.config is free-form);
        # upstream's schema and the role's own check both refuse it.
        stored["spec"]["config"]["storage"]["files"][0]["mode"] = "0644"
        api.replace_cluster_custom_object(GROUP, VERSION, "machineconfigs", name, stored)
        broken = api.get_cluster_custom_object(GROUP, VERSION, "machineconfigs", name)
        assert broken["spec"]["config"]["storage"]["files"][0]["mode"] == "0644"
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken["spec"]["config"], ignition_32_schema)
        assert machineconfig_problems(broken) == [
            "MachineConfig %s: spec.config.storage.files[0]: mode must be an integer (decimal, 420 for 0644),"
            " got str '0644'" % name
        ]
    finally:
        api.delete_cluster_custom_object(GROUP, VERSION, "machineconfigs", name)

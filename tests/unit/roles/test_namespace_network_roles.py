"""training_namespace and secondary_networks: documented defaults that pass their own checks."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils.cni import networks_problems
from ansible_collections.gpuops.training.plugins.module_utils.training_namespace import namespace_problems

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
CLUSTER_ROLES = ("training_namespace", "secondary_networks")


def load(path):
    return yaml.safe_load((ROLES / path).read_text())


@pytest.mark.parametrize("role", CLUSTER_ROLES)
def test_every_variable_is_described_in_the_readme(role):
    readme = (ROLES / role / "README.md").read_text()
    for name in load(role + "/defaults/main.yml"):
        assert "`%s`" % name in readme, name


def _settings(role):
    """The settings dict the role's vars/main.yml builds, from the defaults."""
    defaults = load(role + "/defaults/main.yml")
    keys = load(role + "/vars/main.yml")[role + "_settings"]
    prefix = role + "_"
    return {key: defaults[prefix + key] for key in keys}


def test_training_namespace_settings_cover_the_defaults_and_pass():
    settings = _settings("training_namespace")
    assert namespace_problems(settings) == []


def test_secondary_networks_settings_cover_the_defaults_and_pass():
    settings = _settings("secondary_networks")
    settings["cni_version"] = str(settings["cni_version"])
    assert networks_problems(settings) == []
    settings["nic_cluster_policy"] = True
    # The image's registry is the user's to name: no default, so it is asked for.
    (problem,) = networks_problems(settings)
    assert problem.startswith("secondary_networks_rdma_shared_device_plugin_repository must be a non-empty")
    settings["rdma_shared_device_plugin_repository"] = "registry.example/nvidia/mellanox"
    assert networks_problems(settings) == []

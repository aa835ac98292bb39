"""role_settings: a role's settings - names, defaults, choices - read from its argument spec."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.module_utils import role_settings as rs
from ansible_collections.gpuops.training.plugins.module_utils import training_settings as ts


def test_defaults_are_the_argument_specs_without_the_prefix():
    defaults = rs.defaults("training_job", "training_job_")
    assert (defaults["cpu"], defaults["memory"], defaults["launcher"]) == ("8", "64Gi", "local")
    assert defaults["network"] == [] and defaults["pytorchjob_master"] is False
    # Computed by the role (a template) or without a default: the caller's to give.
    assert defaults["python"] is None and defaults["gpus_per_node"] is None
    assert rs.defaults("nccl_tests", "nccl_tests_")["fabric"] == "ib"


def test_a_pods_gpus_default_to_its_ranks_as_the_roles_do():
    assert ts.with_defaults({"nproc_per_node": 4})["gpus_per_node"] == 4
    assert ts.with_defaults({"nproc_per_node": 4, "gpus_per_node": 0})["gpus_per_node"] == 0


def test_choices_are_the_argument_specs_and_name_the_callers_variable():
    variable = rs.variable_namer("nccl_tests_")
    settings = ts.with_defaults({"fabric": "ethernet", "nccl_net_gdr_level": "FAR", "model": 7})
    assert rs.choice_problems("training_job", "training_job_", settings, variable) == [
        "nccl_tests_model must be one of retinanet_resnet50_fpn, retinanet_resnet50_fpn_v2, "
        "retinanet_resnet18_fpn, retinanet_resnet34_fpn, retinanet_resnet101_fpn, "
        "retinanet_resnext50_32x4d_fpn, got 7",
        "nccl_tests_fabric must be one of ib, roce, socket, got 'ethernet'",
        "nccl_tests_nccl_net_gdr_level must be one of LOC, PIX, PXB, PHB, SYS or empty, got 'FAR'",
    ]
    assert rs.choice_problems("training_job", "training_job_", ts.with_defaults({}), variable) == []


def test_setting_names_picks_a_roles_variables_that_carry_a_setting():
    names = ["nccl_tests_cpu", "nccl_tests_collectives", "nccl_tests_mpi_worker_command", "training_job_cpu"]
    assert ts.setting_names(names, "nccl_tests_") == ["nccl_tests_cpu", "nccl_tests_mpi_worker_command"]
    with pytest.raises(rs.SettingsError, match="names must be a list of variable names"):
        ts.setting_names("training_job_cpu")
    with pytest.raises(rs.SettingsError, match="prefix must be a variable prefix"):
        ts.setting_names([], prefix="")


def test_settings_must_be_a_mapping():
    with pytest.raises(rs.SettingsError, match="a mapping of training_job_\\* variables"):
        ts.with_defaults(["cpu"])

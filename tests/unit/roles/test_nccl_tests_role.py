"""The nccl_tests role's variables and argument spec, and what it hands to the renderers -
without a cluster or a GPU."""

from __future__ import annotations

import pathlib

import yaml

from ansible_collections.gpuops.training.plugins.module_utils import (
    nccl_tests_argv,
    training_checks,
    training_settings,
)

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"


def load(path):
    return yaml.safe_load((ROLES / path).read_text())


def options():
    return load("nccl_tests/meta/argument_specs.yml")["argument_specs"]["main"]["options"]


def test_every_default_is_in_the_argument_spec_with_the_same_value():
    defaults = load("nccl_tests/defaults/main.yml")
    spec = options()
    assert set(defaults) == set(spec)
    for name, value in defaults.items():
        assert spec[name].get("default", value) == value, name
        assert spec[name]["description"], name


def test_every_variable_is_documented_with_a_comment():
    lines = (ROLES / "nccl_tests" / "defaults" / "main.yml").read_text().splitlines()
    for number, line in enumerate(lines):
        if not line or line.startswith((" ", "#", "-")):
            continue
        # A variable, or a group of variables under one comment.
        above = number - 1
        while lines[above] and not lines[above].startswith("#") and ":" in lines[above]:
            above -= 1
        assert lines[above].startswith("#"), "%s has no comment above it" % line


def test_the_launcher_choices_are_validated_and_have_their_tasks():
    choices = options()["nccl_tests_launcher"]["choices"]
    assert choices == ["local", "ssh", "mpijob"] == list(nccl_tests_argv.LAUNCHERS)
    for launcher in choices:
        assert (ROLES / "nccl_tests" / "tasks" / ("launch_%s.yml" % launcher)).is_file()
    assert options()["nccl_tests_collectives"]["choices"] == list(nccl_tests_argv.COLLECTIVES)


def test_the_kubernetes_settings_are_named_as_the_training_job_role_names_them():
    ours = load("nccl_tests/defaults/main.yml")
    theirs = load("training_job/defaults/main.yml")
    for key in (
        "kubeconfig", "context", "namespace", "image", "nnodes", "gpus_per_node", "fabric", "network",
        "cpu", "memory", "shm_size", "rdma_resource", "rdma_per_node", "node_selector", "tolerations",
        "pod_annotations", "timeout_s", "poll_interval_s",
    ):  # fmt: skip
        assert "training_job_" + key in theirs, key
        assert "nccl_tests_" + key in ours, key


def test_the_command_line_settings_are_the_renderers_with_the_same_defaults():
    settings = load("nccl_tests/vars/main.yml")["nccl_tests_argv_settings"]
    defaults = load("nccl_tests/defaults/main.yml")
    # collective is the loop's; hosts are the play's.
    assert set(settings) | {"collective"} == set(nccl_tests_argv.DEFAULTS)
    for key, value in nccl_tests_argv.DEFAULTS.items():
        if key in ("collective", "hosts"):
            continue
        assert settings[key].startswith("{{ nccl_tests_%s" % key), key
        assert str(defaults["nccl_tests_" + key]) == str(value), key


def test_the_mpijob_settings_are_keys_the_workload_renderer_knows():
    (render,) = [
        task for task in load("nccl_tests/tasks/mpijob_collective.yml") if "ansible.builtin.set_fact" in task
    ][:1]
    settings = render["vars"]["nccl_tests_workload_settings"]
    assert settings["launcher"] == "mpijob"
    known = set(training_settings.defaults())
    assert set(settings) <= known, set(settings) - known
    # Every role variable they read is documented, but what the role computes on the way.
    computed = {"nccl_tests_run_dir", "nccl_tests_argv_of"}
    for key, value in settings.items():
        if isinstance(value, str) and value.startswith("{{ nccl_tests_"):
            variable = value[3:].split()[0].split("[")[0]
            assert variable in computed or variable in load("nccl_tests/defaults/main.yml"), (key, variable)


def test_the_workers_default_command_is_the_renderers():
    defaults = load("nccl_tests/defaults/main.yml")
    assert defaults["nccl_tests_mpi_worker_command"] == training_settings.MPI_WORKER_COMMAND


def test_mpijob_problems_name_the_nccl_tests_variables():
    """The workload filter's messages name the caller's variables (the defect: they always named
    training_job_*)."""
    found = training_checks.problems(
        {
            "launcher": "mpijob",
            "run_id": "nccl-tests-20261122T050000Z-all-reduce",
            "image": "registry.example/nccl-tests:2.21",
            "cpu": "lots",
            "mpirun_argv": ["mpirun", "all_reduce_perf"],
        },
        prefix="nccl_tests_",
    )
    assert len(found) == 1 and found[0].startswith("nccl_tests_cpu 'lots' is not a Kubernetes quantity"), (
        found
    )

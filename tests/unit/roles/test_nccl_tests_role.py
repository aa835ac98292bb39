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


def test_the_mpijob_settings_are_the_variables_named_like_training_settings():
    """The MPIJob gets every nccl_tests_* variable named like a training_job_* setting (and
    the training_job role's defaults for the rest): a variable added under such a name means
    that setting, which this list makes a deliberate choice."""
    names = list(load("nccl_tests/defaults/main.yml")) + list(load("nccl_tests/vars/main.yml"))
    names += ["nccl_tests_run_dir", "nccl_tests_argv_of", "nccl_tests_collective", "nccl_tests_workload"]
    shared = [name[len("nccl_tests_") :] for name in training_settings.setting_names(names, "nccl_tests_")]
    assert shared == sorted(
        [
            "launcher", "name", "runs_dir", "warmup_iters", "timeout_s", "nccl_debug", "env",
            "gpus_per_node", "kubeconfig", "context", "namespace", "image", "nnodes", "cpu", "memory",
            "shm_size", "fabric", "network", "rdma_resource", "rdma_per_node", "node_selector",
            "tolerations", "mpi_worker_command", "pod_annotations", "poll_interval_s",
            "gpu_toleration", "node_affinity", "spread_across_nodes", "topology_spread_constraints",
            "image_pull_secrets", "service_account", "stuck_timeout",
        ]
    )  # fmt: skip
    variables = load("nccl_tests/vars/main.yml")
    assert "training_setting_names('nccl_tests_')" in variables["nccl_tests_workload_names"]


def test_the_shared_settings_accept_what_the_training_job_role_accepts():
    ours = options()
    theirs = load("training_job/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, option in ours.items():
        other = theirs.get("training_job_" + name[len("nccl_tests_") :])
        if other and other.get("choices") and name != "nccl_tests_launcher":
            assert set(option.get("choices") or ()) <= set(other["choices"]), name


def test_the_mpijob_is_rendered_with_this_roles_prefix():
    (render,) = [
        task for task in load("nccl_tests/tasks/mpijob_collective.yml") if "ansible.builtin.set_fact" in task
    ][:1]
    assert (
        "gpuops.training.training_workload(prefix='nccl_tests_')"
        in render["ansible.builtin.set_fact"]["nccl_tests_workload"]
    )


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

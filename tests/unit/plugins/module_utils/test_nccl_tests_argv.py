"""nccl_tests_argv: the command line of one collective under the local, ssh and mpijob launchers."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.nccl_tests_argv import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils import nccl_tests_argv as na

BENCHMARK = [
    "/opt/nccl-tests/build/all_reduce_perf",
    "-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-c", "1",
]  # fmt: skip


def settings(**overrides):
    base = {"collective": "all_reduce", "gpus_per_process": 1, "gpus_per_node": 8}
    base.update(overrides)
    return base


def test_local_runs_the_binary_under_timeout():
    argv = na.nccl_tests_argv(settings(launcher="local", gpus_per_process=8, timeout_s=600))
    assert argv == ["timeout", "--kill-after=30", "600"] + BENCHMARK[:8] + ["8"] + BENCHMARK[9:]


def test_ssh_runs_mpirun_over_every_host_with_slots_the_nccl_variables_and_the_timeout():
    argv = na.nccl_tests_argv(
        settings(
            launcher="ssh",
            hosts=["10.1.0.11", "10.1.0.12", "gpu-c.example.com"],
            env={"NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "WARN", "UCX_NET_DEVICES": "mlx5_0:1"},
            mpirun="/usr/mpi/bin/mpirun",
            mpirun_extra_args=["--mca", "btl_tcp_if_include", "eth0"],
            timeout_s="900",
        )
    )
    assert argv == [
        "timeout", "--kill-after=30", "900",
        "/usr/mpi/bin/mpirun", "-np", "24", "-H", "10.1.0.11:8,10.1.0.12:8,gpu-c.example.com:8",
        "--bind-to", "none",
        # NCCL_DEBUG once, then every variable of nccl_tests_env in its order.
        "-x", "NCCL_DEBUG", "-x", "NCCL_IB_HCA", "-x", "UCX_NET_DEVICES",
        "--mca", "btl_tcp_if_include", "eth0",
    ] + BENCHMARK  # fmt: skip


def test_ssh_slots_are_the_ranks_of_each_node():
    argv = na.mpirun_argv(settings(launcher="ssh", hosts=["a", "b"], gpus_per_node=8, gpus_per_process=4))
    assert argv[:5] == ["mpirun", "-np", "4", "-H", "a:2,b:2"]
    assert argv[argv.index("-g") + 1] == "4"


def test_mpijob_leaves_the_hosts_to_the_operators_hostfile_and_the_deadline_to_the_wait():
    argv = na.nccl_tests_argv(
        settings(launcher="mpijob", nnodes=4, collective="reduce_scatter", check=False, max_bytes="1G")
    )
    assert argv == [
        "mpirun", "-np", "32", "--bind-to", "none", "-x", "NCCL_DEBUG",
        "/opt/nccl-tests/build/reduce_scatter_perf",
        "-b", "8", "-e", "1G", "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-c", "0",
    ]  # fmt: skip


def test_the_role_defaults_are_the_renderers():
    argv = na.nccl_tests_argv({"collective": "all_gather"})
    assert argv == [
        "timeout", "--kill-after=30", "1800",
        "/opt/nccl-tests/build/all_gather_perf",
        "-b", "8", "-e", "8G", "-f", "2", "-g", "8", "-n", "20", "-w", "5", "-c", "1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"launcher": "slurm"}, "nccl_tests_launcher must be one of local, ssh, mpijob, got 'slurm'"),
        ({"collective": "allreduce"}, "nccl_tests_collectives: 'allreduce' is not a collective"),
        ({"max_bytes": "8GB"}, "nccl_tests_max_bytes must be a size in nccl-tests' syntax"),
        ({"step_factor": 1}, "nccl_tests_step_factor must be an integer of at least 2, got 1"),
        ({"timeout_s": 0}, "nccl_tests_timeout_s must be an integer of at least 1, got 0"),
        ({"env": {"NCCL IB": "x"}}, "nccl_tests_env: 'NCCL IB' is not a valid environment variable name"),
        (
            {"launcher": "ssh", "hosts": ["a"], "gpus_per_node": 6, "gpus_per_process": 4},
            "nccl_tests_gpus_per_node (6) must be a multiple of nccl_tests_gpus_per_process (4)",
        ),
        ({"launcher": "ssh", "hosts": []}, "the ssh launcher needs the hosts of the play"),
        (
            {"launcher": "ssh", "hosts": ["fd00::11"]},
            "the ssh launcher's host addresses (ansible_host) must be",
        ),
        ({"launcher": "mpijob", "nnodes": 0}, "nccl_tests_nnodes must be an integer of at least 1, got 0"),
        (
            {"launcher": "mpijob", "mpirun_extra_args": "--mca x"},
            "nccl_tests_mpirun_extra_args must be a list",
        ),
    ],
)
def test_every_problem_names_its_variable(overrides, problem):
    found = na.problems(settings(**overrides))
    assert len(found) == 1 and found[0].startswith(problem), found
    with pytest.raises(na.ArgvError, match="nccl_tests_|ssh launcher"):
        na.nccl_tests_argv(settings(**overrides))


def test_settings_that_are_not_a_mapping():
    assert na.problems(["all_reduce"]) == [
        "the settings must be a mapping of nccl_tests_* variables (without the prefix), got list"
    ]


def test_the_filter_renders_and_fails_with_every_problem():
    render = FilterModule().filters()["nccl_tests_argv"]
    assert render(settings(launcher="mpijob"))[:3] == ["mpirun", "-np", "16"]
    with pytest.raises(AnsibleFilterError) as error:
        render(settings(launcher="ssh", step_factor=0))
    assert str(error.value).splitlines() == [
        "nccl_tests_step_factor must be an integer of at least 2, got 0",
        "the ssh launcher needs the hosts of the play (addresses mpirun reaches), got []",
    ]

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nccl_tests_argv
short_description: The command line of one nccl-tests collective for the local, ssh or mpijob launcher
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Returns the argv list that runs one collective of nccl-tests (C(<binaries_dir>/<collective>_perf
    -b -e -f -g -n -w -c)) the way the gpuops.training.nccl_tests role runs it.
  - V(local) runs the binary under C(timeout --kill-after=30 <timeout_s>).
  - V(ssh) runs C(mpirun -np N -H host1:slots,host2:slots --bind-to none -x NCCL_DEBUG -x <each env name>),
    then C(mpirun_extra_args) and the binary, under the same C(timeout); slots is
    C(gpus_per_node / gpus_per_process) ranks on every host and N their sum.
  - V(mpijob) runs that C(mpirun) without C(-H) (the Training Operator's hostfile names the workers)
    over C(nnodes) workers, without C(timeout) (the wait and the MPIJob's deadline stop it).
  - The input is a dict of the role's variables without their C(nccl_tests_) prefix (C(launcher),
    C(binaries_dir), C(min_bytes), C(max_bytes), C(step_factor), C(gpus_per_process), C(iters),
    C(warmup_iters), C(check), C(timeout_s), C(env), C(gpus_per_node), C(mpirun),
    C(mpirun_extra_args), C(nnodes)), plus C(collective) and, for V(ssh), C(hosts) (the addresses
    of the play's hosts, in order). Keys left out take the role's defaults.
  - Fails with every problem, each naming its role variable, when the settings are not valid. The
    same plugin file holds C(nccl_tests_argv_problems), which returns those problems as a list of
    messages (empty when valid), for an C(assert) before anything runs.
options:
  _input:
    description: The settings, keys as the role's variables without C(nccl_tests_).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Run all_reduce_perf with mpirun over two hosts, 8 ranks each
  ansible.builtin.command:
    argv: >-
      {{ {'launcher': 'ssh', 'collective': 'all_reduce', 'hosts': ['10.1.0.11', '10.1.0.12'],
          'gpus_per_node': 8, 'gpus_per_process': 1, 'env': {'NCCL_IB_HCA': 'mlx5'}}
         | gpuops.training.nccl_tests_argv }}
  # timeout --kill-after=30 1800 mpirun -np 16 -H 10.1.0.11:8,10.1.0.12:8 --bind-to none
  #   -x NCCL_DEBUG -x NCCL_IB_HCA /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 1 -n 20 -w 5 -c 1
  changed_when: true
"""

RETURN = r"""
_value:
  description: The command line, program first.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.nccl_tests_argv import (
    ArgvError,
    nccl_tests_argv,
    problems,
)


def nccl_tests_argv_filter(settings):
    try:
        return nccl_tests_argv(settings)
    except ArgvError as error:
        raise AnsibleFilterError(str(error)) from error


class FilterModule:
    def filters(self):
        return {"nccl_tests_argv": nccl_tests_argv_filter, "nccl_tests_argv_problems": problems}

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: training_workload
short_description: Render a training run as a PyTorchJob, an Indexed Job, a TrainJob or a Run:ai command
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Renders the run described by the gpuops.training.training_job role's settings for the launcher
    they name - C(pytorchjob) (Kubeflow PyTorchJob), C(indexed_job) (a headless Service and a batch/v1
    Job with C(completionMode Indexed)), C(trainjob) (Kubeflow Trainer v2 TrainJob and, unless it
    names an existing runtime, its TrainingRuntime) or C(runai) (the C(runai training pytorch submit)
    command as an argv list).
  - Every launcher renders the same pod from the same settings - requests equal to limits for cpu,
    memory, GPUs and RDMA devices (Guaranteed QoS), a memory-backed C(/dev/shm) sized from the
    DataLoader workers, batch size and ranks (see P(gpuops.training.shm_size#filter)), C(IPC_LOCK) as
    the only capability (C(drop ALL), C(add IPC_LOCK)), never privileged and no privilege escalation, C(runAsUser) and
    C(runAsGroup) when given, the Multus network annotation and RDMA requests of the fabric, NCCL
    variables of the fabric profile (C(ib), C(roce), C(socket)), explicit timeouts, checkpoints on a
    PVC, torchrun (C(python -m gpuops_trainer.launch), which exits with the failed rank's own code) with
    C(--max-restarts), C(restartPolicy OnFailure) (for C(pytorchjob) C(pytorchjob_restart_policy) may choose
    C(ExitCode) or C(Never); for C(indexed_job) C(indexed_job_restart_policy) may choose C(ExitCode), a
    C(podFailurePolicy) with the same meaning), a C(backoffLimit), the C(RuntimeDefault) seccomp profile
    (C(seccomp_profile)), variables from Secrets as references (C(env_from_secrets)), and the run id as a label.
  - The input is a dict of the role's variables without their C(training_job_) prefix, with C(run_id)
    the run's id; keys left out take the role's defaults, which the filter reads from the role's
    argument spec (as it reads the settings' names and choices). The trainer's command is the one
    P(gpuops.training.torchrun_argv#filter) builds.
  - C(mpijob) renders a Kubeflow MPIJob (C(kubeflow.org/v1)) for the gpuops.training.nccl_tests role
    instead - the same pod for its workers, which wait (C(mpi_worker_command)) while a small launcher
    without GPUs runs C(mpirun_argv) and starts the ranks in them with the Training Operator's
    C(kubectl exec) agent; C(slotsPerWorker) is C(nproc_per_node), nothing restarts (C(restartPolicy
    Never), no C(backoffLimit)) and the pods are kept (C(cleanPodPolicy None)) so that the launcher's
    log can be read.
  - Fails with every problem when the settings are not valid, each naming the caller's variable
    (O(prefix) and the setting).
  - The same plugin file holds C(training_workload_problems), which returns those problems as a list
    of messages (empty when valid) for every launcher, V(local) and V(ssh) included, for an C(assert)
    before anything starts; and C(training_setting_names), which keeps the names, among a list of
    variable names, that carry a training setting under a prefix (the roles pass
    C(query('ansible.builtin.varnames', '^training_job_')) to hand their variables to the filters by
    prefix).
options:
  _input:
    description: The settings, keys as the role's variables without C(training_job_).
    type: dict
    required: true
  prefix:
    description:
      - The prefix of the caller's variables, which every message names.
      - The gpuops.training.nccl_tests role passes V(nccl_tests_) for its MPIJobs.
    type: str
    default: training_job_
"""

EXAMPLES = r"""
- name: Stop before any API call when a setting is wrong
  ansible.builtin.assert:
    that: settings | gpuops.training.training_workload_problems | length == 0
    fail_msg: "{{ settings | gpuops.training.training_workload_problems | join('\n') }}"

- name: Render an MPIJob from another role's variables, whose messages name them
  ansible.builtin.set_fact:
    mpijob: "{{ nccl_settings | gpuops.training.training_workload(prefix='nccl_tests_') }}"

- name: Apply the run's objects
  kubernetes.core.k8s:
    state: present
    apply: true
    server_side_apply: {field_manager: gpuops-training}
    definition: "{{ item }}"
  loop: "{{ (settings | gpuops.training.training_workload).manifests }}"

- name: Submit the same run to Run:ai
  ansible.builtin.command:
    argv: "{{ (settings | combine({'launcher': 'runai'}) | gpuops.training.training_workload).runai_argv }}"
  changed_when: true
"""

RETURN = r"""
_value:
  description:
    - C(manifests) (the objects in apply order; empty for runai), C(kind), C(api_version) and C(name)
      of the object to wait for, C(namespace), C(pod_selector) (finds the run's pods), C(expected_pods),
      C(world_size), C(command) (the trainer container's command; mpirun's for mpijob), C(runai_argv) (runai only),
      C(shm_size), C(env) (the container's variables), C(output_dir) (checkpoints in the pod),
      C(sync_bn), C(nccl_expected) and C(nccl_transport) (what the fabric promises NCCL will use,
      V(IB) or V(Socket); empty when the run has no GPUs), and C(layout_check) (a batch/v1 Job that
      checks, in the run's image and with its volumes, that every dataset path the trainer will open is
      there; null for synthetic data and for the runai and mpijob launchers).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils import training_settings
from ansible_collections.gpuops.training.plugins.module_utils.role_settings import SettingsError
from ansible_collections.gpuops.training.plugins.module_utils.training_checks import problems
from ansible_collections.gpuops.training.plugins.module_utils.training_workload import workload


def training_workload(settings, prefix=training_settings.PREFIX):
    try:
        return workload(settings, _prefix(prefix))
    except SettingsError as error:
        raise AnsibleFilterError(str(error)) from error


def training_workload_problems(settings, prefix=training_settings.PREFIX):
    if not isinstance(prefix, str) or not prefix:
        return ["prefix must be a variable prefix such as training_job_, got %r" % (prefix,)]
    return problems(settings, prefix)


def training_setting_names(names, prefix=training_settings.PREFIX):
    try:
        return training_settings.setting_names(names, prefix)
    except SettingsError as error:
        raise AnsibleFilterError(str(error)) from error


def _prefix(prefix):
    if not isinstance(prefix, str) or not prefix:
        raise SettingsError("prefix must be a variable prefix such as training_job_, got %r" % (prefix,))
    return prefix


class FilterModule:
    def filters(self):
        return {
            "training_workload": training_workload,
            "training_workload_problems": training_workload_problems,
            "training_setting_names": training_setting_names,
        }

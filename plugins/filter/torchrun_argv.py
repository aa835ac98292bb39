# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: torchrun_argv
short_description: The torchrun command of a training run, for the local, ssh and Kubernetes launchers
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Returns the command line that runs the collection's trainer with C(python -m gpuops_trainer.launch)
    (torchrun that exits with the failed rank's own code), C(-m gpuops_trainer.train) and the trainer's
    arguments, built from the gpuops.training.training_job role's settings. The Kubernetes launchers'
    pods run the same command (see P(gpuops.training.training_workload#filter)).
  - Without O(endpoint) the run is standalone on one node (C(--standalone --nnodes=1), the V(local)
    launcher).
  - With O(endpoint) and O(node_rank) it is a static multi-node run (the V(ssh) launcher) of O(nnodes)
    nodes with c10d rendezvous at O(endpoint) on the first node, which hosts the store (C(is_host)),
    each node advertising O(local_addr).
  - With O(endpoint) alone it is a c10d rendezvous over O(nnodes) (default C(nnodes), or
    C(elastic_min_nodes:elastic_max_nodes) for an elastic PyTorchJob), with C(--sync-bn) across pods
    with GPUs.
  - The input is a dict of the role's variables without their C(training_job_) prefix, with C(run_id)
    the run's id; keys left out take the role's defaults. Fails with every problem, each naming its
    variable, when the settings are not valid.
options:
  _input:
    description: The settings, keys as the role's variables without C(training_job_).
    type: dict
    required: true
  endpoint:
    description: The c10d rendezvous endpoint, C(host:port); none for a standalone run.
    type: str
  nnodes:
    description: Nodes of the run (C(--nnodes)), a number or C(MIN:MAX).
    type: raw
  node_rank:
    description: This node's rank in a static multi-node run (C(--node-rank)); node 0 hosts the store.
    type: int
  local_addr:
    description: The address the other nodes reach this node at (C(--local-addr)).
    type: str
  python:
    description:
      - The Python interpreter that runs torchrun.
      - Defaults to C(python) (the host's) for the V(local) and V(ssh) launchers and C(container_python) (the image's) otherwise.
    type: str
  log_dir:
    description: Where every rank's output goes (C(--log-dir) with C(--redirects=3)); none leaves it on torchrun's output.
    type: str
  output_dir:
    description:
      - The trainer's output directory (C(--output-dir), its checkpoints). Required for the V(local) and
        V(ssh) launchers; in a pod it defaults to C(<checkpoint_mount>/<run_id>).
    type: str
  prefix:
    description: The prefix of the caller's variables, which the messages name.
    type: str
    default: training_job_
"""

EXAMPLES = r"""
- name: Run the trainer on this host with two ranks
  ansible.builtin.command:
    argv: >-
      {{ {'launcher': 'local', 'run_id': 'rn-1', 'python': '/opt/venv/bin/python', 'nproc_per_node': 2}
         | gpuops.training.torchrun_argv(log_dir='/runs/rn-1/logs', output_dir='/runs/rn-1/output') }}
  changed_when: true
"""

RETURN = r"""
_value:
  description: The command line, the Python interpreter first.
  type: list
  elements: str
"""

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils import training_settings
from ansible_collections.gpuops.training.plugins.module_utils.role_settings import SettingsError
from ansible_collections.gpuops.training.plugins.module_utils.torchrun import torchrun_argv
from ansible_collections.gpuops.training.plugins.module_utils.training_checks import checked

_TEXT_OPTIONS = ("endpoint", "local_addr", "python", "log_dir", "output_dir")
_NNODES = re.compile(r"^[1-9][0-9]*(:[1-9][0-9]*)?$")


def torchrun_argv_filter(settings, prefix=training_settings.PREFIX, node_rank=None, nnodes=None, **options):
    try:
        unknown = sorted(set(options) - set(_TEXT_OPTIONS))
        if unknown:
            raise SettingsError("unknown options %s" % ", ".join(unknown))
        for key, value in options.items():
            if value is not None and not (isinstance(value, str) and value):
                raise SettingsError("%s must be a non-empty string, got %r" % (key, value))
        if node_rank is not None and (
            isinstance(node_rank, bool) or not isinstance(node_rank, int) or node_rank < 0
        ):
            raise SettingsError("node_rank must be an integer of at least 0, got %r" % (node_rank,))
        if nnodes is not None and not _NNODES.match(str(nnodes) if isinstance(nnodes, (int, str)) else ""):
            raise SettingsError("nnodes must be a number of nodes or MIN:MAX, got %r" % (nnodes,))
        if not isinstance(prefix, str) or not prefix:
            raise SettingsError("prefix must be a variable prefix such as training_job_, got %r" % (prefix,))
        s = checked(settings, prefix, training_settings.TRAINER_LAUNCHERS, "torchrun commands")
        return torchrun_argv(s, node_rank=node_rank, nnodes=nnodes, **options)
    except SettingsError as error:
        raise AnsibleFilterError(str(error)) from error


class FilterModule:
    def filters(self):
        return {"torchrun_argv": torchrun_argv_filter}

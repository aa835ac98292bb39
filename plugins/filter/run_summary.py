# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: run_summary
short_description: Put a launched run and its log checks together into one summary
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Combines the record a launcher leaves (C(training_job_result)) with the registered results
    of M(gpuops.training.training_log_info) and M(gpuops.training.nccl_log_info) into the
    summary written to C(summary.json).
  - The C(verdict) is C(passed) only when no check failed and the launcher exited with 0.
options:
  _input:
    description: The launcher's run record (run_id, run_dir, world_size, rc, timed_out, log_paths).
    type: dict
    required: true
  training:
    description: Registered result of M(gpuops.training.training_log_info).
    type: dict
    required: true
  nccl:
    description: Registered result of M(gpuops.training.nccl_log_info).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Build the summary of a verified run
  ansible.builtin.set_fact:
    summary: "{{ training_job_result | gpuops.training.run_summary(training, nccl) }}"
"""

RETURN = r"""
_value:
  description: The summary (schema C(gpuops.run-summary/v1)) with C(verdict), C(failures), per-rank rows, loss, throughput, checkpoints and an NCCL statement.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.run_report import build_run_summary


def run_summary(run, training, nccl):
    for name, value in (("the input", run), ("training", training), ("nccl", nccl)):
        if not isinstance(value, dict):
            raise AnsibleFilterError("run_summary: %s must be a dict, got %s" % (name, type(value).__name__))
    try:
        return build_run_summary(run, training, nccl)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as error:
        # A field of another type than the launcher's record or the modules' results have.
        raise AnsibleFilterError(
            "run_summary: the input, training and nccl must be the launcher's run record and the "
            "registered results of training_log_info and nccl_log_info; a field has another shape: %s: %s"
            % (type(error).__name__, error)
        ) from error


class FilterModule:
    def filters(self):
        return {"run_summary": run_summary}

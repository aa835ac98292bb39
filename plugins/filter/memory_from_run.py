# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: memory_from_run
short_description: Size a run's pods from the memory recommendation of an earlier run's summary
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Reads the C(summary.json) that P(gpuops.training.run_summary#filter) builds and the training_verify role
    writes for a run, and returns what the training_job role's C(training_job_memory) and C(training_job_shm_size)
    become from its C(memory.recommendation) - what C(train.yml -e training_job_memory_from_run=RUN_ID) does.
  - The pods request and limit the recommended limit (the earlier run's peak plus its buffer; the role's pods are
    Guaranteed); the C(/dev/shm) size is the recommendation's C(shm_bytes) rounded up to whole Gi, when it has one
    (a recommendation made from resident sets, with DataLoader workers).
  - Fails naming C(training_job_memory_from_run) and what was expected when the summary is not one, has no
    recommendation, or when O(memory) or O(shm_size) was set to a value other than its default that differs from
    the recommendation.
options:
  _input:
    description: The summary, as the text of C(summary.json) or parsed.
    type: raw
    required: true
  run_id:
    description: The earlier run's id, for the messages.
    type: str
    required: true
  memory:
    description:
      - The memory set now (C(training_job_memory)); other than its default C(64Gi) and other than the recommended
        limit, it is a conflict.
    type: raw
  shm_size:
    description:
      - The C(/dev/shm) size set now (C(training_job_shm_size)); set (not empty) and other than a recommended one,
        it is a conflict.
    type: raw
"""

EXAMPLES = r"""
- name: Read an earlier run's summary
  ansible.builtin.slurp:
    path: /var/tmp/gpuops-runs/retinanet-20261122T050000Z/summary.json
  register: earlier

- name: Size this run's pods from it
  ansible.builtin.set_fact:
    sized: >-
      {{ earlier.content | b64decode | gpuops.training.memory_from_run('retinanet-20261122T050000Z',
           memory=training_job_memory, shm_size=training_job_shm_size) }}

- name: Show the values before the launch
  ansible.builtin.debug:
    msg: "{{ sized.lines }}"
"""

RETURN = r"""
_value:
  description:
    - C(memory) (the quantity for C(training_job_memory), the recommended limit), C(shm_size) (for
      C(training_job_shm_size), null when the recommendation carries none), the recommendation's C(request),
      C(limit), C(shm_bytes), C(basis) (C(cgroup_working_set) or C(host_rss)), C(host) and C(ranks), its
      C(recommendation) statement, and C(lines) to show before the launch.
  type: dict
  sample:
    run_id: retinanet-20261122T050000Z
    memory: 2414Mi
    shm_size: null
    request: 2136Mi
    limit: 2414Mi
    shm_bytes: null
    basis: host_rss
    host: node-a
    ranks: [0, 1]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils import training_settings
from ansible_collections.gpuops.training.plugins.module_utils.run_report import (
    MemoryFromRunError,
    memory_from_run,
)


def memory_from_run_filter(summary, run_id, memory=None, shm_size=None):
    if not isinstance(run_id, str) or not run_id.strip():
        raise AnsibleFilterError(
            "memory_from_run: run_id must be the earlier run's id (training_job_memory_from_run), got %r"
            % (run_id,)
        )
    defaults = training_settings.defaults()
    try:
        return memory_from_run(
            summary,
            run_id,
            memory=memory,
            shm_size=shm_size,
            default_memory=defaults.get("memory"),
            default_shm_size=defaults.get("shm_size") or "",
        )
    except MemoryFromRunError as error:
        raise AnsibleFilterError(str(error)) from error
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        raise AnsibleFilterError(
            "training_job_memory_from_run: run %s's summary.json has a field of another shape than training_verify "
            "writes: %s: %s" % (run_id, type(error).__name__, error)
        ) from error


class FilterModule:
    def filters(self):
        return {"memory_from_run": memory_from_run_filter}

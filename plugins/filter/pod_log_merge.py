# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: pod_log_merge
short_description: Join a pod's early log copy and its final log, so log rotation loses nothing the verdict needs
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - On a run of days the node rotates a container's log and C(kubectl logs) returns the newest file only, without the
    head where NCCL prints its init. The training_job role saves every pod's log early (C(logs/early/<pod>.log)) and
    this filter puts that copy in front of the log read at the end, without repeating the lines both hold.
  - When the final log still starts with the early copy it is returned as it is; when they overlap they are joined
    there; when they do not, a line between them says that the node rotated lines away. A pod gone by the end (no
    final log) keeps its early copy. An early copy of the container before its last restart (O(previous) starts with
    it) is left to that container's log.
  - The companion filter C(gpuops.training.pod_log_past_init) says whether a log shows the trainer's first step (or
    its end), after which the early copy holds every rank's NCCL init.
options:
  _input:
    description: The early copy of the pod's log (empty or null when none was saved).
    type: str
    required: true
  final:
    description: The log read at the end (empty or null when the pod is gone).
    type: str
    required: true
  previous:
    description: The log of the pod's container before its last restart, when it restarted.
    type: str
"""

EXAMPLES = r"""
- name: Write the pod's log to verify
  ansible.builtin.copy:
    dest: "{{ run_dir }}/logs/{{ pod }}.log"
    content: "{{ (early_copy | gpuops.training.pod_log_merge(final_log)).log }}"
    mode: "0644"
"""

RETURN = r"""
_value:
  description:
    - C(log), the pod's log to verify, and C(source) - C(final), C(early) (the pod is gone), C(early+final) (joined
      where they overlap) or C(early+gap+final).
  type: dict
  sample: {log: "...", source: early+final}
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.pod_logs import (
    PodLogError,
    merge_pod_log,
    past_init,
)


def pod_log_merge(early, final, previous=None):
    try:
        return merge_pod_log(early, final, previous)
    except PodLogError as error:
        raise AnsibleFilterError("pod_log_merge: %s" % error) from error


def pod_log_past_init(log):
    try:
        return past_init(log)
    except PodLogError as error:
        raise AnsibleFilterError("pod_log_past_init: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"pod_log_merge": pod_log_merge, "pod_log_past_init": pod_log_past_init}

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options shared by every module that reads logs."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  paths:
    description:
      - Log files to read, or glob patterns; C(**) matches directories recursively.
      - Relative paths are resolved against O(base_dir).
      - A pattern that matches no file, or a path that does not exist, is an error.
    type: list
    elements: path
    default: []
  base_dir:
    description:
      - Directory that relative O(paths) are resolved against.
    type: path
  content:
    description:
      - Log text given inline, for example the stdout of an earlier task.
    type: str
  pod_logs:
    description:
      - Pod logs as M(kubernetes.core.k8s_log) returns them (each a dict with C(log) or
        C(log_lines)), or plain strings.
      - A C(name) or C(pod) key, if present, names the log in the results.
    type: list
    elements: raw
    default: []
notes:
  - Logs are read line by line in constant memory. Invalid UTF-8, ANSI colour codes, CRI,
    RFC 3339 and syslog timestamps, C(kubectl logs --prefix) pod prefixes, Open MPI
    C([1,N]<stdout>:) tags, C(srun --label) task numbers (C(0:) and a space), Ray and SkyPilot process
    prefixes (C(head, rank=0, pid=N) in parentheses), C([host:N]:) tags and torchrun C([defaultN]:) and
    C([rankN]:) tags are tolerated and removed before parsing, stacked in any order. The rank
    the innermost of them names is kept where a result reports ranks.
  - At least one of O(paths), O(content) or O(pod_logs) must be given.
"""

#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_files
short_description: Write a run directory's directories and files on the controller
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Creates directories under O(dest) and writes files under it, on the controller, in the
    worker process - without a module run per file (M(ansible.builtin.copy) costs two, about
    0.3 CPU s each).
  - Each file is written atomically (a temporary file in the same directory, fsync, rename),
    and only when its content or mode differs; a file whose mode alone differs has its mode
    set. Directories are created with O(directory_mode) (their missing parents too), and an
    existing directory's mode is set to it.
  - Runs on the controller only - the run directory is on the controller by definition. A task
    for a host whose connection is not C(local) fails saying so.
  - Refuses an absolute path or a path with a C(..) part, naming the field, and content that is
    not a string or a mode that is not an octal string, naming the field.
options:
  dest:
    description: The directory that holds everything written, such as the run directory.
    type: path
    required: true
  directories:
    description:
      - Directories to create under O(dest), relative to it, in order; C(.) is O(dest) itself.
      - A file's directory must exist or be listed here.
    type: list
    elements: str
    default: []
  directory_mode:
    description: The mode of the directories, as an octal string.
    type: str
    default: "0755"
  files:
    description: The files to write under O(dest).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file's path relative to O(dest).
        type: str
        required: true
      content:
        description: The file's content, written as UTF-8 byte for byte.
        type: str
        required: true
      mode:
        description: The file's mode, as an octal string such as C("0600").
        type: str
        default: "0644"
attributes:
  check_mode:
    support: full
    description: Writes nothing and reports what would be created or written.
  diff_mode:
    support: full
    description:
      - Shows each file's content before and after, as M(ansible.builtin.copy) does, and each
        directory created or mode set.
      - Shows nothing for a task with C(no_log) (its contents hold secrets).
notes:
  - An action plugin that needs no connection; nothing is transferred to a host.
"""

EXAMPLES = r"""
- name: Create the run directory and write run.json
  gpuops.training.run_files:
    dest: "{{ run_dir }}"
    directories: [".", logs, logs/early]
    files:
      - path: run.json
        content: "{{ settings | to_nice_json }}\n"
        mode: "0644"

- name: Write the environment that only the run's owner may read
  gpuops.training.run_files:
    dest: "{{ run_dir }}"
    files:
      - path: environment.sh
        content: "{{ lookup('ansible.builtin.template', 'environment.sh.j2') }}"
        mode: "0600"
  no_log: "{{ hide_env }}"
"""

RETURN = r"""
dest:
  description: The directory, with C(~) and environment variables expanded.
  type: str
  returned: success
directories:
  description: The directories created or whose mode was set (would be, in check mode), full paths.
  type: list
  elements: str
  returned: success
files:
  description: The files written or whose mode was set (would be, in check mode), full paths.
  type: list
  elements: str
  returned: success
"""

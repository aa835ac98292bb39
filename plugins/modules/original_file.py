#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: original_file
short_description: Keep a file a role replaces, and put it back when the role is removed
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - With O(state=saved), when O(path) holds a file that this collection did not write (it does
    not contain O(marker)) and no copy is kept yet, copies it to O(path) followed by O(suffix)
    (or to that file name in O(copy_dir)), with its mode, owner and times. A file the collection wrote, a missing file or an existing
    copy change nothing, so a hand-edited drop-in is replaced but never taken for the original.
  - With O(state=restored), leaves O(path) as it was before the role first ran. When a copy is
    kept, moves it back over O(path) (the file at O(path) is replaced in one rename); otherwise removes O(path) only when it is a
    file the collection wrote (it contains O(marker)), so the node's own file is never removed.
  - The node roles M(gpuops.training.crio_limits), M(gpuops.training.containerd_limits) and
    M(gpuops.training.host_limits) call it before they write and when O(state=absent) is asked.
  - A directory, link or device at O(path) or at the copy's path fails with a message naming it.
options:
  path:
    description: The file the role writes.
    type: path
    required: true
  state:
    description: V(saved) keeps the original before the role writes; V(restored) puts it back.
    type: str
    choices: [saved, restored]
    default: saved
  marker:
    description: Text that every file written by the role contains in its first 4 KiB (its header).
    type: str
    required: true
  suffix:
    description:
      - Appended to the file name of O(path) to name the kept copy. systemd and pam_limits read
        C(*.conf) files only, so a copy beside the file is never read as configuration.
    type: str
    default: .gpuops-original
  copy_dir:
    description:
      - Directory the copy is kept in (created with mode C(0700) when needed, removed when
        O(state=restored) leaves it empty). Empty keeps it beside O(path).
      - Needed where the program reads every file of the directory whatever its name, as CRI-O
        does with its drop-in directory; it must not be inside that directory.
    type: path
    default: ""
attributes:
  check_mode:
    support: full
    description: Reports the action a real run would take and changes nothing.
  diff_mode:
    support: none
    description: The template task that writes the file shows its diff; this module only moves files.
"""

EXAMPLES = r"""
- name: Keep the node's own CRI-O drop-in before the role replaces it, outside the directory CRI-O reads
  gpuops.training.original_file:
    path: /etc/crio/crio.conf.d/99-ulimits.conf
    marker: (gpuops.training.crio_limits)
    copy_dir: /etc/crio/crio.conf.d.gpuops-originals

- name: Put the node's own drop-in back, or remove the one the role wrote
  gpuops.training.original_file:
    path: /etc/crio/crio.conf.d/99-ulimits.conf
    marker: (gpuops.training.crio_limits)
    copy_dir: /etc/crio/crio.conf.d.gpuops-originals
    state: restored
  register: crio_original

- name: Keep the node's own systemd drop-in beside it (systemd reads only *.conf)
  gpuops.training.original_file:
    path: /etc/systemd/system/containerd.service.d/99-gpuops-limits.conf
    marker: (gpuops.training.containerd_limits)
"""

RETURN = r"""
action:
  description: What was done (or, in check mode, would be done).
  returned: always
  type: str
  choices: [save, restore, remove, nothing]
  sample: save
copy:
  description: The path of the kept copy.
  returned: always
  type: str
  sample: /etc/crio/crio.conf.d/99-ulimits.conf.gpuops-original
"""


import os

from ansible_collections.gpuops.training.plugins.module_utils import original_file
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module


def main():
    module = build_module(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["saved", "restored"], default="saved"),
            marker=dict(type="str", required=True),
            suffix=dict(type="str", default=".gpuops-original"),
            copy_dir=dict(type="path", default=""),
        ),
        supports_check_mode=True,
    )
    path, suffix = module.params["path"], module.params["suffix"]
    if not suffix or "/" in suffix or "\x00" in suffix or suffix.endswith(".conf"):
        module.fail_json(msg="suffix: expected a non-empty file name suffix without '/' and not ending in .conf, "
                             "got %r" % suffix)  # fmt: skip
    if not module.params["marker"]:
        module.fail_json(msg="marker: expected the non-empty text the role's files carry in their header")
    copy_dir = module.params["copy_dir"] or None
    if copy_dir and (copy_dir.rstrip("/") + "/").startswith(os.path.dirname(path).rstrip("/") + "/"):
        module.fail_json(msg="copy_dir: %s is inside the directory of path (%s)" % (copy_dir, path))
    try:
        if module.params["state"] == "saved":
            action = original_file.plan_save(path, module.params["marker"], suffix, copy_dir)
        else:
            action = original_file.plan_restore(path, module.params["marker"], suffix, copy_dir)
        if action != original_file.NOTHING and not module.check_mode:
            original_file.apply(action, path, suffix, copy_dir)
    except original_file.OriginalFileError as error:
        module.fail_json(msg=str(error))
    module.exit_json(
        changed=action != original_file.NOTHING,
        action=action,
        copy=original_file.copy_path(path, suffix, copy_dir),
    )


if __name__ == "__main__":
    main()

"""Make ``ansible_collections.gpuops.training`` import from this working tree.

The tests import the collection's Python code the way Ansible does, by its
``ansible_collections`` name. A directory under .build holds that name as a link to the
repository, so the tests always run against the files being edited.
"""

from __future__ import annotations

import os
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
_DEV_PATH = REPO_ROOT / ".build" / "dev-collections"
_LINK = _DEV_PATH / "ansible_collections" / "gpuops" / "training"

if not _LINK.exists():
    _LINK.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(REPO_ROOT, _LINK.parent), _LINK)
sys.path.insert(0, str(_DEV_PATH))

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a report's files only when their content changes, each one atomically.

A second run with the same content reports no change, and a reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile


def differs(path, content):
    """Whether ``path`` holds other bytes than ``content`` (or is missing)."""
    try:
        with open(path, "rb") as handle:
            return handle.read() != content
    except FileNotFoundError:
        return True


def write_atomically(path, content):
    """Write ``content`` to ``path`` (mode 0644) through a temporary file in its directory."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".report-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def changed_paths(contents):
    """The paths of ``{path: bytes}`` whose file is missing or different, sorted."""
    return sorted(path for path, content in contents.items() if differs(path, content))


def write_changed(contents, changed):
    """Write each path of ``changed`` from ``contents``, creating its directory."""
    for path in changed:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, contents[path])

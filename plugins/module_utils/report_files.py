# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a report's files only when their content changes, each one atomically.

A second run with the same content reports no change, and a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


def differs(path, content):
    """Whether ``path`` holds other bytes than ``content`` (or is missing)."""
    try:
        with open(path, "rb") as handle:
            return handle.read() != content
    except FileNotFoundError:
        return True


def write_atomically(path, content, mode=0o644):
    """Write the bytes ``content`` to ``path`` with ``mode`` through a temporary file in its
    directory, flushed to disk before the rename (and the directory after it)."""
    directory, name = os.path.split(path)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix="." + name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    try:
        dir_fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def changed_paths(contents):
    """The paths of ``{path: bytes}`` whose file is missing or different, sorted."""
    return sorted(path for path, content in contents.items() if differs(path, content))


def write_changed(contents, changed):
    """Write each path of ``changed`` from ``contents``, creating its directory."""
    for path in changed:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, contents[path])

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep the file a role is about to replace, and put it back when the role is removed.

The node roles write one file each (a CRI-O drop-in, a systemd drop-in, a limits file).
When a file of that name was already there and was not written by this collection (it does
not carry the role's ``marker``), it is kept next to it as ``<path><suffix>`` before the
role replaces it, so that ``state: absent`` can leave the node as it was: the copy goes
back, or the role's own file is removed, and a file the node had is never removed. The suffix keeps
the copy out of what systemd and pam_limits read (they read ``*.conf`` only). CRI-O reads every
file of its drop-in directory, whatever its name, so its role keeps the copy in a directory of
its own (``copy_dir``), outside the one CRI-O reads.

Both steps are plans first (:func:`plan_save`, :func:`plan_restore`), so check mode reports
exactly what a real run would do, then :func:`apply` carries a plan out.
"""

from __future__ import annotations

import os
import shutil
import stat

SAVE, RESTORE, REMOVE, NOTHING = "save", "restore", "remove", "nothing"
# Read at most this much of an existing file to look for the marker: the marker is in the
# header, and a huge file is not one of ours.
MARKER_WINDOW = 4096


class OriginalFileError(Exception):
    """A file the steps cannot handle; the message names it and says what was expected."""


def copy_path(path, suffix, copy_dir=None):
    """Where the copy of ``path`` is kept: beside it, or in ``copy_dir`` when one is given."""
    if copy_dir:
        return os.path.join(copy_dir, os.path.basename(path) + suffix)
    return path + suffix


def _regular_or_missing(path, what):
    """The lstat of ``path``, or None when it does not exist; anything but a file is refused."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise OriginalFileError("%s: cannot read %s: %s" % (what, path, error.strerror)) from error
    except ValueError as error:  # os.lstat refuses a NUL byte in the name
        raise OriginalFileError("%s: %r is not a file name, it holds a NUL byte" % (what, path)) from error
    if not stat.S_ISREG(info.st_mode):
        raise OriginalFileError(
            "%s: %s is not a regular file (a directory, link or device is there); move it away "
            "and run again" % (what, path)
        )
    return info


def written_by_us(path, marker):
    with open(path, "rb") as handle:
        return marker.encode("utf-8") in handle.read(MARKER_WINDOW)


def plan_save(path, marker, suffix, copy_dir=None):
    """SAVE when ``path`` holds a file that is not ours and no copy is kept yet, else NOTHING."""
    current = _regular_or_missing(path, "path")
    copy = _regular_or_missing(copy_path(path, suffix, copy_dir), "the kept original (path + suffix)")
    if current is None or copy is not None or written_by_us(path, marker):
        return NOTHING
    return SAVE


def plan_restore(path, marker, suffix, copy_dir=None):
    """How to leave ``path`` as it was before the role first ran.

    RESTORE when a copy is kept (it replaces whatever is at ``path``); REMOVE when ``path``
    holds a file the role wrote; NOTHING otherwise, so a file the node had, put back by an
    earlier run, stays.
    """
    current = _regular_or_missing(path, "path")
    kept = copy_path(path, suffix, copy_dir)
    if _regular_or_missing(kept, "the kept original (path + suffix)") is not None:
        return RESTORE
    if current is not None and written_by_us(path, marker):
        return REMOVE
    return NOTHING


def apply(action, path, suffix, copy_dir=None):
    """Carry out a plan. SAVE copies with mode, owner and times (creating ``copy_dir``, mode
    0700, when needed); RESTORE renames atomically, then removes ``copy_dir`` when it is left
    empty."""
    copy = copy_path(path, suffix, copy_dir)
    try:
        if action == SAVE:
            if copy_dir and not os.path.isdir(copy_dir):
                os.makedirs(copy_dir, mode=0o700)
            temporary = copy + ".tmp"
            shutil.copy2(path, temporary)
            info = os.stat(path)
            os.chown(temporary, info.st_uid, info.st_gid)
            os.replace(temporary, copy)  # the copy appears whole or not at all
        elif action == RESTORE:
            if copy_dir and os.path.dirname(copy) != os.path.dirname(path):
                # A rename across file systems is refused: copy, then drop the kept file.
                temporary = path + ".gpuops-restore.tmp"
                shutil.copy2(copy, temporary)
                info = os.stat(copy)
                os.chown(temporary, info.st_uid, info.st_gid)
                os.replace(temporary, path)
                os.unlink(copy)
                if not os.listdir(copy_dir):
                    os.rmdir(copy_dir)
            else:
                os.replace(copy, path)
        elif action == REMOVE:
            os.unlink(path)
    except OSError as error:
        raise OriginalFileError("path: cannot %s %s: %s" % (action, path, error.strerror)) from error

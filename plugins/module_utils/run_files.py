# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Write a run directory on the controller: its directories and files, each file atomically
(a temporary file in the same directory, fsync, rename) and only when its content or mode
differs. The logic of the gpuops.training.run_files action plugin, free of Ansible's objects
so that it can be tested alone.

write_run_files(dest, directories, files, directory_mode, check_mode, diff) -> result dict:
  changed: whether anything was (in check mode: would be) created, written or had its mode set;
  directories: the directories created or whose mode was set, full paths;
  files: the files written or whose mode was set, full paths;
  diff: a list of before/after dicts for Ansible's --diff (only when diff is true).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

from ansible_collections.gpuops.training.plugins.module_utils.report_files import write_atomically

# Ansible's default for max_file_size_for_diff (bytes): larger contents are not shown.
MAX_DIFF_BYTES = 104448

_MODE = re.compile(r"^0?[0-7]{3,4}$")


class RunFilesError(ValueError):
    """Input that run_files refuses; the message names the field."""


def _relative(value, field):
    """A relative path under dest, without '..' parts; '' and '.' are dest itself."""
    if not isinstance(value, str):
        kind = type(value).__name__
        raise RunFilesError("%s must be a string (a path relative to dest), got %s" % (field, kind))
    if value.startswith("/") or os.path.isabs(value):
        raise RunFilesError("%s must be a path relative to dest, got the absolute path %r" % (field, value))
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise RunFilesError("%s must stay under dest (no '..' part), got %r" % (field, value))
    if "\x00" in value:
        raise RunFilesError("%s holds a NUL character" % field)
    return "/".join(parts)


def _mode(value, field):
    """An octal mode string such as '0644' (an integer would be read as decimal by YAML)."""
    if not isinstance(value, str) or not _MODE.match(value):
        raise RunFilesError(
            "%s must be an octal mode string such as '0644' (quoted in YAML), got %r" % (field, value)
        )
    return int(value, 8)


def normalize(dest, directories=None, files=None, directory_mode="0755"):
    """Check the input; return (dest, [(relative dir, mode)], [(relative path, bytes, mode)])."""
    if not isinstance(dest, str) or not dest.strip():
        raise RunFilesError("dest must be a non-empty string (the run directory), got %r" % (dest,))
    dest = os.path.expanduser(os.path.expandvars(dest))
    dir_mode = _mode(directory_mode, "directory_mode")
    if directories is None:
        directories = []
    if not isinstance(directories, (list, tuple)):
        kind = type(directories).__name__
        raise RunFilesError("directories must be a list of paths relative to dest, got %s" % kind)
    dirs = []
    for index, value in enumerate(directories):
        relative = _relative(value, "directories[%d]" % index)
        if (relative, dir_mode) not in dirs:
            dirs.append((relative, dir_mode))
    if files is None:
        files = []
    if not isinstance(files, (list, tuple)):
        raise RunFilesError("files must be a list of {path, content, mode}, got %s" % type(files).__name__)
    entries = []
    seen = set()
    for index, entry in enumerate(files):
        field = "files[%d]" % index
        if not isinstance(entry, dict):
            kind = type(entry).__name__
            raise RunFilesError("%s must be a dict with path, content and mode, got %s" % (field, kind))
        unknown = sorted(set(entry) - {"path", "content", "mode"})
        if unknown:
            unknown = ", ".join(unknown)
            raise RunFilesError("%s has unknown keys %s (expected path, content, mode)" % (field, unknown))
        if "path" not in entry:
            raise RunFilesError("%s.path is required" % field)
        relative = _relative(entry["path"], field + ".path")
        if not relative:
            raise RunFilesError("%s.path must name a file under dest, got %r" % (field, entry["path"]))
        if relative in seen:
            raise RunFilesError("%s.path %r is given twice" % (field, relative))
        seen.add(relative)
        content = entry.get("content")
        if not isinstance(content, str):
            raise RunFilesError("%s.content must be a string, got %s" % (field, type(content).__name__))
        mode = _mode(entry.get("mode", "0644"), field + ".mode")
        entries.append((relative, content.encode("utf-8", "surrogateescape"), mode))
    return dest, dirs, entries


def _join(dest, relative):
    return os.path.join(dest, relative) if relative else dest


def _current_mode(path):
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info


def _text(data):
    """Content for the diff: text under the size limit, else a note."""
    if len(data) > MAX_DIFF_BYTES:
        return "(%d bytes, larger than %d: not shown)\n" % (len(data), MAX_DIFF_BYTES)
    if b"\x00" in data:
        return "(binary content, not shown)\n"
    return data.decode("utf-8", "replace")


def _make_directory(path, mode, check_mode, planned, created):
    """Create path and its missing parents with mode (each parent too, as file state=directory
    does); record every directory created. In check mode, only plan them."""
    missing = []
    walk = path
    while walk and walk not in planned and not os.path.isdir(walk):
        if os.path.lexists(walk):
            raise RunFilesError("%s exists and is not a directory" % walk)
        missing.append(walk)
        parent = os.path.dirname(walk)
        if parent == walk:
            break
        walk = parent
    for directory in reversed(missing):
        if not check_mode:
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, mode)
            os.chmod(directory, mode)
        planned.add(directory)
        created.append(directory)


def write_run_files(dest, directories=None, files=None, directory_mode="0755", check_mode=False, diff=False):
    """Create the directories and write the files that differ; see the module docstring.
    Everything is checked (a dry run) before anything is created or written."""
    dest, dirs, entries = normalize(dest, directories, files, directory_mode)
    plan = _apply(dest, dirs, entries, True, diff, require_parents=not check_mode)
    if check_mode or not plan["changed"]:
        return plan
    return _apply(dest, dirs, entries, False, diff)


def _apply(dest, dirs, entries, check_mode, diff, require_parents=True):
    """In check mode a file's missing directory is no error: the tasks before it wrote nothing
    either (ansible.builtin.copy reports such a file as changed too)."""
    planned = set()  # directories that exist, or will in check mode
    dirs_changed = []
    diffs = []
    for relative, mode in dirs:
        path = _join(dest, relative)
        created = []
        _make_directory(path, mode, check_mode, planned, created)
        if created:
            for directory in created:
                dirs_changed.append(directory)
                diffs.append(
                    {
                        "before_header": directory,
                        "after_header": directory,
                        "before": {"path": directory, "state": "absent"},
                        "after": {"path": directory, "state": "directory"},
                    }
                )
            continue
        current = stat.S_IMODE(os.stat(path).st_mode)
        if current != mode:
            if not check_mode:
                os.chmod(path, mode)
            dirs_changed.append(path)
            diffs.append(
                {
                    "before_header": path,
                    "after_header": path,
                    "before": {"path": path, "mode": "%04o" % current},
                    "after": {"path": path, "mode": "%04o" % mode},
                }
            )
    files_changed = []
    for relative, data, mode in entries:
        path = _join(dest, relative)
        parent = os.path.dirname(path)
        if require_parents and parent not in planned and not os.path.isdir(parent):
            raise RunFilesError(
                "the directory of %s does not exist: list %r in directories"
                % (path, os.path.relpath(parent, dest) if parent != dest else ".")
            )
        info = _current_mode(path)
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise RunFilesError("%s exists and is not a regular file" % path)
        before = None
        if info is not None and info.st_size == len(data):
            with open(path, "rb") as handle:
                before = handle.read()
            same_content = before == data
        else:
            same_content = False
        if info is not None and not same_content and diff and before is None:
            with open(path, "rb") as handle:
                before = handle.read()
        current_mode = stat.S_IMODE(info.st_mode) if info is not None else None
        if same_content and current_mode == mode:
            continue
        files_changed.append(path)
        if not same_content:
            if not check_mode:
                write_atomically(path, data, mode)
            diffs.append(
                {
                    "before_header": path if info is not None else "%s (absent)" % path,
                    "after_header": path,
                    "before": _text(before) if before is not None else "",
                    "after": _text(data),
                }
            )
        else:
            if not check_mode:
                os.chmod(path, mode)
            diffs.append(
                {
                    "before_header": path,
                    "after_header": path,
                    "before": {"path": path, "mode": "%04o" % current_mode},
                    "after": {"path": path, "mode": "%04o" % mode},
                }
            )
    result = {
        "changed": bool(dirs_changed or files_changed),
        "dest": dest,
        "directories": dirs_changed,
        "files": files_changed,
    }
    if diff:
        result["diff"] = diffs
    return result

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse many log files on several cores: a fleet's logs (128 pods of 10 MB) are read in forked
processes, each feeding its share of the files to a parser of its own, and the parsers are
merged in the order of the files.

Files that speak for the same processes stay together: a pod's log and the log of its container
before the last restart (``POD.log``, ``POD.previous.log``). Shares are contiguous runs of the
files in their order, balanced by size, so that a merge which keeps order reads as one parser
reading every file would. Anything a child cannot do (an exception, a kill) is no answer:
:func:`parse_split` returns None and the caller parses in this process, as it always could.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile

# Below this many bytes a second process costs more than it saves.
MIN_PARALLEL_BYTES = 32 * 1024 * 1024
_PREVIOUS = re.compile(r"\.previous(?=\.log$)")


def default_workers():
    """The cores this process may run on, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def source_size(source):
    path = getattr(source, "path", None)
    if not path:
        return 0
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _group_key(source):
    path = getattr(source, "path", None) or source.name
    return _PREVIOUS.sub("", path)


def shares(sources, workers):
    """``sources`` in at most ``workers`` contiguous shares of about equal size, the files of
    one pod (``POD.log``, ``POD.previous.log``) in the same share."""
    groups, keys = [], {}
    for source in sources:
        key = _group_key(source)
        if key in keys:
            groups[keys[key]].append(source)
        else:
            keys[key] = len(groups)
            groups.append([source])
    total = sum(source_size(source) for source in sources)
    target = total / max(workers, 1)
    result, current, size = [], [], 0
    for group in groups:
        group_size = sum(source_size(source) for source in group)
        if current and size + group_size / 2 > target * (len(result) + 1) and len(result) < workers - 1:
            result.append(current)
            current = []
        current.extend(group)
        size += group_size
    if current:
        result.append(current)
    return result


def parse_split(sources, parse, merge, workers=None, min_bytes=None):
    """``merge([parse(share) ...])`` with each share parsed in a process of its own (the first
    in this one), or None when the sources are too small to be worth it or a child gave no
    answer. ``parse(share)`` returns a picklable parser; ``merge(parsers)`` one parser."""
    workers = workers or default_workers()
    min_bytes = MIN_PARALLEL_BYTES if min_bytes is None else min_bytes
    if workers < 2 or sum(source_size(source) for source in sources) < min_bytes:
        return None
    parts = shares(sources, workers)
    if len(parts) < 2:
        return None
    children = []
    waited = set()
    try:
        for part in parts[1:]:
            handle, path = tempfile.mkstemp(prefix="gpuops-parse-")
            children.append((None, path))
            pid = os.fork()
            if pid == 0:  # the child: parse its share, leave the parser in the file, exit
                code = 1
                try:
                    with os.fdopen(handle, "wb") as out:
                        pickle.dump(parse(part), out, protocol=pickle.HIGHEST_PROTOCOL)
                    code = 0
                finally:
                    os._exit(code)
            os.close(handle)
            children[-1] = (pid, path)
        parsers = [parse(parts[0])]
        complete = True
        for pid, path in children:
            _pid, status = os.waitpid(pid, 0)
            waited.add(pid)
            if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                complete = False
                continue
            with open(path, "rb") as stream:
                parsers.append(pickle.load(stream))
    finally:
        # The parent failed (or was interrupted) before every child answered: end them.
        for pid, path in children:
            if pid is not None and pid not in waited:
                try:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                except OSError:
                    pass
            if os.path.exists(path):
                os.unlink(path)
    return merge(parsers) if complete else None

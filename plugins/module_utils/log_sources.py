# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read log lines from files, globs, inline text and Kubernetes pod logs.

Every parser in this collection reads its input through this module, so they all
tolerate the same things: invalid UTF-8, over-long or truncated lines, ANSI colour
codes, CRI, RFC 3339 and syslog timestamps, ``kubectl logs --prefix`` pod prefixes, MPI
``[1,N]<stdout>:`` tags, ``srun --label`` task numbers (``0: ``), Ray and SkyPilot process
prefixes (``(head, rank=0, pid=N)``, ``(RayWorker pid=N, ip=...)``), ``[host:N]:`` tags and
torchrun ``[defaultN]:`` (a local rank) and torch's ``[rankN]:`` tags, stacked in any order.

Lines are streamed one at a time: memory stays constant whatever the size of a file.
:func:`scan_lines` goes further for parsers that only need lines holding a keyword: it
searches large binary chunks in C and hands over only the lines that match.
"""

from __future__ import annotations

import glob
import os
import re

# A line longer than this is cut; the rest of it is dropped, not treated as a new line.
MAX_LINE_BYTES = 64 * 1024
# Files are read in binary chunks of this size: large enough that the search for
# interesting lines runs in C for long stretches, small enough to keep memory flat.
READ_CHUNK_BYTES = 8 * 1024 * 1024

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")

# Prefixes that wrap a log line, in the forms collectors add them. Each is tried at
# the start of the line until none matches, so they may nest in any order.
_PREFIX = re.compile(
    r"""
    (?:
        # CRI log format, as container runtimes write it and kwok serves it
        \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)\ (?:stdout|stderr)[ ][FP][ ]
      | # kubectl logs --prefix
        \[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]+)\][ ]
      | # kubectl logs --timestamps and most log shippers
        \d{4}-\d\d-\d\d[T\ ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\ +
      | # syslog (RFC 3164): "Nov 26 07:16:57 host tag[pid]: "
        (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\ [\ \d]\d\ \d\d:\d\d:\d\d(?:\.\d+)?
        \ [\w.-]+\ [^\s:\[\]]+(?:\[\d+\])?:[ ]
      | # Open MPI --tag-output
        \[\d+,(?P<mpi_rank>\d+)\]<(?:stdout|stderr)>:
      | # torch's own rank prefix (the global rank)
        \[rank(?P<torch_rank>\d+)\]:\ ?
      | # torchrun --tee: the worker's local rank on its node, not its global rank
        \[default(?P<torch_local_rank>\d+)\]:\ ?
      | # srun --label: the task number, padded with spaces to the width of the largest
        \ *(?P<srun_rank>\d+):[ ]
      | # Ray and SkyPilot: "(head, rank=0, pid=123)", "(RayWorker pid=123, ip=10.0.0.2)"
        \((?P<ray>[^()\n]{0,200}?\bpid=\d+[^()\n]{0,200}?)\)[ ]
      | # "[host:N]:" tags of some MPI launchers (as behind SkyPilot's prefix)
        \[[\w.-]+:\d+\]:
    )
    """,
    re.VERBOSE,
)
# Open MPI's --tag-output tag inside a line: it tags every write it relays, so a line a
# process wrote in pieces carries the tag between them, and another rank's write can start
# in the middle of a line that has no newline yet.
_MPI_TAG = re.compile(r"\[\d+,(\d+)\]<(?:stdout|stderr)>:")
# SkyPilot's "rank=N" is the node's rank (SKYPILOT_NODE_RANK), not a process rank.
_RAY_NODE_RANK = re.compile(r"\brank=(\d+)")
# The first characters a prefix may start with: the rest of the line is not tried.
_PREFIX_FIRST = frozenset("[( 0123456789ADFJMNOS")
# The same test on raw bytes, for readers that look at bytes (nccl_scan): whether
# normalize_line may strip something from a line starting with these bytes.
_PREFIX_START = re.compile(rb"[\[( \t0-9]|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d ")


def may_start_with_prefix(raw):
    """Whether ``normalize_line`` may strip a collector prefix from a line starting with ``raw``
    (bytes). False means the line reads as itself (colour codes aside)."""
    return _PREFIX_START.match(raw) is not None


class LogSourceError(ValueError):
    """A requested log source cannot be read; the message names it."""


class LogSource:
    """One stream of log lines and the name it is reported under."""

    __slots__ = ("name", "path", "text")

    def __init__(self, name, path=None, text=None):
        self.name = name
        self.path = path
        self.text = text

    def raw_lines(self):
        """Yield the source's lines as bytes, each at most MAX_LINE_BYTES long."""
        if self.path is not None:
            for buffer, start, end in self.blocks():
                lines = buffer[start:end].split(b"\n")
                if buffer[end - 1 : end] == b"\n":
                    lines.pop()  # split leaves an empty string after the final newline
                for line in lines:
                    yield line[:MAX_LINE_BYTES]
        else:
            for line in self._text_bytes().splitlines():
                yield line[:MAX_LINE_BYTES]

    def blocks(self):
        """Yield ``(buffer, start, end)``: ``buffer[start:end]`` holds whole lines.

        Files are read in large binary chunks; a block ends at a newline or at the end
        of a line that grew past MAX_LINE_BYTES (its tail is then dropped, as
        :meth:`raw_lines` does). Lines inside a block may still be longer than
        MAX_LINE_BYTES: readers cut each line they use to that length. Inline text is
        one block, with ``\r`` and ``\r\n`` turned into ``\n`` so its lines are the ones
        :meth:`raw_lines` yields.
        """
        if self.path is None:
            data = self._text_bytes()
            if b"\r" in data:
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if data:
                yield data, 0, len(data)
            return
        with open(self.path, "rb") as handle:
            yield from _file_blocks(handle)

    def _text_bytes(self):
        data = self.text
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        return data


def _file_blocks(handle, chunk_bytes=None):
    """Yield ``(buffer, start, end)`` blocks of whole lines from a binary file.

    The buffers are the chunks as read, so the bulk of a file is never copied; only
    the line that straddles two chunks is joined. Memory stays below two chunks plus
    MAX_LINE_BYTES whatever the file holds.
    """
    chunk_bytes = chunk_bytes or READ_CHUNK_BYTES
    carry = b""  # the start of a line the previous chunk cut
    dropping = False  # inside the tail of an over-long line, up to its newline
    while True:
        data = handle.read(chunk_bytes)
        if not data:
            if carry:
                yield carry, 0, len(carry)
            return
        first = data.find(b"\n")
        if first < 0:
            if not dropping:
                carry += data
                if len(carry) > MAX_LINE_BYTES:
                    yield carry, 0, len(carry)
                    carry, dropping = b"", True
            continue
        if dropping:
            dropping = False
        else:
            head = carry + data[: first + 1] if carry else data[: first + 1]
            yield head, 0, len(head)
        last = data.rfind(b"\n")
        if last > first:
            yield data, first + 1, last + 1
        carry = data[last + 1 :]
        if len(carry) > MAX_LINE_BYTES:
            yield carry, 0, len(carry)
            carry, dropping = b"", True


def strip_ansi(text):
    """Remove ANSI colour and cursor codes from a line."""
    return _ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


def scan_lines(source, needles, on_line):
    """Call ``on_line(line_number, raw_line)`` for each line of ``source`` holding a needle.

    ``needles`` are bytes; lines come in file order, once each, cut to MAX_LINE_BYTES
    (a needle only in the cut-off tail does not count, as with :meth:`LogSource.raw_lines`).
    Lines without any needle are never looked at from Python: the search runs in C over
    large blocks, which is what makes big logs cheap. Returns the number of lines.
    """
    line_number = 0
    for buffer, start, end in source.blocks():
        cursor = start  # line_number counts the newlines before cursor
        if len(needles) == 1:
            matches = _needle_lines(buffer, start, end, needles[0])
        else:
            found = {}
            for needle in needles:
                for line_start, line_end in _needle_lines(buffer, start, end, needle):
                    found[line_start] = line_end
            matches = sorted(found.items())
        for line_start, line_end in matches:
            line_number += buffer.count(b"\n", cursor, line_start)
            cursor = line_start
            on_line(line_number + 1, buffer[line_start:line_end])
        line_number += buffer.count(b"\n", cursor, end)
        if buffer[end - 1 : end] != b"\n":
            line_number += 1  # the last line of a file without a final newline, or a cut line
    return line_number


def _needle_lines(buffer, start, end, needle):
    """Return ``(line_start, line_end)`` of each line of ``buffer[start:end]`` holding ``needle``."""
    matches = []
    find, rfind = buffer.find, buffer.rfind
    position = find(needle, start, end)
    while position >= 0:
        line_start = rfind(b"\n", start, position) + 1 or start
        line_end = find(b"\n", position, end)
        if line_end < 0:
            line_end = end
        if line_end - line_start > MAX_LINE_BYTES:
            line_end = line_start + MAX_LINE_BYTES
            if position + len(needle) > line_end:
                # The needle sits in the part of the line that is cut off.
                position = find(needle, find(b"\n", position, end) + 1 or end, end)
                continue
        matches.append((line_start, line_end))
        position = find(needle, line_end + 1, end)
    return matches


def normalize_line(raw):
    """Return ``(text, tags)`` for one raw line.

    ``text`` is the line without its line ending, colour codes and collector
    prefixes; ``tags`` holds what the prefixes said (``pod``, ``container``,
    ``rank``, ``local_rank``, ``node_rank``) or is None when there was no tagged prefix.
    torchrun's ``[defaultN]:`` names a worker by its rank on its node: it gives
    ``local_rank``, and drops a rank an outer prefix named (that was the launcher's
    process, not this worker).
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI_ESCAPE.sub("", text)
    tags = None
    # Prefixes start with one of a few characters; a line starting otherwise has none.
    while text and text[0] in _PREFIX_FIRST:
        match = _PREFIX.match(text)
        if match is None:
            break
        groups = match.groupdict()
        if groups["pod"]:
            tags = dict(tags or {}, pod=groups["pod"], container=groups["container"])
        rank = groups["mpi_rank"] or groups["torch_rank"] or groups["srun_rank"]
        if rank is not None:
            # Prefixes nest outside in: the innermost rank (the process's own) wins.
            tags = dict(tags or {}, rank=int(rank))
            tags.pop("local_rank", None)
        elif groups["torch_local_rank"] is not None:
            tags = dict(tags or {}, local_rank=int(groups["torch_local_rank"]))
            tags.pop("rank", None)
        elif groups["ray"]:
            node_rank = _RAY_NODE_RANK.search(groups["ray"])
            if node_rank:
                tags = dict(tags or {}, node_rank=int(node_rank.group(1)))
        text = text[match.end() :]
    return text, tags


def split_mpi_tags(text, tags):
    """``[(piece, tags)]``: a normalised line cut at the Open MPI tags in its middle.

    The first piece keeps the line's ``tags``; each later one has the rank its tag names
    (``[1,3]<stdout>:`` is rank 3), the other tags as the line's. A line with no tag in it
    is one piece. Only the cheap test ``"]<std" in text`` is worth doing before calling this.
    """
    pieces = []
    start = 0
    piece_tags = tags
    for match in _MPI_TAG.finditer(text):
        pieces.append((text[start : match.start()], piece_tags))
        piece_tags = dict(tags or {}, rank=int(match.group(1)))
        piece_tags.pop("local_rank", None)
        start = match.end()
    pieces.append((text[start:], piece_tags))
    return pieces


def iter_lines(sources):
    """Yield ``(source_name, text, tags)`` for every line of every source."""
    for source in sources:
        for raw in source.raw_lines():
            text, tags = normalize_line(raw)
            yield source.name, text, tags


def collect_sources(paths=None, content=None, pod_logs=None, base_dir=None):
    """Build the list of sources from a module's arguments.

    ``paths`` are files or glob patterns (``**`` matches directories recursively);
    a pattern that matches nothing, or a path that does not exist, is an error.
    ``pod_logs`` are results of ``kubernetes.core.k8s_log`` (dicts with ``log`` or
    ``log_lines``), optionally with a ``name`` or ``pod`` key to report them under.
    """
    sources = []
    for pattern in paths or []:
        if not isinstance(pattern, str) or not pattern:
            raise LogSourceError("paths: every entry must be a non-empty string, got %r" % (pattern,))
        pattern = os.path.expanduser(pattern)
        if base_dir and not os.path.isabs(pattern):
            pattern = os.path.join(base_dir, pattern)
        if _is_glob(pattern):
            matches = sorted(match for match in glob.glob(pattern, recursive=True) if os.path.isfile(match))
            if not matches:
                raise LogSourceError("paths: the pattern %s matches no file" % pattern)
        elif os.path.isdir(pattern):
            raise LogSourceError(
                "paths: %s is a directory; give a file or a glob such as %s/**/*.log"
                % (pattern, pattern.rstrip("/"))
            )
        elif not os.path.isfile(pattern):
            raise LogSourceError("paths: %s does not exist" % pattern)
        else:
            matches = [pattern]
        sources.extend(LogSource(match, path=match) for match in matches)
    if content is not None:
        sources.append(LogSource("content", text=content))
    for index, pod_log in enumerate(pod_logs or []):
        sources.append(_pod_log_source(index, pod_log))
    return sources


def _is_glob(pattern):
    return any(char in pattern for char in "*?[")


def _pod_log_source(index, pod_log):
    if isinstance(pod_log, str):
        return LogSource("pod_logs[%d]" % index, text=pod_log)
    if not isinstance(pod_log, dict):
        raise LogSourceError(
            "pod_logs[%d]: expected a k8s_log result (a dict with 'log' or 'log_lines') "
            "or a string, got %s" % (index, type(pod_log).__name__)
        )
    name = pod_log.get("name") or pod_log.get("pod")
    name = name if isinstance(name, str) else "pod_logs[%d]" % index
    if isinstance(pod_log.get("log"), str):
        return LogSource(name, text=pod_log["log"])
    if isinstance(pod_log.get("log_lines"), list):
        return LogSource(name, text="\n".join(str(line) for line in pod_log["log_lines"]))
    raise LogSourceError("pod_logs[%d]: has neither 'log' (a string) nor 'log_lines' (a list)" % index)

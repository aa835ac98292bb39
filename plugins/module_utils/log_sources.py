# Copyright: gpuops.training contributors
# Apache License 2.0 (see LICENSE)
"""Read log lines from files, globs, inline text and Kubernetes pod logs.

Every parser in this collection reads its input through this module, so they all
tolerate the same things: invalid UTF-8, over-long or truncated lines, ANSI colour
codes, CRI and RFC 3339 timestamps, ``kubectl logs --prefix`` pod prefixes, MPI
``[1,N]<stdout>:`` tags and torchrun ``[defaultN]:`` / ``[rankN]:`` tags.

Lines are streamed one at a time: memory stays constant whatever the size of a file.
"""

from __future__ import annotations

import glob
import os
import re

# A line longer than this is cut; the rest of it is dropped, not treated as a new line.
MAX_LINE_BYTES = 64 * 1024

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
      | # Open MPI --tag-output
        \[\d+,(?P<mpi_rank>\d+)\]<(?:stdout|stderr)>:
      | # torchrun --tee and torch's own rank prefix
        \[(?:default|rank)(?P<torch_rank>\d+)\]:\ ?
    )
    """,
    re.VERBOSE,
)


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
            with open(self.path, "rb") as handle:
                yield from _bounded_lines(handle)
        else:
            data = self.text
            if isinstance(data, str):
                data = data.encode("utf-8", "surrogateescape")
            for line in data.splitlines():
                yield line[:MAX_LINE_BYTES]


def _bounded_lines(handle):
    """Yield lines from a binary file, cutting any line longer than MAX_LINE_BYTES."""
    while True:
        line = handle.readline(MAX_LINE_BYTES)
        if not line:
            return
        if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
            # Skip the remainder of an over-long line so it is not read as new lines.
            rest = line
            while rest and not rest.endswith(b"\n"):
                rest = handle.readline(MAX_LINE_BYTES)
        yield line


def normalize_line(raw):
    """Return ``(text, tags)`` for one raw line.

    ``text`` is the line without its line ending, colour codes and collector
    prefixes; ``tags`` holds what the prefixes said (``pod``, ``container``,
    ``rank``) or is None when there was no tagged prefix.
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI_ESCAPE.sub("", text)
    tags = None
    # Prefixes start with a digit or '['; anything else has none.
    while text and (text[0] == "[" or text[0].isdigit()):
        match = _PREFIX.match(text)
        if match is None:
            break
        groups = match.groupdict()
        if groups["pod"]:
            tags = dict(tags or {}, pod=groups["pod"], container=groups["container"])
        rank = groups["mpi_rank"] or groups["torch_rank"]
        if rank is not None:
            tags = dict(tags or {}, rank=int(rank))
        text = text[match.end() :]
    return text, tags


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
    name = pod_log.get("name") or pod_log.get("pod") or "pod_logs[%d]" % index
    if isinstance(pod_log.get("log"), str):
        return LogSource(name, text=pod_log["log"])
    if isinstance(pod_log.get("log_lines"), list):
        return LogSource(name, text="\n".join(str(line) for line in pod_log["log_lines"]))
    raise LogSourceError("pod_logs[%d]: has neither 'log' (a string) nor 'log_lines' (a list)" % index)


# The argument spec every log-reading module shares (documented in the log_sources doc fragment).
SOURCE_ARGUMENT_SPEC = {
    "paths": {"type": "list", "elements": "path", "default": []},
    "base_dir": {"type": "path"},
    "content": {"type": "str"},
    "pod_logs": {"type": "list", "elements": "raw", "default": []},
}


def sources_from_params(params):
    """Collect sources from a module's parameters; raise LogSourceError with a clear message."""
    if not params.get("paths") and params.get("content") is None and not params.get("pod_logs"):
        raise LogSourceError("one of paths, content or pod_logs is required")
    return collect_sources(
        paths=params.get("paths"),
        content=params.get("content"),
        pod_logs=params.get("pod_logs"),
        base_dir=params.get("base_dir"),
    )

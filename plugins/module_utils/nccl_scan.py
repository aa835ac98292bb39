# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast scan of NCCL logs: it reads large chunks of each file and feeds the fact parser
(nccl_log.NcclLogParser) only the lines that may add a fact.

Python looks at a few lines per rank and communicator, never at every NCCL line. C does the
rest: bytes.count counts the lines and the "NCCL INFO " markers, and one regular expression
(see scan_source) stops only at NCCL lines that may change the result. It steps over each
marker whose message adds nothing, judged on the bytes after the marker alone:

- a body whose first character the parser's ``on_info`` ignores (topology dumps, trees,
  timings): the parser names the others in ``INFO_FIRST_CHARS``;
- a "Channel"/"Ring" body that names no " via ", or whose first " via " leads to a path
  already read (learnt from the parser's ``new_paths``);
- a body already read from another rank (learnt from the parser's ``new_bodies``).

Every decision holds for the piece of line that starts at that marker, whether or not other
NCCL lines are glued behind it: each "NCCL" is judged on its own, so a line is read when any
of its pieces may matter. A line that is read goes through the same code as line-by-line
input (``read_line``, ``on_info``). Lines where colour codes or the MAX_LINE_BYTES cut could
change what the line-by-line reader sees, and the rarer needles of the parser's
``OTHER_NEEDLES``, are read in full the same way. NCCL 2.12+'s communicator lines are read
by groups of the expression and go to ``update_comm`` without being decoded. After torch's
NCCL error line, the few lines the parser waits for (its ``evidence``: "Last error:" and what
failed, which hold no needle) are given to it ahead.

So a new fact is added to the parser alone; the scan learns from what the parser reports
it read for the first time. The tests read logs both ways and compare
(tests/unit/plugins/module_utils/test_nccl_log_fast_scan.py).
"""

from __future__ import annotations

import re
import time

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    MAX_LINE_BYTES,
    may_start_with_prefix,
    normalize_line,
)

# The scan learns channel paths and INFO bodies that add nothing when seen again, and skips
# them inside its regular expression. Python's re compiles about 1 ms per kilobyte of
# pattern (far more for words sharing no prefix): bounds on the pattern and on the time
# spent compiling it.
_MAX_PATTERN_PATHS = 64
_MAX_PATTERN_BODY_BYTES = 256
_MAX_PATTERN_SOURCE = 32768  # bytes of pattern
_SMALL_PATTERN_SOURCE = 4096  # rebuilt at once for a new channel path; else at the next block
_MAX_PATTERN_BUILDS = 32
_MAX_COMPILE_SECONDS = 0.25
# A line longer than MAX_LINE_BYTES holds a whole window of this many bytes without a newline.
_LONG_LINE_WINDOW = MAX_LINE_BYTES // 2
# Raw line prefixes whose reading is remembered (a rank prints many lines with one prefix).
_MAX_HEADERS = 8192

_LEVEL_WORDS = ("INFO", "WARN", "TRACE", "ERROR")


class NcclScan:
    """Feeds ``parser`` (an nccl_log.NcclLogParser) what may matter in whole sources."""

    def __init__(self, parser):
        self.parser = parser
        parser.locate = self.locate
        self._info_first_chars = parser.INFO_FIRST_CHARS
        self._other_needles = parser.OTHER_NEEDLES
        self._source = None
        self._source_start = 0  # the parser's line count when the current source began
        self._block = b""
        self._block_end = 0
        self._cursor = self._cursor_lines = self._line_start = 0
        self._plain_headers = {}  # raw header -> host and pid, or False (see _plain_header)
        self._known_bodies = set()  # raw bytes of bodies the parser has read
        self._pattern_candidates = set()  # those of them the pattern may hold
        self._pattern_paths = []
        self._pattern_bodies = []
        self._pattern_built_bodies = self._pattern_builds = 0
        self._pattern_stale = self._pattern_full = False
        self._compile_seconds = 0.0
        self._pattern = re.compile(scan_source((), (), self._info_first_chars))

    def feed_sources(self, sources):
        """Read every source; the parser ends up as line-by-line reading would leave it."""
        for source in sources:
            self._source = source.name
            self._source_start = self.parser.lines
            for buffer, start, end in source.blocks():
                self._scan_block(buffer, start, end)

    def _scan_block(self, buffer, start, end):
        """Feed ``buffer[start:end]`` (whole lines), reading only what may matter."""
        # New bodies join the pattern in batches as large as what it holds, so that the
        # time spent compiling stays proportional to its final size.
        bodies = len(self._pattern_bodies)
        if self._pattern_stale or (
            bodies > self._pattern_built_bodies and bodies >= 2 * self._pattern_built_bodies
        ):
            self._build_pattern()
        parser = self.parser
        self._block, self._block_end = buffer, end
        self._cursor, self._cursor_lines = start, parser.lines
        if parser.evidence is not None:  # torch's NCCL error ended the last block
            self._follow(parser.lines - self._source_start, start)
        forced = self._forced_lines(buffer, start, end)
        # Every marker counts as an NCCL line; lines read below count their own instead.
        parser.nccl_lines += buffer.count(b"NCCL INFO ", start, end)
        find, rfind = buffer.find, buffer.rfind
        plain_headers, update_comm = self._plain_headers, parser.update_comm
        forced_index = 0
        next_forced = forced[0][0] if forced else end
        position = start
        pattern = self._pattern
        matches = pattern.finditer(buffer, start, end)
        while True:
            match = next(matches, None)
            if match is None:
                break
            found = match.start()
            if found < position:
                continue  # further on a line already read
            line_start = rfind(b"\n", start, found) + 1 or start
            if next_forced <= line_start:
                while next_forced <= line_start:
                    forced_start, forced_end = forced[forced_index]
                    self._on_forced_line(buffer, forced_start, forced_end)
                    forced_index += 1
                    next_forced = forced[forced_index][0] if forced_index < len(forced) else end
                    if forced_start == line_start:
                        position = forced_end + 1  # this line, read in full
                        break
                if position > found:
                    continue
            if match.lastindex:
                # A communicator line in the form _COMM_LINE reads: what the parser's _on_comm
                # would do with it when nothing else is on the line and its prefix is a plain header.
                header = buffer[line_start:found]
                host_pid = plain_headers.get(header)
                if host_pid is None:
                    host_pid = self._plain_header(header)
                if host_pid is not False:
                    comm, rank, nranks, cuda_dev, bus_id, comm_id, state, n_ranks, nnodes = match.groups()
                    self._line_start = line_start
                    if nranks is not None:
                        values = (
                            ("cuda_dev", int(cuda_dev)),
                            ("bus_id", bus_id.decode()),
                            ("comm_id", comm_id.decode()),
                        )
                        starting, complete = state == b"START", state == b"COMPLETE"
                    else:
                        nranks, values, starting, complete = n_ranks, (("nnodes", int(nnodes)),), False, False
                    update_comm(
                        host_pid, comm.decode(), int(rank), int(nranks), values, starting, complete, None
                    )
                    position = match.end() + 1
                    continue
            line_end = find(b"\n", found, end)
            if line_end < 0:
                line_end = end
            self._on_found_line(buffer, line_start, line_end, found)
            position = line_end + 1
            if self._pattern is not pattern:  # it learnt a channel path: go on with the new one
                pattern = self._pattern
                matches = pattern.finditer(buffer, position, end)
        for forced_start, forced_end in forced[forced_index:]:
            self._on_forced_line(buffer, forced_start, forced_end)
        parser.lines = self._cursor_lines + buffer.count(b"\n", self._cursor, end)
        if buffer[end - 1 : end] != b"\n":
            parser.lines += 1  # a last line without newline, or a line cut at MAX_LINE_BYTES

    def _on_found_line(self, buffer, line_start, line_end, found):
        """Read the line the scan stopped in, at ``found``: its first "NCCL" that may matter."""
        raw = buffer[line_start:line_end]
        parser = self.parser
        if buffer.startswith(b" INFO ", found + 4):
            nccl = raw.count(b"NCCL")
            if nccl == 1 or nccl == raw.count(b"NCCL_") + 1:
                # One marker on the line, and "NCCL_..." names are no markers: do what the
                # parser's read_line would do with it, without its search.
                body = buffer[found + 10 : line_end]
                if body in self._known_bodies:
                    # A message already read (and counted with the markers). If it is
                    # printed again and again, let the scan step over it from now on.
                    if body in self._pattern_candidates and not self._pattern_full:
                        self._pattern_candidates.discard(body)
                        self._pattern_bodies.append(body)  # see _scan_block
                    return
                text, tags = normalize_line(raw)
                marker = text.find("NCCL INFO ")
                if marker >= 0:
                    self._line_start = line_start
                    parser.on_info(text[marker + 10 :], text[:marker], None, tags and tags.get("rank"))
                    if parser.new_paths or parser.new_bodies:
                        self._learn()
                    return
        parser.nccl_lines -= raw.count(b"NCCL INFO ")
        self._on_raw_line(self._line_number(line_start), raw, line_end)
        if parser.new_paths or parser.new_bodies:
            self._learn()

    def _plain_header(self, header):
        """(host, pid) of a raw prefix that reads as itself, or False.

        A prefix reads as itself when it is ASCII, names no "NCCL" and does not start the
        way a collector prefix may (log_sources.may_start_with_prefix).
        """
        if len(self._plain_headers) >= _MAX_HEADERS:
            self._plain_headers.clear()
        if header.isascii() and b"NCCL" not in header and not may_start_with_prefix(header):
            text = header.decode("ascii")
            host_pid = self.parser.host_pid_of(text)
        else:
            host_pid = False
        self._plain_headers[header] = host_pid
        return host_pid

    def _on_forced_line(self, buffer, line_start, line_end):
        raw = buffer[line_start:line_end]
        parser = self.parser
        parser.nccl_lines -= raw.count(b"NCCL INFO ")
        self._on_raw_line(self._line_number(line_start), raw[:MAX_LINE_BYTES], line_end)
        if parser.new_paths or parser.new_bodies:
            self._learn()

    def _forced_lines(self, buffer, start, end):
        """``(start, end)`` of the lines of the block to read in full, in order.

        Those are the lines with an escape sequence (removing colour codes can make or
        break any word), lines longer than MAX_LINE_BYTES (the line-by-line reader cuts
        them) and lines holding one of the parser's OTHER_NEEDLES but no "NCCL".
        """
        find, rfind = buffer.find, buffer.rfind
        found = {}
        position = find(b"\x1b", start, end)
        while position >= 0:
            line_start = rfind(b"\n", start, position) + 1 or start
            line_end = find(b"\n", position, end)
            if line_end < 0:
                line_end = end
            found[line_start] = line_end
            position = find(b"\x1b", line_end, end)
        window = _LONG_LINE_WINDOW
        position = start
        while position + window <= end:
            if find(b"\n", position, position + window) >= 0:
                position += window
                continue
            line_start = rfind(b"\n", start, position) + 1 or start
            line_end = find(b"\n", position + window, end)
            if line_end < 0:
                line_end = end
            if line_end - line_start > MAX_LINE_BYTES:
                found[line_start] = line_end
            position = line_end + 1
        # nccl-tests' Rank lines (the first needle) only matter while NCCL itself has shown
        # no communicator.
        needles = self._other_needles[1:] if self.parser.communicators else self._other_needles
        for needle in needles:
            position = find(needle, start, end)
            while position >= 0:
                line_start = rfind(b"\n", start, position) + 1 or start
                line_end = find(b"\n", position, end)
                if line_end < 0:
                    line_end = end
                cut = min(line_end, line_start + MAX_LINE_BYTES)
                # A line that also holds NCCL is an NCCL line, read (or not) as such.
                if position + len(needle) <= cut and find(b"NCCL", line_start, cut) < 0:
                    found.setdefault(line_start, line_end)
                position = find(needle, max(line_end, position + 1), end)
        return sorted(found.items())

    def _line_number(self, position):
        """Line number, in its source, of the line starting at ``position`` of the current block.

        Positions only move forward: the newlines are counted once, as the scan goes.
        """
        self._cursor_lines += self._block.count(b"\n", self._cursor, position)
        self._cursor = position
        return self._cursor_lines + 1 - self._source_start

    def locate(self):
        """source:line of the line being read: the parser asks when it has a message about
        a line the scan gave it without (see NcclLogParser._where)."""
        return "%s:%d" % (self._source, self._line_number(self._line_start))

    def _learn(self):
        """Let the scan skip the paths and bodies the parser just read for the first time."""
        parser = self.parser
        for body in parser.new_bodies:
            # The raw bytes of the body are its UTF-8 unless it held invalid bytes; a
            # body ending in "\r" is not what a line ending in "\r\n" gives once stripped.
            if "\ufffd" in body or body.endswith("\r"):
                continue
            raw = body.encode("utf-8")
            self._known_bodies.add(raw)
            if len(raw) <= _MAX_PATTERN_BODY_BYTES and "\r" not in body and find_marker(body, 0)[0] < 0:
                self._pattern_candidates.add(raw)
        parser.new_bodies.clear()
        rebuild = False
        for path in parser.new_paths:
            if (
                len(self._pattern_paths) < _MAX_PATTERN_PATHS
                and "\ufffd" not in path
                and "\r" not in path
                and "NCCL" not in path
            ):
                self._pattern_paths.append(path.encode("utf-8"))
                rebuild = True
        parser.new_paths.clear()
        if rebuild:
            self._pattern_stale = True
            if len(self._pattern.pattern) <= _SMALL_PATTERN_SOURCE:
                self._build_pattern()  # channel lines are most NCCL lines: skip them at once

    def _build_pattern(self):
        self._pattern_stale = False
        if self._pattern_builds >= _MAX_PATTERN_BUILDS or self._compile_seconds >= _MAX_COMPILE_SECONDS:
            self._pattern_full = True
            return
        started = time.perf_counter()
        bodies = self._pattern_bodies
        source = scan_source(self._pattern_paths, bodies, self._info_first_chars)
        while len(source) > _MAX_PATTERN_SOURCE and len(bodies) > self._pattern_built_bodies:
            # Too large: keep what the last pattern held and the first half of the rest.
            del bodies[max(self._pattern_built_bodies, (self._pattern_built_bodies + len(bodies)) // 2) :]
            self._pattern_full = True
            source = scan_source(self._pattern_paths, bodies, self._info_first_chars)
        self._pattern = re.compile(source)
        self._pattern_built_bodies = len(bodies)
        self._pattern_builds += 1
        self._compile_seconds += time.perf_counter() - started

    def _on_raw_line(self, line_number, raw, line_end):
        """Read the line ending at ``line_end`` of the current block in full."""
        text, tags = normalize_line(raw)  # the same text and tags feed() gets from iter_lines
        parser = self.parser
        waiting = parser.evidence  # an error's, whose lines were given ahead up to the block's end
        parser.read_line(text, "%s:%d" % (self._source, line_number), tags and tags.get("rank"))
        if parser.evidence is not None and parser.evidence is not waiting:
            self._follow(line_number, line_end + 1)

    def _follow(self, line_number, position):
        """Give the parser the lines from ``position`` (line ``line_number`` + 1 of its source)
        on, while it waits for the evidence of torch's NCCL error line (``parser.evidence``):
        they hold no needle, the scan would step over them. It reads them ahead of the lines
        between: what it keeps of them does not depend on when (see ErrorCollector._insert)."""
        buffer, end = self._block, self._block_end
        parser = self.parser
        while parser.evidence is not None and position < end:
            line_end = buffer.find(b"\n", position, end)
            if line_end < 0:
                line_end = end
            line_number += 1
            text, tags = normalize_line(buffer[position:line_end][:MAX_LINE_BYTES])
            parser.on_follow_line(text, "%s:%d" % (self._source, line_number), tags and tags.get("rank"))
            position = line_end + 1


def find_marker(text, start):
    """Find the next ``NCCL INFO|WARN|TRACE|ERROR`` at or after ``start``.

    Return ``(marker position, body start)``, or ``(-1, -1)`` when there is none.
    """
    position = text.find("NCCL ", start)
    while position >= 0:
        for level in _LEVEL_WORDS:
            if text.startswith(level, position + 5):
                body_start = position + 5 + len(level)
                if body_start == len(text) or text[body_start] == " ":
                    return position, body_start + 1
        position = text.find("NCCL ", position + 5)
    return -1, -1


def scan_source(paths, bodies, first_chars):
    """The regular expression of the fast scan: it finds each "NCCL" that may matter.

    That is every "NCCL" but a marker "NCCL INFO " whose message the parser's on_info drops
    (the negative lookahead), and an "NCCL" that opens the body of a marker (the
    lookbehind: that marker's verdict covers its body). Dropped messages are:

    - "Channel"/"Ring" lines whose first " via " leads to one of ``paths`` (already read)
      and the end of the line. No "a" may come between "Cha" and "via": so that " via "
      is the first one and no other marker is glued in front of it. Where the line has
      no "a" after "Cha", it has no " via " either, and the message adds nothing whatever
      the search finds in the lines after it;
    - a body starting with none of ``first_chars`` (the parser's INFO_FIRST_CHARS), or empty;
    - a "C"/"R" body other than "Connected..." with no " via " on the line;
    - one of ``bodies`` (read already, holding no marker) and the end of the line.

    The literal "NCCL" in front lets the search skip from one "NCCL" to the next in C.
    """
    skips = []
    if paths:
        skips.append(b"(?:Cha|R)[^a]* via " + _alternatives([path + b"\n" for path in paths]))
    skips.append(b"[^" + re.escape("".join(sorted(first_chars)).encode("ascii")) + b"]")
    skips.append(b"(?!Connected)[CR](?![^\n]* via )")
    if bodies:
        skips.append(_alternatives([body + b"\n" for body in bodies]))
    return b"NCCL(?! INFO (?:" + b"|".join(skips) + b"))(?<!NCCL INFO NCCL)" + _COMM_LINE


# After the scan pattern's "NCCL": NCCL 2.12+'s communicator lines, read in C. Groups: comm,
# rank, then nranks, cudaDev, busId, commId and START|COMPLETE of "Init" lines, or nRanks
# and nNodes of the line that follows Init START. Any other form is read by the parser's _on_comm.
_COMM_LINE = (
    rb"(?: INFO (?:ncclCommInitRank )?comm (0x[0-9a-f]+) rank ([0-9]+) (?:"
    rb"nranks ([0-9]+) cudaDev ([0-9]+) nvmlDev [0-9]+ busId ([0-9a-f]+) commId (0x[0-9a-f]+)"
    rb" - Init (START|COMPLETE)"
    rb"|nRanks ([0-9]+) nNodes ([0-9]+) localRanks [0-9]+ localRank [0-9]+ MNNVL [0-9]+)(?=\n))?"
)


def _alternatives(words, depth=0):
    """A pattern matching exactly one of ``words`` (bytes, none a prefix of another).

    Built as a trie, so that the search tries one branch per distinct next byte rather
    than every word; past a few levels the rest is listed flat to bound the nesting.
    """
    words = sorted(set(words))
    first, last = words[0], words[-1]
    common = 0
    while common < min(len(first), len(last)) and first[common] == last[common]:
        common += 1
    prefix = re.escape(first[:common])
    if len(words) == 1:
        return prefix
    if depth >= 16:
        return prefix + b"(?:" + b"|".join(re.escape(word[common:]) for word in words) + b")"
    branches = []
    group = [words[0][common:]]
    for word in words[1:]:
        if word[common] == group[0][0]:
            group.append(word[common:])
        else:
            branches.append(_alternatives(group, depth + 1))
            group = [word[common:]]
    branches.append(_alternatives(group, depth + 1))
    return prefix + b"(?:" + b"|".join(branches) + b")"

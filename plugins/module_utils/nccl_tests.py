# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read nccl-tests output (``all_reduce_perf`` and its siblings) and judge the bandwidth.

A log may hold several test runs, each its own table: the header (``# nccl-tests
version``, ``# Collective test starting: NAME``, ``# nThread .. nGpus .. minBytes ..
maxBytes ..``, the ``# Rank N Group G Pid P on HOST device D [busid] NAME`` lines), the
size rows, ``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : X``.
Collectors' prefixes, NCCL INFO lines between the rows, and header lines that lost their
``#`` (pasted into markdown) are tolerated.

Several processes writing to one stream break rows: ``mpirun --tag-output`` tags each piece
of output it receives, so a row can arrive in pieces with other ranks' lines between them, or
on one line with the tag in its middle as well as in front (``... sum -1[1,0]<stdout>: 85.70
...``; a tag in the middle can also start another rank's line), and another rank's NCCL line
can start in the middle of a row. A row cut that way is put
back together from its pieces (a piece of a tagged row only joins pieces with the same tag),
when exactly one way of joining them reads as a row of the table's columns; a piece that
never completes, or that joins in several ways, is named in ``parse_warnings``.

Bandwidth is judged on the large-message rows (1 GiB and up by default; the largest size
present when none is that large): their peak bus bandwidth, as a share of what the links
can carry. ``# Avg bus bandwidth`` averages over every size, small ones included, so it is
reported but never judged. Any ``#wrong`` above 0, or out-of-bounds values, is an error
whatever the bandwidth.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    iter_lines,
    split_mpi_tags,
)
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import (
    MAX_PARSE_WARNINGS,
    ErrorCollector,
)
from ansible_collections.gpuops.training.plugins.module_utils.nccl_scan import find_marker

LARGE_MESSAGE_BYTES = 1 << 30
MAX_TABLES = 256
MAX_ROWS_PER_TABLE = 4096
MAX_RANKS_LISTED = 4096
# Pieces of cut rows: at most this many pieces per row, ways of joining them, and rows
# waiting for their rest (one per collector tag).
MAX_ROW_PIECES = 6
MAX_ROW_READINGS = 8
MAX_OPEN_ROWS = 64

# The NCCL prefix of a line spliced into a row: "host:pid:tid [dev] " and a WARN's "file.cc:line ".
_SPLICED_HEADER = re.compile(r"(\S+):\d+:\d+ \[\d+\] (?:[\w./-]+:\d+ )?$")
# A host name glued behind the cut row's last characters starts with a letter.
_GLUED_HOST = re.compile(r"[A-Za-z][A-Za-z0-9.-]*$")
# What the last token of a cut row may be: the start of a number or of N/A.
_NUMBER_START = re.compile(r"[-+]?\d*\.?\d*(?:[eE][-+]?\d*)?|N/?A?")

_REMEDY_WRONG = (
    "Results were corrupted in transit: rerun with NCCL_ALGO=Ring and NCCL_PROTO=Simple to find the "
    "algorithm at fault, check GPU memory errors (nvidia-smi -q -d ECC, Xid errors in the kernel log) "
    "and NIC errors (ibv_devinfo, port counters), and disable GPUDirect RDMA (NCCL_NET_GDR_LEVEL=LOC) "
    "to see whether it is the cause."
)
_REMEDY_BANDWIDTH = (
    "Measure the network with NCCL_ALGO=Ring (Tree and NVLS can exceed or hide it), check that every "
    "NIC is used (NCCL_IB_HCA, one rail per GPU), that GPUDirect RDMA is on (GDRDMA on the channel "
    "lines), the PCIe topology between GPUs and NICs, and the switch ports' speed and errors."
)

_TYPES = frozenset(
    [
        "int8",
        "uint8",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "half",
        "float",
        "double",
        "bfloat16",
        "fp8_e4m3",
        "fp8_e5m2",
        "f8e4m3",
        "f8e5m2",
        "char",
        "int",
        "uint",
        "long",
        "ulong",
        "float16",
        "float32",
        "float64",
    ]
)


def link_capacity_gbyte_s(gbit_per_nic=None, nic_count=1, gbyte_per_s=None):
    """What the links carry in GB/s: ``gbyte_per_s`` as given, or Gb/s per NIC x NICs / 8."""
    if gbyte_per_s:
        return float(gbyte_per_s)
    if gbit_per_nic:
        return float(gbit_per_nic) * int(nic_count or 1) / 8.0
    return None


class _Table:
    __slots__ = (
        "test",
        "version",
        "nthread",
        "ngpus",
        "min_bytes",
        "max_bytes",
        "ranks",
        "hosts",
        "columns",
        "has_wrong_column",
        "rows",
        "row_count",
        "rows_dropped",
        "avg_busbw",
        "out_of_bounds",
        "out_of_bounds_ok",
        "concluded",
        "failed",
    )

    def __init__(self):
        self.test = self.version = None
        self.nthread = self.ngpus = self.min_bytes = self.max_bytes = None
        self.ranks = {}
        self.hosts = []
        self.columns = None
        self.has_wrong_column = None
        self.rows = []
        self.row_count = 0
        self.rows_dropped = 0
        self.avg_busbw = None
        self.out_of_bounds = None
        self.out_of_bounds_ok = None
        self.concluded = False
        self.failed = False

    def started(self):
        return bool(
            self.test
            or self.version
            or self.nthread is not None
            or self.ranks
            or self.row_count
            or self.failed
        )


class _OpenRow:
    """The pieces of a row cut by other processes' output, and the ways to join them."""

    __slots__ = ("readings", "where", "pieces", "source")

    def __init__(self, readings, where, source):
        self.readings = readings  # candidate texts of the row so far
        self.where = [where]
        self.pieces = 1
        self.source = source


class NcclTestsParser:
    """Feed it lines with :meth:`feed` (or sources with :meth:`feed_sources`); read :meth:`result`."""

    def __init__(self, large_message_bytes=LARGE_MESSAGE_BYTES):
        self.large_message_bytes = large_message_bytes
        self.tables = []
        self.table = None
        self.lines = 0
        self.tables_dropped = 0
        self.errors = ErrorCollector()
        self.parse_warnings = []
        self.parse_warning_count = 0
        self.pending_test = None  # a *_perf binary named on a command line before its table
        self.open_rows = {}  # collector tag -> _OpenRow: a row waiting for its rest

    def feed_sources(self, sources):
        numbers = {}
        for source, text, tags in iter_lines(sources):
            numbers[source] = numbers.get(source, 0) + 1
            self.feed(source, text, numbers[source], tags)
        return self

    def feed(self, source, text, line_number=None, tags=None):
        """Take one line (normalised by ``log_sources.normalize_line``) and its tags."""
        self.lines += 1
        stripped = text.strip()
        if not stripped:
            return
        first = stripped[0]
        if (first.isdigit() or first == "N") and "]<std" in stripped:
            # A row mpirun --tag-output tagged in the middle (it tags every write): the pieces
            # between the tags are read as lines of their own, each under its tag, and pieces
            # of a row join again below.
            pieces = split_mpi_tags(text, tags)
            if len(pieces) > 1:
                self.lines -= len(pieces)  # one line, whatever its pieces
                for piece, piece_tags in pieces:
                    self.feed(source, piece, line_number, piece_tags)
                return
        where = "%s:%d" % (source, line_number) if line_number is not None else source
        if "Test NCCL failure" in stripped or "Test CUDA failure" in stripped:
            if self.table is not None:
                self.table.failed = True
            self.errors.classify(stripped, where, rank=tags.get("rank") if tags else None)
            return
        if first.isdigit() or (self.open_rows and stripped.startswith("N/A")):
            self._on_row(text.rstrip(), source, where, _tag_key(tags))
            return
        if "NCCL INFO" in stripped:
            return  # NCCL's own lines between the rows
        if first == "#" and self.open_rows:
            self._close_open_rows()  # the table's rows are over: a cut row never got its rest
        content = stripped.lstrip("#").strip()
        if content.startswith("nccl-tests version"):
            self._new_table(force=True).version = content.split()[2] if len(content.split()) > 2 else None
        elif content.startswith("Collective test starting:"):
            table = self._new_table(force=self.table is not None and self.table.test is not None)
            table.test = content.split(":", 1)[1].strip() or table.test
        elif content.startswith("Collective test concluded:"):
            if self.table is not None:
                self.table.concluded = True
        elif content.startswith("nThread "):
            self._on_header(content)
        elif content.startswith("Rank ") and " Pid " in content and " on " in content:
            self._on_rank(content)
        elif content.startswith("size ") and "count" in content and "busbw" in content:
            self._on_columns(content)
        elif content.startswith("Out of bounds values"):
            self._on_out_of_bounds(content, where)
        elif content.startswith("Avg bus bandwidth"):
            self._on_avg(content, where)
        elif "_perf" in stripped:
            self._on_command_line(stripped)

    def _on_command_line(self, text):
        """Remember the test a command line starts (``./build/all_reduce_perf -b 8 ...``)."""
        for token in text.split():
            name = token.rsplit("/", 1)[-1].strip("'\"")
            if name.endswith(("_perf", "_perf_mpi")) and name[0].isalpha():
                self.pending_test = name
                return

    # -- lines ---------------------------------------------------------------------

    def _new_table(self, force=False):
        if self.table is not None and not (force and self.table.started()):
            return self.table
        if len(self.tables) >= MAX_TABLES:
            self.tables_dropped += 1
            self.tables.pop(0)
        self.table = _Table()
        self.table.test, self.pending_test = self.pending_test, None
        self.tables.append(self.table)
        return self.table

    def _on_header(self, content):
        table = self._new_table(force=self.table is not None and self.table.nthread is not None)
        tokens = content.replace(":", " ").split()
        for key, attribute in (
            ("nThread", "nthread"),
            ("nGpus", "ngpus"),
            ("minBytes", "min_bytes"),
            ("maxBytes", "max_bytes"),
        ):
            if key in tokens:
                index = tokens.index(key)
                if index + 1 < len(tokens) and tokens[index + 1].isdigit():
                    setattr(table, attribute, int(tokens[index + 1]))

    def _on_rank(self, content):
        # "Rank  0 Group  0 Pid 448056 on cnode2-001 device  0 [0000:9d:00] NVIDIA H100 80GB HBM3"
        # (nccl-tests before 2.10 have no Group).
        table = self._new_table()
        tokens = content.split()
        try:
            rank = int(tokens[1])
            host = tokens[tokens.index("on") + 1]
            device = int(tokens[tokens.index("device") + 1])
        except (ValueError, IndexError):
            return
        bus_id = gpu = None
        if "[" in content:
            bracket = content.index("[")
            close = content.find("]", bracket)
            if close > bracket:
                bus_id = content[bracket + 1 : close]
                gpu = content[close + 1 :].strip() or None
        if len(table.ranks) < MAX_RANKS_LISTED:
            table.ranks[rank] = {"rank": rank, "host": host, "device": device, "bus_id": bus_id, "gpu": gpu}
        if host not in table.hosts and len(table.hosts) < MAX_RANKS_LISTED:
            table.hosts.append(host)

    def _on_columns(self, content):
        table = self._new_table()
        names = content.split()
        table.columns = names
        table.has_wrong_column = "#wrong" in names

    def _on_out_of_bounds(self, content, where):
        table = self._new_table()
        tokens = content.split(":", 1)[-1].split()
        try:
            table.out_of_bounds = int(tokens[0])
        except (ValueError, IndexError):
            self._parse_warning(where, "unreadable 'Out of bounds values' line")
            return
        table.out_of_bounds_ok = len(tokens) < 2 or tokens[1] == "OK"
        if table.out_of_bounds or not table.out_of_bounds_ok:
            self.errors.add(
                "out_of_bounds_values",
                content,
                where,
                message="nccl-tests found out-of-bounds values (corrupted results)",
                remedy=_REMEDY_WRONG,
            )

    def _on_avg(self, content, where):
        table = self._new_table()
        try:
            table.avg_busbw = float(content.split(":", 1)[1].split()[0])
        except (ValueError, IndexError):
            self._parse_warning(where, "unreadable 'Avg bus bandwidth' line")

    def _on_row(self, text, source, where, key):
        """A line starting with a digit (or N/A while a row waits for its rest): a size row,
        a piece of one, or an NCCL line whose host name starts with a digit."""
        table = self.table
        if table is None:
            return  # numbers outside any nccl-tests output
        piece, spliced = _cut_spliced_line(text)
        if piece is None:
            self._parse_warning(
                where,
                "a size row with another process's NCCL line spliced into it could not be cut "
                "apart (the NCCL host name starts with a digit): %s" % text.strip()[:120],
            )
            return
        if not piece.strip():
            return  # an NCCL line of a host whose name starts with a digit
        columns = self._expected_columns()
        open_row = self.open_rows.get(key)
        if open_row is not None and open_row.source != source:
            self._close_open_row(key)
            open_row = None
        if open_row is not None:
            readings = _join_readings(open_row.readings, piece)
            rows, prefixes = _judge_readings(readings, columns)
            if rows or prefixes:
                open_row.where.append(where)
                open_row.pieces += 1
                if rows:
                    del self.open_rows[key]
                    self._take_rows(rows, open_row.where)
                elif open_row.pieces >= MAX_ROW_PIECES:
                    self._close_open_row(key)
                else:
                    open_row.readings = prefixes[:MAX_ROW_READINGS]
                return
            self._close_open_row(key)  # this piece does not continue it: read it on its own
        rows, prefixes = _judge_readings([piece.lstrip()], columns)
        if rows:
            self._add_row(rows[0][0], piece.strip(), where)
        elif prefixes and (spliced or len(prefixes[0].split()) < (columns or 13)):
            if len(self.open_rows) >= MAX_OPEN_ROWS:
                self._close_open_row(next(iter(self.open_rows)))
            self.open_rows[key] = _OpenRow(prefixes, where, source)
        elif len(piece.split()) >= 10:
            self._parse_warning(where, "a size row could not be read: %s" % piece.strip()[:120])

    def _expected_columns(self):
        """How many tokens a row of the current table has, when its column line said."""
        columns = self.table.columns if self.table is not None else None
        if columns and len(columns) in (11, 12, 13):
            return len(columns)
        return None

    def _take_rows(self, rows, where):
        """Rows read from the pieces at ``where`` (lines): one row, or a warning when the
        pieces join into different rows."""
        first = rows[0][0]
        if all(row == first for row, _text in rows[1:]):
            self._add_row(first, rows[0][1], where[0])
        else:
            self._parse_warning(
                ", ".join(where),
                "the pieces of a cut size row join into %d different rows; none is kept: %s"
                % (len(rows), " | ".join(text for _row, text in rows)[:240]),
            )

    def _close_open_row(self, key):
        open_row = self.open_rows.pop(key)
        self._parse_warning(
            ", ".join(open_row.where),
            "a size row was cut by other output and its rest never came (or did not join into one "
            "row): %s" % open_row.readings[0][:120],
        )

    def _close_open_rows(self):
        for key in list(self.open_rows):
            self._close_open_row(key)

    def _add_row(self, row, text, where):
        table = self.table
        table.row_count += 1
        if len(table.rows) < MAX_ROWS_PER_TABLE:
            table.rows.append(row)
        else:
            table.rows_dropped += 1
        for placement in ("out_of_place", "in_place"):
            wrong = row[placement]["wrong"]
            if wrong:
                self.errors.add(
                    "wrong_results",
                    text,
                    where,
                    message="nccl-tests counted wrong results (#wrong above 0)",
                    remedy=_REMEDY_WRONG,
                )
                break

    def _parse_warning(self, where, message):
        self.parse_warning_count += 1
        if len(self.parse_warnings) < MAX_PARSE_WARNINGS:
            self.parse_warnings.append("%s: %s" % (where, message))

    # -- result --------------------------------------------------------------------

    def result(self, capacity_gbyte_s=None):
        self._close_open_rows()
        tables = [self._table_result(table, capacity_gbyte_s) for table in self.tables]
        ranks = {}
        for table in self.tables:
            ranks.update(table.ranks)
        hosts = []
        for table in self.tables:
            hosts.extend(host for host in table.hosts if host not in hosts)
        avg_values = [table["avg_busbw"] for table in tables if table["avg_busbw"] is not None]
        judged = [table for table in tables if table["peak_busbw"] is not None]
        parse_warnings = list(self.parse_warnings)
        if self.parse_warning_count > len(parse_warnings):
            parse_warnings.append("... %d more" % (self.parse_warning_count - len(parse_warnings)))
        if self.tables_dropped:
            parse_warnings.append(
                "%d earlier tables were dropped (more than %d)" % (self.tables_dropped, MAX_TABLES)
            )
        return {
            "nccl_tests_found": bool(self.tables),
            "lines": self.lines,
            "tables": tables,
            "table_count": len(tables),
            "rows": sum(table["row_count"] for table in tables),
            "nranks": max((table["nranks"] for table in tables if table["nranks"]), default=None),
            "hosts": hosts,
            "avg_busbw": avg_values[0] if avg_values else None,
            "peak_busbw": max((table["peak_busbw"] for table in judged), default=None),
            "link_capacity_gbyte_s": capacity_gbyte_s,
            "busbw_share": min(
                (table["busbw_share"] for table in judged if table["busbw_share"] is not None), default=None
            ),
            "wrong_total": sum(table["wrong_total"] for table in tables),
            "errors": self.errors.result(),
            "parse_warnings": parse_warnings,
        }

    def _table_result(self, table, capacity):
        rows = table.rows
        large = [row for row in rows if row["size"] >= self.large_message_bytes]
        judged_on = "large messages (>= %d bytes)" % self.large_message_bytes
        if not large and rows:
            largest = max(row["size"] for row in rows)
            large = [row for row in rows if row["size"] == largest]
            judged_on = "largest size present (%d bytes)" % largest
        peak = peak_size = None
        for row in large:
            for placement in ("out_of_place", "in_place"):
                busbw = row[placement]["busbw"]
                if busbw is not None and (peak is None or busbw > peak):
                    peak, peak_size = busbw, row["size"]
        if peak is None:
            judged_on = None
        share = round(peak / capacity, 4) if peak is not None and capacity else None
        ranks = [table.ranks[rank] for rank in sorted(table.ranks)]
        return {
            "test": table.test,
            "nccl_tests_version": table.version,
            "nthread": table.nthread,
            "ngpus": table.ngpus,
            "min_bytes": table.min_bytes,
            "max_bytes": table.max_bytes,
            "nranks": (max(table.ranks) + 1) if table.ranks else None,
            "hosts": list(table.hosts),
            "ranks": ranks,
            "wrong_column": table.has_wrong_column,
            "rows": rows,
            "row_count": table.row_count,
            "avg_busbw": table.avg_busbw,
            "out_of_bounds": table.out_of_bounds,
            "out_of_bounds_ok": table.out_of_bounds_ok,
            "wrong_total": sum(
                row[placement]["wrong"] or 0 for row in rows for placement in ("out_of_place", "in_place")
            ),
            "complete": table.avg_busbw is not None and not table.failed,
            "failed": table.failed,
            "judged_on": judged_on,
            "peak_busbw": peak,
            "peak_busbw_size": peak_size,
            "busbw_share": share,
        }


def _tag_key(tags):
    """The collector tag a row's pieces share: pieces of one row carry the same tag."""
    if not tags:
        return None
    return (
        tags.get("pod"),
        tags.get("container"),
        tags.get("node_rank"),
        tags.get("rank"),
        tags.get("local_rank"),
    )


def _cut_spliced_line(text):
    """``(row piece, spliced)`` of a line: the part before another process's NCCL line that
    starts in the middle of it (``... 25000.0node-b:200:200 [1] NCCL INFO ...``), or the
    whole line. The piece is None when the two cannot be told apart."""
    position = find_marker(text, 0)[0]
    if position < 0:
        return text, False
    header = _SPLICED_HEADER.search(text, 0, position)
    if header is None or header.end() != position:
        return text[:position], True  # "NCCL" without a prefix: cut there
    host_start, host_end = header.span(1)
    host = _GLUED_HOST.search(text, host_start, host_end)
    if host is None:
        if host_start == 0 or text[:host_start].isspace():
            return "", True  # the line is an NCCL line of a host named by digits
        return None, True
    return text[: host.start()], True


def _join_readings(readings, piece):
    """Every way to join ``piece`` behind each reading: with a space where either side has
    whitespace at the cut, else both with and without one (the cut may split a number)."""
    joined = []
    for reading in readings:
        if reading[-1:].isspace() or piece[:1].isspace():
            candidates = (reading.rstrip() + " " + piece.strip(),)
        else:
            candidates = (reading + piece.strip(), reading + " " + piece.strip())
        for candidate in candidates:
            if candidate not in joined:
                joined.append(candidate)
    return joined


def _judge_readings(readings, columns):
    """``(rows, prefixes)``: the readings that are whole rows (``(row, text)`` pairs) and those
    that may still become one. A row has ``columns`` tokens when the table's column line said."""
    rows, prefixes = [], []
    for reading in readings:
        tokens = reading.split()
        if columns is None or len(tokens) == columns:
            row = _parse_row(tokens)
            if row is not None:
                rows.append((row, reading))
                continue
        if len(tokens) < (columns or 13) and _row_start(tokens):
            # Keep the text as it ends: a trailing space says the last token is whole.
            prefixes.append(reading)
    return rows, prefixes


def _row_start(tokens):
    """Whether ``tokens`` may be the start of a size row (its last token maybe cut short)."""
    if not tokens or not tokens[0].isdigit():
        return False
    last = len(tokens) - 1
    for index, token in enumerate(tokens[1:], 1):
        if index == 1:
            ok = token.isdigit()
        elif index == 2:
            ok = token in _TYPES or token.isalnum()
        elif index == 3 and token.isalpha() and token != "N":
            ok = True  # redop
        else:
            ok = token == "N/A" or _is_number(token)
        if not ok and not (index == last and _NUMBER_START.fullmatch(token)):
            return False
    return True


def _is_number(token):
    try:
        float(token)
    except ValueError:
        return False
    return True


def _number(token):
    if token == "N/A":
        return None
    return float(token)


def _parse_row(tokens):
    """One size row, or None when the tokens are not one.

    Newer nccl-tests print ``size count type redop root`` then time, algbw, busbw and
    ``#wrong`` out of place and in place (13 columns, ``N/A`` allowed); older ones have no
    root, and print a float ``error`` instead of ``#wrong``.
    """
    count = len(tokens)
    if count not in (11, 12, 13) or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    if tokens[2] not in _TYPES and not tokens[2].isalnum():
        return None
    redop = tokens[3] if count >= 12 else None
    root = None
    if count == 13:
        try:
            root = int(tokens[4])
        except ValueError:
            return None
    values = tokens[count - 8 :]
    try:
        numbers = [_number(token) for token in values]
    except ValueError:
        return None
    placements = {}
    for index, placement in ((0, "out_of_place"), (4, "in_place")):
        check = values[index + 3]
        wrong = error = None
        if check != "N/A":
            if check.isdigit():
                wrong = int(check)
            else:
                error = numbers[index + 3]  # old nccl-tests: maximum relative error
        placements[placement] = {
            "time_us": numbers[index],
            "algbw": numbers[index + 1],
            "busbw": numbers[index + 2],
            "wrong": wrong,
            "error": error,
        }
    return {
        "size": int(tokens[0]),
        "count": int(tokens[1]),
        "type": tokens[2],
        "redop": redop,
        "root": root,
        **placements,
    }


def check_expectations(result, expect, capacity_gbyte_s=None):
    """Return one message per expectation the nccl-tests results do not meet."""
    expect = expect or {}
    failures = []
    if not result["nccl_tests_found"]:
        return ["nccl-tests output: expected at least one table, found none (is this the output of *_perf?)"]
    nranks = expect.get("nranks")
    if nranks is not None and result["nranks"] != nranks:
        failures.append(
            "nranks: expected %d ranks in the '# Rank' lines, found %s (check the launcher's -np / hostfile "
            "and GPUs per pod)" % (nranks, result["nranks"])
        )
    max_wrong = expect.get("max_wrong", 0)
    if max_wrong is not None and result["wrong_total"] > max_wrong:
        failures.append(
            "max_wrong: expected at most %d wrong results, found %d. Remedy: %s"
            % (max_wrong, result["wrong_total"], _REMEDY_WRONG)
        )
    for table in result["tables"]:
        if table["out_of_bounds"] or table["out_of_bounds_ok"] is False:
            failures.append(
                "out_of_bounds: %s reported %s out-of-bounds values. Remedy: %s"
                % (table["test"] or "a test", table["out_of_bounds"], _REMEDY_WRONG)
            )
    if expect.get("no_errors", True):
        for error in result["errors"]:
            if error["kind"] in ("wrong_results", "out_of_bounds_values"):
                continue  # judged above against max_wrong
            failures.append(
                "no_errors: expected none, found %s: %s (%d lines, first: %s). Remedy: %s"
                % (error["kind"], error["message"], error["count"], error["lines"][0], error["remedy"])
            )
    share = expect.get("min_busbw_share")
    if share is not None:
        if not capacity_gbyte_s:
            failures.append("min_busbw_share: needs line_rate (Gb/s per NIC and NIC count, or GB/s)")
        else:
            judged = [table for table in result["tables"] if table["peak_busbw"] is not None]
            if not judged:
                failures.append("min_busbw_share: expected a bandwidth to judge, found no size rows")
            for table in judged:
                if table["busbw_share"] < share:
                    failures.append(
                        "min_busbw_share: expected %s peak bus bandwidth of at least %.0f%% of %.1f GB/s, "
                        "found %.2f GB/s (%.0f%%) on %s. Remedy: %s"
                        % (
                            table["test"] or "the test",
                            share * 100,
                            capacity_gbyte_s,
                            table["peak_busbw"],
                            table["busbw_share"] * 100,
                            table["judged_on"],
                            _REMEDY_BANDWIDTH,
                        )
                    )
    return failures


def parse_nccl_tests(sources, large_message_bytes=LARGE_MESSAGE_BYTES, capacity_gbyte_s=None):
    """Parse every source and return the tables and their judgement inputs."""
    return NcclTestsParser(large_message_bytes).feed_sources(sources).result(capacity_gbyte_s)

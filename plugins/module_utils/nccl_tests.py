# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read nccl-tests output (``all_reduce_perf`` and its siblings) and judge the bandwidth.

A log may hold several test runs, each its own table: the header (``# nccl-tests
version``, ``# Collective test starting: NAME``, ``# nThread .. nGpus .. minBytes ..
maxBytes ..``, the ``# Rank N Group G Pid P on HOST device D [busid] NAME`` lines), the
size rows, ``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : X``.
Collectors' prefixes, NCCL INFO lines between the rows, and header lines that lost their
``#`` (pasted into markdown) are tolerated.

Bandwidth is judged on the large-message rows (1 GiB and up by default; the largest size
present when none is that large): their peak bus bandwidth, as a share of what the links
can carry. ``# Avg bus bandwidth`` averages over every size, small ones included, so it is
reported but never judged. Any ``#wrong`` above 0, or out-of-bounds values, is an error
whatever the bandwidth.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import iter_lines
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import (
    MAX_PARSE_WARNINGS,
    ErrorCollector,
)

LARGE_MESSAGE_BYTES = 1 << 30
MAX_TABLES = 256
MAX_ROWS_PER_TABLE = 4096
MAX_RANKS_LISTED = 4096

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

    def feed_sources(self, sources):
        numbers = {}
        for source, text, _tags in iter_lines(sources):
            numbers[source] = numbers.get(source, 0) + 1
            self.feed(source, text, numbers[source])
        return self

    def feed(self, source, text, line_number=None):
        self.lines += 1
        stripped = text.strip()
        if not stripped:
            return
        where = "%s:%d" % (source, line_number) if line_number is not None else source
        first = stripped[0]
        if first.isdigit():
            self._on_row(stripped, where)
            return
        if "NCCL INFO" in stripped:
            return  # NCCL's own lines between the rows
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
        elif "Test NCCL failure" in stripped or "Test CUDA failure" in stripped:
            if self.table is not None:
                self.table.failed = True
            self.errors.classify(stripped, where)
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

    def _on_row(self, text, where):
        table = self.table
        if table is None:
            return  # numbers outside any nccl-tests output
        row = _parse_row(text.split())
        if row is None:
            if len(text.split()) >= 10:
                self._parse_warning(where, "a size row could not be read: %s" % text[:120])
            return
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

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read NCCL's debug output (``NCCL_DEBUG=INFO``) into facts an operator can act on.

NCCL prefixes its lines with ``host:pid:tid [cudaDev] NCCL INFO|WARN`` (a WARN may carry
``file.cc:line`` before ``NCCL``). From those lines this parser extracts the NCCL and CUDA
versions, the bootstrap interface, every communicator's rank, size, device and whether it
reached ``Init COMPLETE``, the network transport (IB or RoCE devices, sockets, or a net
plugin such as aws-ofi-nccl), GPUDirect RDMA, the intra-node paths, channel counts and
every WARN line. It classifies the failures it recognises and names their remedy in this
collection's terms.

Only lines holding ``NCCL`` matter (plus nccl-tests' ``Rank N ... on host`` lines, which
give the job size when NCCL itself printed nothing, and torch's CUDA out-of-memory
message). :func:`parse_nccl_logs` reads large chunks of each file and lets one regular
expression step, in C, over every NCCL line that cannot add a fact (topology dumps,
channel paths and messages another rank already printed): Python sees a few lines per
rank and communicator, and gets the same result as reading every line (see
NcclLogParser._scan_block). The state kept is bounded (see the ``MAX_*`` limits): memory
does not grow with the size of a log.
"""

from __future__ import annotations

import contextlib
import heapq
import re
import time

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    MAX_LINE_BYTES,
    iter_lines,
    normalize_line,
)

# Bounds on what is kept, so that memory stays flat on any input.
MAX_WARNINGS = 200
MAX_SAMPLES_PER_ERROR = 5
MAX_COMMUNICATORS = 65536
MAX_COMMUNICATORS_LISTED = 4096  # in the result; communicator_count has them all
MAX_NAMES = 1024  # hosts, devices, interfaces, path kinds
MAX_PARSE_WARNINGS = 50
MAX_SAMPLE_CHARS = 400

# Besides lines holding "NCCL", the fast scan reads lines with "Rank" (nccl-tests'
# device lines) and "CUDA out of memory" (torch's OOM message), which name neither.
_OTHER_NEEDLES = (b"Rank", b"CUDA out of memory")
# First characters of an NCCL INFO body that may carry a fact (see _on_info); bodies
# starting with anything else (topology dumps, rings, trees, proxy and alloc traces) add
# nothing.
_INTERESTING_FIRST_CHARS = frozenset("NncCRUBGS0123456789\x1b")
# Distinct INFO bodies remembered so that repeats are skipped.
MAX_SEEN = 65536
# Ranks listed in missing_ranks: a communicator size read from a log (or expected) can be
# any number, and a list of every rank below it could exhaust memory.
MAX_RANKS_LISTED = 65536
# The fast scan (see NcclLogParser._scan_block) learns channel paths and INFO bodies that
# add nothing when seen again, and skips them inside its regular expression. Python's re
# compiles about 1 ms per kilobyte of pattern (far more for words sharing no prefix):
# bounds on the pattern and on the time spent compiling it.
_MAX_PATTERN_PATHS = 64
_MAX_PATTERN_BODY_BYTES = 256
_MAX_PATTERN_SOURCE = 32768  # bytes of pattern
_SMALL_PATTERN_SOURCE = 4096  # rebuilt at once for a new channel path; else at the next block
_MAX_PATTERN_BUILDS = 32
_MAX_COMPILE_SECONDS = 0.25
# A line longer than MAX_LINE_BYTES holds a whole window of this many bytes without a newline.
_LONG_LINE_WINDOW = MAX_LINE_BYTES // 2
# Line prefixes whose host and pid are remembered (a rank prints many lines with one prefix).
_MAX_HEADERS = 8192

_LEVEL_WORDS = ("INFO", "WARN", "TRACE", "ERROR")

_VERSION = re.compile(r"NCCL version:? ?(?P<nccl>\d+\.\d+\.\d+)(?:[-.\w]*?\+cuda(?P<cuda>\d+\.\d+))?")
# Fields of a communicator line kept besides rank and nranks: (NCCL's name, ours, type).
_COMM_FIELDS = (
    ("cudaDev", "cuda_dev", int),
    ("busId", "bus_id", str),
    ("commId", "comm_id", str),
    ("nNodes", "nnodes", int),
)
_IB_DEVICE = re.compile(r"\[\d+\](?P<name>[\w.+-]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_SOCKET_IFACE = re.compile(r"\[\d+\](?P<name>[\w.@-]+):")
_BOOTSTRAP = re.compile(r"Bootstrap ?: ?Using (?:\[\d+\])?(?P<iface>[\w.@-]+):")
_CHANNEL_COUNT = re.compile(r"(\d+) (coll|collnet|nvls|p2p) channels(?! per)|(\d+) p2p channels per peer")
_TESTS_RANK = re.compile(
    r"Rank +(?P<rank>\d+)(?: +Group +\d+)? +Pid +\d+ +on +(?P<host>\S+) +device +(?P<device>\d+)"
)
_PLUGIN_LOADED = re.compile(r"Loaded (?P<what>net|coll) plugin (?P<name>.+?)(?: \(v\d+\))?\s*$")
_OFI_VERSION = re.compile(r"(?:Initializing|Using) (?P<lib>aws-ofi-nccl) (?P<version>[\w.-]+)")
_OFI_PROVIDER = re.compile(r"Selected [Pp]rovider is (?P<provider>[\w;-]+)")

_REMEDY_MEMLOCK = (
    "Raise the locked-memory limit (RLIMIT_MEMLOCK) the containers get: apply the "
    "gpuops.training.crio_limits or gpuops.training.containerd_limits role (the "
    "machineconfig_limits role on OpenShift), add the IPC_LOCK capability to the pod, and check "
    "'ulimit -l' inside the pod as the user the job runs as (it must say unlimited). If it "
    "already does, the NIC provider refused the buffer: check GPUDirect RDMA / dma-buf support "
    "of the driver and the provider named in the line."
)
_REMEDY_NETWORK_SELECTION = (
    "Point NCCL at the RDMA network: set NCCL_IB_HCA to the HCAs and NCCL_SOCKET_IFNAME to the "
    "interface of the secondary network, and make sure the pod carries the Multus network "
    "annotation (the gpuops.training.secondary_networks role) and the RDMA device resources; "
    "an ibv_reg_mr failure from a low memlock limit also makes NCCL fall back to sockets "
    "(gpuops.training.crio_limits / containerd_limits / machineconfig_limits roles)."
)

# kind, substrings (any matches), message, remedy. A line can match several kinds: a
# nccl-tests failure line quotes NCCL's own error, and both are worth reporting.
FAILURE_RULES = (
    (
        "memory_registration",
        ("ibv_reg_mr", "egister memory", "ibv_reg_dmabuf_mr"),
        "NCCL could not register buffers with the network device (ibv_reg_mr / Unable to register memory)",
        _REMEDY_MEMLOCK,
    ),
    (
        "duplicate_gpu",
        ("Duplicate GPU detected",),
        "two ranks use the same GPU (Duplicate GPU detected)",
        "Give every rank its own GPU: call torch.cuda.set_device(LOCAL_RANK) before "
        "init_process_group, and request as many GPUs per pod (nvidia.com/gpu) as processes per "
        "node (nproc_per_node); GPUs shared by time-slicing cannot host two ranks of one job.",
    ),
    (
        "collective_timeout",
        (
            "Watchdog caught collective operation timeout",
            "collective operation timeout",
            "watchdog got stuck",
            "Timeout(ms)=",
            "NCCL timeout",
        ),
        "a collective operation timed out (a rank stopped taking part or the network stalled)",
        "Find the first rank that failed or hung (its own log, OOM kills, exit codes); check the "
        "network errors above (socket, IB, remote exit); make every rank call the same "
        "collectives in the same order; set the process group timeout and the launcher deadline "
        "explicitly so a hang fails fast instead of after 10 minutes per restart.",
    ),
    (
        "cuda_out_of_memory",
        ("out of memory", "cudaErrorMemoryAllocation", "OutOfMemoryError"),
        "CUDA ran out of GPU memory",
        "Lower the per-GPU batch size or activation memory, make sure no other process holds the "
        "GPU (nvidia-smi inside the pod), and leave room for NCCL's own buffers (NCCL_BUFFSIZE; "
        "NCCL_NVLS_ENABLE=0 saves the NVLS buffers on H100/H200).",
    ),
    (
        "shared_memory",
        ("shared memory segment", "/dev/shm"),
        "NCCL could not create its shared-memory segment in /dev/shm",
        "Containers get a 64 MiB /dev/shm by default: mount an emptyDir with medium: Memory at "
        "/dev/shm in the pod (sizeLimit of a few GiB), or set NCCL_SHM_DISABLE=1.",
    ),
    (
        "socket_connect",
        (
            "Call to connect returned",
            "Connection refused",
            "Connection timed out",
            "No route to host",
            "socketStartConnect",
            "socketFinalizeConnect",
            "no socket interface found",
            "connect() failed",
        ),
        "a socket connection between ranks failed",
        "Check that NCCL_SOCKET_IFNAME names an interface that exists in every pod and routes "
        "between them (the Multus network of the gpuops.training.secondary_networks role when "
        "it carries the traffic), that no NetworkPolicy or firewall blocks the ports, and that "
        "MASTER_ADDR resolves to the master pod.",
    ),
    (
        "remote_exited",
        (
            "remote process exited or there was a network error",
            "ncclRemoteError",
            "Connection closed by remote peer",
            "Connection reset by peer",
        ),
        "a peer rank exited or the network dropped (remote process exited or there was a network error)",
        "Read the log of the rank that died first (OOM kill, segfault, exit code, preemption); if "
        "every rank was alive, check the fabric: IB port errors and link flaps, or socket resets "
        "on NCCL_SOCKET_IFNAME.",
    ),
    (
        "aborted",
        ("Abort COMPLETE", "communicator was aborted", "Communicator aborted", "ncclCommAbort"),
        "an NCCL communicator was aborted",
        "An abort follows an earlier failure (timeout, rank exit, error): look for the first error "
        "above and fix that one.",
    ),
    (
        "system_error",
        ("unhandled system error", "ncclSystemError"),
        "NCCL reported an unhandled system error",
        "The WARN lines before it name the call that failed: most often memory registration "
        "(memlock, see the memory_registration remedy), /dev/shm too small, or RDMA devices "
        "missing from the container (/dev/infiniband and the RDMA device plugin resources).",
    ),
    (
        "cuda_error",
        ("unhandled cuda error", "ncclUnhandledCudaError"),
        "NCCL reported an unhandled CUDA error",
        "Check the GPU and driver: Xid errors in the node's kernel log, nvidia-smi inside the pod, "
        "a CUDA runtime newer than the driver supports, or CUDA_VISIBLE_DEVICES hiding the GPU.",
    ),
    (
        "invalid_usage",
        ("invalid usage", "ncclInvalidUsage"),
        "NCCL reported invalid usage",
        "Ranks disagree on the job: mismatched world sizes or collective arguments, two ranks on "
        "one GPU, or a communicator used after an error; check the WARN line just before.",
    ),
    (
        "nccl_tests_failure",
        ("Test NCCL failure", "Test CUDA failure"),
        "an nccl-tests run failed (Test NCCL failure)",
        "The quoted NCCL error names the cause (see the other errors found); rerun with "
        "NCCL_DEBUG=INFO to see the WARN lines that led to it.",
    ),
)
_REMEDIES = {kind: remedy for kind, _needles, _message, remedy in FAILURE_RULES}
_MESSAGES = {kind: message for kind, _needles, message, _remedy in FAILURE_RULES}


def failure_remedy(kind):
    """The remedy text of a failure kind (see FAILURE_RULES)."""
    return _REMEDIES.get(kind)


class ErrorCollector:
    """Count the failures seen per kind and keep a few sample lines of each."""

    def __init__(self):
        self._kinds = {}

    def classify(self, text, where, sample=None):
        """Record every failure kind ``text`` matches; return whether any did.

        ``sample`` is the line to keep as an example, ``text`` when not given.
        """
        matched = False
        for kind, needles, _message, _remedy in FAILURE_RULES:
            for needle in needles:
                if needle in text:
                    self.add(kind, sample or text, where)
                    matched = True
                    break
        return matched

    def add(self, kind, text, where, message=None, remedy=None):
        entry = self._kinds.get(kind)
        if entry is None:
            entry = self._kinds[kind] = {
                "kind": kind,
                "message": message or _MESSAGES.get(kind, kind),
                "remedy": remedy or _REMEDIES.get(kind, ""),
                "lines": [],
                "count": 0,
            }
        entry["count"] += 1
        if len(entry["lines"]) < MAX_SAMPLES_PER_ERROR:
            entry["lines"].append(_sample(where, text))

    def result(self):
        return [dict(entry, lines=list(entry["lines"])) for entry in self._kinds.values()]


def _sample(where, text):
    text = text.strip()
    if len(text) > MAX_SAMPLE_CHARS:
        text = text[:MAX_SAMPLE_CHARS] + "..."
    return "%s: %s" % (where, text) if where else text


def _network_kind(name):
    """Map NCCL's network name to IB, Socket or Plugin (a net plugin such as aws-ofi-nccl).

    RDMA plugins that drive InfiniBand verbs (HPC-X's ``IBext``) count as IB.
    """
    if name == "Socket":
        return "Socket"
    if name.startswith("IB"):
        return "IB"
    return "Plugin"


def _add_bounded(target, value):
    if len(target) < MAX_NAMES:
        target.add(value)


class NcclLogParser:
    """Feed it lines with :meth:`feed` (or whole sources with :meth:`feed_sources`).

    Read the facts with :meth:`result`. The parser never raises on bad input: what it
    cannot read is counted in ``parse_warnings``.
    """

    def __init__(self, max_warnings=MAX_WARNINGS):
        self.max_warnings = max_warnings
        self.lines = 0
        self.nccl_lines = 0
        self.nccl_version = None
        self.cuda_version = None
        self.communicators = {}  # (host, pid, comm) -> facts
        self.networks = set()
        self.net_paths = set()  # distinct "NET/..." paths of channel lines
        self.ib_devices = {}
        self.ib_no_device = False
        self.socket_ifaces = set()
        self.bootstrap_ifaces = set()
        self.plugin = {}
        self.gdr_evidence = {}  # kind of evidence -> bool, see _gdr()
        self.p2p_types = set()
        self.channels = {}
        self.warnings = []
        self.warning_count = 0
        self.hosts = set()
        self.tests_ranks = {}  # nccl-tests "Rank N ... on host" lines: rank -> host
        self.errors = ErrorCollector()
        self.parse_warnings = []
        self.parse_warning_count = 0
        self.invalid_utf8_lines = 0
        self._seen_via = set()
        self._seen_bodies = set()
        self._host_pids = {}  # header -> _host_pid(header)
        self._plain_headers = {}  # raw header -> _host_pid(header), or False (see _plain_header)
        # The fast scan's state (see _scan_block).
        self._source = None
        self._block = b""
        self._cursor = self._cursor_lines = self._line_start = 0
        self._new_paths = []  # added to _seen_via / _seen_bodies since _learn last ran
        self._new_bodies = []
        self._known_bodies = set()  # raw bytes of bodies in _seen_bodies
        self._pattern_candidates = set()  # those of them the pattern may hold
        self._pattern_paths = []
        self._pattern_bodies = []
        self._pattern_built_bodies = self._pattern_builds = 0
        self._pattern_stale = self._pattern_full = False
        self._compile_seconds = 0.0
        self._pattern = re.compile(_scan_source((), ()))

    # -- input ---------------------------------------------------------------------

    def feed(self, source, text, tags=None, line_number=None):
        """Take one line (already normalised by ``log_sources.normalize_line``)."""
        self.lines += 1
        if "NCCL" in text:
            self._on_nccl_line(text, _where(source, line_number))
        elif "Rank" in text:
            self._on_rank_line(text)
        elif "CUDA out of memory" in text:
            self._note_bad_bytes(text)
            self.errors.classify(text, _where(source, line_number))

    def feed_sources(self, sources):
        """Read every source with the fast scan; same result as :meth:`feed_sources_line_by_line`."""
        for source in sources:
            self._source = source.name
            for buffer, start, end in source.blocks():
                self._scan_block(buffer, start, end)
        return self

    def feed_sources_line_by_line(self, sources):
        """Read every line through ``iter_lines``; slower, same result as :meth:`feed_sources`."""
        numbers = {}
        for source, text, tags in iter_lines(sources):
            numbers[source] = numbers.get(source, 0) + 1
            self.feed(source, text, tags, numbers[source])
        return self

    # -- the fast scan -------------------------------------------------------------
    #
    # Python looks at a few lines per rank and communicator, never at every NCCL line.
    # C does the rest: bytes.count counts the lines and the "NCCL INFO " markers, and one
    # regular expression (see _scan_source) stops only at NCCL lines that may change the
    # result. It steps over each marker whose message adds nothing, judged on the bytes
    # after the marker alone:
    #
    # - a body whose first character _on_info ignores (topology dumps, trees, timings);
    # - a "Channel"/"Ring" body that names no " via ", or whose first " via " leads to a
    #   path already read (learnt from _seen_via);
    # - a body already read from another rank (learnt from _seen_bodies).
    #
    # Every decision holds for the piece of line that starts at that marker, whether or
    # not other NCCL lines are glued behind it: each "NCCL" is judged on its own, so a
    # line is read when any of its pieces may matter. A line that is read goes through
    # the same code as line-by-line input. Lines where colour codes or the MAX_LINE_BYTES
    # cut could change what the line-by-line reader sees, and the rarer needles of
    # _OTHER_NEEDLES, are read in full the same way.

    def _scan_block(self, buffer, start, end):
        """Feed ``buffer[start:end]`` (whole lines), reading only what may matter."""
        # New bodies join the pattern in batches as large as what it holds, so that the
        # time spent compiling stays proportional to its final size.
        bodies = len(self._pattern_bodies)
        if self._pattern_stale or (
            bodies > self._pattern_built_bodies and bodies >= 2 * self._pattern_built_bodies
        ):
            self._build_pattern()
        self._block = buffer
        self._cursor, self._cursor_lines = start, self.lines
        forced = self._forced_lines(buffer, start, end)
        # Every marker counts as an NCCL line; lines read below count their own instead.
        self.nccl_lines += buffer.count(b"NCCL INFO ", start, end)
        find, rfind = buffer.find, buffer.rfind
        plain_headers, update_comm = self._plain_headers, self._update_comm
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
                # A communicator line in the form _COMM_LINE reads: what _on_comm would do
                # with it when nothing else is on the line and its prefix is a plain header.
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
        self.lines = self._cursor_lines + buffer.count(b"\n", self._cursor, end)
        if buffer[end - 1 : end] != b"\n":
            self.lines += 1  # a last line without newline, or a line cut at MAX_LINE_BYTES

    def _on_found_line(self, buffer, line_start, line_end, found):
        """Read the line the scan stopped in, at ``found``: its first "NCCL" that may matter."""
        raw = buffer[line_start:line_end]
        if buffer.startswith(b" INFO ", found + 4):
            nccl = raw.count(b"NCCL")
            if nccl == 1 or nccl == raw.count(b"NCCL_") + 1:
                # One marker on the line, and "NCCL_..." names are no markers: do what
                # _on_nccl_line would do with it, without its search.
                body = buffer[found + 10 : line_end]
                if body in self._known_bodies:
                    # A message already read (and counted with the markers). If it is
                    # printed again and again, let the scan step over it from now on.
                    if body in self._pattern_candidates and not self._pattern_full:
                        self._pattern_candidates.discard(body)
                        self._pattern_bodies.append(body)  # see _scan_block
                    return
                text = normalize_line(raw)[0]
                marker = text.find("NCCL INFO ")
                if marker >= 0:
                    self._line_start = line_start
                    self._on_info(text[marker + 10 :], text[:marker], None)
                    if self._new_paths or self._new_bodies:
                        self._learn()
                    return
        self.nccl_lines -= raw.count(b"NCCL INFO ")
        self._on_raw_line(self._line_number(line_start), raw)
        if self._new_paths or self._new_bodies:
            self._learn()

    def _plain_header(self, header):
        """(host, pid) of a raw prefix that reads as itself, or False.

        A prefix reads as itself when it is ASCII, names no "NCCL" and starts with no
        character that normalize_line may take for a collector prefix.
        """
        if len(self._plain_headers) >= _MAX_HEADERS:
            self._plain_headers.clear()
        if header.isascii() and b"NCCL" not in header and header[:1] not in b"[0123456789":
            text = header.decode("ascii")
            host_pid = self._host_pids.get(text) or self._host_pid_of(text)
        else:
            host_pid = False
        self._plain_headers[header] = host_pid
        return host_pid

    def _on_forced_line(self, buffer, line_start, line_end):
        raw = buffer[line_start:line_end]
        self.nccl_lines -= raw.count(b"NCCL INFO ")
        self._on_raw_line(self._line_number(line_start), raw[:MAX_LINE_BYTES])
        if self._new_paths or self._new_bodies:
            self._learn()

    def _forced_lines(self, buffer, start, end):
        """``(start, end)`` of the lines of the block to read in full, in order.

        Those are the lines with an escape sequence (removing colour codes can make or
        break any word), lines longer than MAX_LINE_BYTES (the line-by-line reader cuts
        them) and lines holding a needle of _OTHER_NEEDLES but no "NCCL".
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
        # nccl-tests' Rank lines only matter while NCCL itself has shown no communicator.
        for needle in _OTHER_NEEDLES[1:] if self.communicators else _OTHER_NEEDLES:
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
        """Line number of the line starting at ``position`` of the current block.

        Positions only move forward: the newlines are counted once, as the scan goes.
        """
        self._cursor_lines += self._block.count(b"\n", self._cursor, position)
        self._cursor = position
        return self._cursor_lines + 1

    def _where(self, where):
        """``where`` as given, or source:line of the line the fast scan is reading."""
        if where is None:
            return "%s:%d" % (self._source, self._line_number(self._line_start))
        return where

    def _learn(self):
        """Let the fast scan skip the paths and bodies that were just read for the first time."""
        for body in self._new_bodies:
            # The raw bytes of the body are its UTF-8 unless it held invalid bytes; a
            # body ending in "\r" is not what a line ending in "\r\n" gives once stripped.
            if "\ufffd" in body or body.endswith("\r"):
                continue
            raw = body.encode("utf-8")
            self._known_bodies.add(raw)
            if len(raw) <= _MAX_PATTERN_BODY_BYTES and "\r" not in body and _find_marker(body, 0)[0] < 0:
                self._pattern_candidates.add(raw)
        self._new_bodies = []
        rebuild = False
        for path in self._new_paths:
            if (
                len(self._pattern_paths) < _MAX_PATTERN_PATHS
                and "\ufffd" not in path
                and "\r" not in path
                and "NCCL" not in path
            ):
                self._pattern_paths.append(path.encode("utf-8"))
                rebuild = True
        self._new_paths = []
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
        source = _scan_source(self._pattern_paths, bodies)
        while len(source) > _MAX_PATTERN_SOURCE and len(bodies) > self._pattern_built_bodies:
            # Too large: keep what the last pattern held and the first half of the rest.
            del bodies[max(self._pattern_built_bodies, (self._pattern_built_bodies + len(bodies)) // 2) :]
            self._pattern_full = True
            source = _scan_source(self._pattern_paths, bodies)
        self._pattern = re.compile(source)
        self._pattern_built_bodies = len(bodies)
        self._pattern_builds += 1
        self._compile_seconds += time.perf_counter() - started

    def _on_raw_line(self, line_number, raw):
        text, _tags = normalize_line(raw)  # the same text feed() gets from iter_lines
        where = "%s:%d" % (self._source, line_number)
        if "NCCL" in text:
            self._on_nccl_line(text, where)
        elif "Rank" in text:
            self._on_rank_line(text)
        elif "CUDA out of memory" in text:
            self._note_bad_bytes(text)
            self.errors.classify(text, where)

    def _note_bad_bytes(self, text):
        """Count pieces the parser keeps something from that held invalid UTF-8 (now U+FFFD)."""
        if "\ufffd" in text:
            self.invalid_utf8_lines += 1

    def _parse_warning(self, where, message):
        self.parse_warning_count += 1
        if len(self.parse_warnings) < MAX_PARSE_WARNINGS:
            self.parse_warnings.append("%s: %s" % (where, message) if where else message)

    # -- one line ------------------------------------------------------------------

    def _on_nccl_line(self, text, where):
        position, body_start = _find_marker(text, 0)
        if position < 0:
            self._on_unprefixed(text, where)
            return
        header = text[:position]
        # Interleaved writes can glue several NCCL lines into one: read each piece. Only
        # the first piece's prefix is trustworthy; the others are glued to a cut body.
        while position >= 0:
            is_info = text.startswith(("INFO", "TRACE"), position + 5)
            next_position, next_body_start = _find_marker(text, body_start)
            body = text[body_start:next_position] if next_position >= 0 else text[body_start:]
            self.nccl_lines += 1
            if is_info:
                self._on_info(body, header, where)
            else:
                # Show the whole line as the sample, unless it is one piece of glued lines.
                self._on_warn(body, header, where, text if header is not None and next_position < 0 else body)
            header = None
            position, body_start = next_position, next_body_start

    def _on_unprefixed(self, text, where):
        """A line naming NCCL without NCCL's prefix: versions, nccl-tests and torch errors."""
        self._note_bad_bytes(text)
        if "NCCL version" in text:
            self._on_version(text)
        self.errors.classify(text, where)

    def _on_version(self, text):
        if self.nccl_version is None:
            match = _VERSION.search(text)
            if match:
                self.nccl_version = match.group("nccl")
                self.cuda_version = match.group("cuda")

    def _on_warn(self, body, header, where, sample):
        self.warning_count += 1
        self._note_bad_bytes(body)
        host, pid = _host_pid(header)
        if host:
            _add_bounded(self.hosts, host)
        if len(self.warnings) < self.max_warnings:
            self.warnings.append({"host": host, "pid": pid, "message": body.strip(), "line": where})
        self.errors.classify(body, where, sample)

    def _on_info(self, body, header, where):
        # _scan_source mirrors this dispatch to step over what leads nowhere: keep them in step.
        first = body[:1]
        if first == "C" or first == "R":
            via = body.find(" via ")  # "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", "Ring 00 : ..."
            if via >= 0:
                self._on_via(body[via + 5 :].strip())
                return
            if not body.startswith("Connected"):
                return
        elif first not in _INTERESTING_FIRST_CHARS:
            return
        elif (first == "c" or first == "n") and "comm 0x" in body:
            if "rank " in body:
                self._on_comm(body, header, where)
            return
        # What is left reads the same from every rank that prints it: read each body once.
        if body in self._seen_bodies:
            return
        if len(self._seen_bodies) < MAX_SEEN:
            self._seen_bodies.add(body)
            self._new_bodies.append(body)
        self._note_bad_bytes(body)
        if first == "N":
            if body.startswith("NET/"):
                self._on_net(body, where)
            elif body.startswith("NCCL version"):
                self._on_version(body)
            elif body.startswith("NVLS comm"):
                _add_bounded(self.p2p_types, "NVLS")
        elif first == "C":
            if body.startswith("Connected"):
                self._on_connected(body)
        elif first.isdigit():
            if "channels" in body:
                self._on_channel_counts(body)
        elif first == "U":
            if body.startswith("Using network"):
                name = body[len("Using network") :].strip()
                if name:
                    _add_bounded(self.networks, name)
        elif first == "B":
            if body.startswith("Bootstrap"):
                match = _BOOTSTRAP.match(body)
                if match:
                    _add_bounded(self.bootstrap_ifaces, match.group("iface"))
                self._add_host(header)
        elif first == "G":
            if body.startswith("GPU Direct RDMA"):
                self._on_gdr_line(body)
        elif first == "S" and body.startswith("Successfully loaded external plugin"):
            self.plugin.setdefault("library", body.rsplit(" ", 1)[-1])

    def _add_host(self, header):
        host = _host_pid(header)[0]
        if host:
            _add_bounded(self.hosts, host)

    def _on_via(self, path):
        if path in self._seen_via:
            return
        if len(self._seen_via) < MAX_NAMES:
            self._seen_via.add(path)
            self._new_paths.append(path)
        self._note_bad_bytes(path)
        if path.startswith("NET/"):
            _add_bounded(self.net_paths, path)
            name = path[4:].split("/", 1)[0]
            if name:
                _add_bounded(self.networks, name)
            self.gdr_evidence["net_path_gdrdma"] = self.gdr_evidence.get("net_path_gdrdma") or (
                "GDRDMA" in path
            )
            return
        _add_bounded(self.p2p_types, _path_kind(path))

    def _on_net(self, body, where):
        if body.startswith("NET/IB"):
            if "No device found" in body:
                self.ib_no_device = True
            elif "Using" in body:
                for match in _IB_DEVICE.finditer(body):
                    if len(self.ib_devices) < MAX_NAMES:
                        self.ib_devices[match.group("name")] = (int(match.group("port")), match.group("link"))
            elif "GPU Direct RDMA" in body:
                self._on_gdr_line(body)
        elif body.startswith("NET/Socket"):
            if "Using" in body:
                for match in _SOCKET_IFACE.finditer(body):
                    _add_bounded(self.socket_ifaces, match.group("name"))
            elif "GPU Direct RDMA" in body:
                self._on_gdr_line(body)
        elif body.startswith("NET/Plugin"):
            match = _PLUGIN_LOADED.search(body)
            if match:
                key = "name" if match.group("what") == "net" else "coll_plugin"
                self.plugin[key] = match.group("name").strip()
            elif "No plugin found" in body or "Could not find" in body:
                self.plugin.setdefault("loaded", False)
        elif body.startswith("NET/OFI"):
            match = _OFI_VERSION.search(body)
            if match:
                self.plugin["library"] = match.group("lib")
                self.plugin["version"] = match.group("version")
            match = _OFI_PROVIDER.search(body)
            if match:
                self.plugin["provider"] = match.group("provider")
            if "disabling GDR" in body or "GDR not supported" in body:
                self.gdr_evidence["plugin_says_off"] = False

    def _on_gdr_line(self, body):
        if "Disabled" in body:
            self.gdr_evidence.setdefault("rdma_disabled", False)
        elif "Enabled for GPU" in body:
            self.gdr_evidence["enabled_for_gpu"] = True

    def _on_connected(self, body):
        if body.startswith("Connected all rings"):
            # NCCL 2.20+: "Connected all rings, use ring PXN 0 GDR 1"
            gdr = body.find(" GDR ")
            if gdr >= 0:
                value = body[gdr + 5 : gdr + 6]
                if value in ("0", "1"):
                    self.gdr_evidence["rings"] = self.gdr_evidence.get("rings") or value == "1"
        elif body.startswith("Connected NVLS"):
            _add_bounded(self.p2p_types, "NVLS")
        elif "CollNet" in body or "collnet" in body:
            _add_bounded(self.p2p_types, "CollNet")

    def _on_channel_counts(self, body):
        for match in _CHANNEL_COUNT.finditer(body):
            if match.group(3) is not None:
                key, value = "p2p_per_peer", int(match.group(3))
            else:
                key, value = match.group(2), int(match.group(1))
            self.channels[key] = max(self.channels.get(key, 0), value)
        if self.channels.get("nvls"):
            _add_bounded(self.p2p_types, "NVLS")

    def _on_comm(self, body, header, where):
        """A communicator line; ``where`` may be None (see _where): it is needed rarely."""
        if "\ufffd" in body:
            self.invalid_utf8_lines += 1
        if "Destroy COMPLETE" in body:
            return
        if "Abort COMPLETE" in body:
            self.errors.add("aborted", body, self._where(where))
            return
        tokens = body[body.find("comm 0x") :].split()
        # "comm 0x.. rank R nranks N cudaDev D nvmlDev M busId B commId C - Init COMPLETE":
        # the pairs after the address, a later one winning over an earlier one.
        fields = dict(zip(tokens[2::2], tokens[3::2], strict=False))
        try:
            rank = int(fields["rank"])
            nranks = int(fields["nranks"] if "nranks" in fields else fields["nRanks"])
        except (KeyError, ValueError):
            if "Init" in body:
                self._parse_warning(
                    self._where(where), "communicator line without a readable rank and nranks"
                )
            return
        values = []
        for field, name, convert in _COMM_FIELDS:
            if field in fields:
                with contextlib.suppress(ValueError):
                    values.append((name, convert(fields[field])))
        host_pid = self._host_pids.get(header)
        if host_pid is None:
            host_pid = self._host_pid_of(header)
        self._update_comm(
            host_pid, tokens[1], rank, nranks, values, "Init START" in body, "Init COMPLETE" in body, where
        )

    def _host_pid_of(self, header):
        """_host_pid(header), remembered: a rank prints many lines with the same prefix."""
        if len(self._host_pids) >= _MAX_HEADERS:
            self._host_pids.clear()
        host_pid = self._host_pids[header] = _host_pid(header)
        return host_pid

    def _update_comm(self, host_pid, comm, rank, nranks, values, start, complete, where):
        """Apply one communicator line: ``values`` are (our field name, value) pairs it gave."""
        if not 0 <= rank < nranks:
            self._parse_warning(
                self._where(where), "rank %d is outside a communicator of %d ranks" % (rank, nranks)
            )
            return
        host, pid = host_pid
        if host and host not in self.hosts:
            _add_bounded(self.hosts, host)
        key = (host, pid, comm)
        entry = self.communicators.get(key)
        if entry is None:
            if len(self.communicators) >= MAX_COMMUNICATORS:
                self._parse_warning(
                    self._where(where),
                    "more than %d communicators; the rest are not tracked" % MAX_COMMUNICATORS,
                )
                return
            entry = self.communicators[key] = {
                "host": host,
                "pid": pid,
                "comm": comm,
                "comm_id": None,
                "rank": rank,
                "nranks": nranks,
                "cuda_dev": None,
                "bus_id": None,
                "nnodes": None,
                "init_complete": False,
            }
        elif start and entry["init_complete"]:
            # NCCL reused the address of a destroyed communicator for a new one.
            entry["init_complete"] = False
        entry["rank"], entry["nranks"] = rank, nranks
        entry.update(values)
        if complete:
            entry["init_complete"] = True

    def _on_rank_line(self, text):
        """nccl-tests' ``#  Rank  0 Group  0 Pid 123 on host device  0 [0x1b] NVIDIA H100``."""
        if self.communicators:
            return  # NCCL's own communicators say more; the fast scan stops looking for these
        match = _TESTS_RANK.search(text)
        if match:
            self._note_bad_bytes(text)
        if match and len(self.tests_ranks) < MAX_COMMUNICATORS:
            self.tests_ranks[int(match.group("rank"))] = match.group("host")

    # -- result --------------------------------------------------------------------

    def _gdr(self):
        """GPUDirect RDMA: True, False, or None when the log does not say.

        Channel lines are the proof: when ranks connected over the network, GDR was used
        exactly when a path says GDRDMA. Without them, NCCL 2.20+'s "GDR 0|1" on the
        ring line, then per-GPU "Enabled" lines, then any "Disabled" line decide.
        """
        evidence = self.gdr_evidence
        for kind in ("net_path_gdrdma", "rings", "enabled_for_gpu"):
            if kind in evidence:
                return evidence[kind]
        if "plugin_says_off" in evidence or "rdma_disabled" in evidence:
            return False
        return None

    def result(self):
        comms = list(self.communicators.values())
        # Only the first MAX_COMMUNICATORS_LISTED are listed: nsmallest picks them as sorted()
        # would (ties included), without sorting the rest.
        listed = heapq.nsmallest(MAX_COMMUNICATORS_LISTED, comms, key=_communicator_order)
        nranks = max((c["nranks"] for c in comms), default=None)
        world = [c for c in comms if c["nranks"] == nranks]
        # A rank counts as initialised when every world-size communicator it started completed.
        world_state = {}
        for comm in world:
            world_state[comm["rank"]] = world_state.get(comm["rank"], True) and comm["init_complete"]
        init_complete_ranks = sorted(rank for rank, complete in world_state.items() if complete)
        nranks_source = "communicators" if nranks is not None else None
        hosts = set(self.hosts)
        if self.tests_ranks:
            hosts.update(list(self.tests_ranks.values())[: MAX_NAMES - len(hosts)])
            if nranks is None:
                nranks = max(self.tests_ranks) + 1
                nranks_source = "nccl-tests"
        kinds = sorted({_network_kind(name) for name in self.networks})
        if not kinds:
            if self.ib_devices:
                kinds = ["IB"]
            elif self.socket_ifaces:
                kinds = ["Socket"]
        transport = kinds[0] if len(kinds) == 1 else ("mixed" if kinds else None)
        nccl_used = bool(self.nccl_lines or self.nccl_version or self.tests_ranks)
        plugin = dict(self.plugin)
        plugin_networks = sorted(name for name in self.networks if _network_kind(name) == "Plugin")
        if plugin_networks and "name" not in plugin:
            plugin["name"] = plugin_networks[0]
        parse_warnings = list(self.parse_warnings)
        if self.parse_warning_count > len(parse_warnings):
            parse_warnings.append("... %d more" % (self.parse_warning_count - len(parse_warnings)))
        if self.invalid_utf8_lines:
            parse_warnings.append("%d lines read held invalid UTF-8 (replaced)" % self.invalid_utf8_lines)
        return {
            "nccl_used": nccl_used,
            "lines": self.lines,
            "nccl_lines": self.nccl_lines,
            "nccl_version": self.nccl_version,
            "cuda_version": self.cuda_version,
            "hosts": sorted(hosts),
            "nranks": nranks,
            "nranks_source": nranks_source,
            "communicators": listed,
            "communicator_count": len(comms),
            "init_complete_ranks": init_complete_ranks,
            "missing_ranks": missing_ranks(nranks, init_complete_ranks),
            "transport": transport,
            "networks": sorted(self.networks),
            "net_paths": sorted(self.net_paths),
            "plugin": plugin or None,
            "ib_devices": [
                {"name": name, "port": port, "link": link}
                for name, (port, link) in sorted(self.ib_devices.items())
            ],
            "ib_no_device": self.ib_no_device,
            "socket_ifaces": sorted(self.socket_ifaces),
            "bootstrap_ifaces": sorted(self.bootstrap_ifaces),
            "gdr": self._gdr(),
            "p2p_types": sorted(self.p2p_types),
            "channels": dict(self.channels),
            "nccl_warnings": self.warnings,
            "warning_count": self.warning_count,
            "errors": self.errors.result(),
            "parse_warnings": parse_warnings,
        }


def _communicator_order(comm):
    return comm["nranks"], comm["rank"], comm["host"] or "", comm["comm"]


def _where(source, line_number):
    if line_number is None:
        return source
    return "%s:%d" % (source, line_number)


def _find_marker(text, start):
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


def _host_pid(header):
    """Host and pid from the text before ``NCCL``: ``[collector prefix]host:pid:tid [dev] [file:line]``."""
    if not header:
        return None, None
    bracket = header.rfind(" [")
    if bracket < 0:
        return None, None
    token = header[:bracket].rsplit(" ", 1)[-1]
    parts = token.rsplit(":", 3)
    # host:pid:tid, or host:pid in some releases; a collector tag may be glued in front.
    if len(parts) >= 3 and parts[-1].isdigit() and parts[-2].isdigit():
        host, pid = parts[-3], parts[-2]
    elif len(parts) >= 2 and parts[-1].isdigit():
        host, pid = parts[-2], parts[-1]
    else:
        return None, None
    if ">" in host:  # "[1,0]<stdout>:host" glued by Open MPI's tag
        host = host.rsplit(">", 1)[-1].lstrip(":")
    if not host:
        return None, None
    return host, int(pid)


def _scan_source(paths, bodies):
    """The regular expression of the fast scan: it finds each "NCCL" that may matter.

    That is every "NCCL" but a marker "NCCL INFO " whose message _on_info would drop
    (the negative lookahead), and an "NCCL" that opens the body of a marker (the
    lookbehind: that marker's verdict covers its body). Dropped messages are:

    - "Channel"/"Ring" lines whose first " via " leads to one of ``paths`` (already read)
      and the end of the line. No "a" may come between "Cha" and "via": so that " via "
      is the first one and no other marker is glued in front of it. Where the line has
      no "a" after "Cha", it has no " via " either, and the message adds nothing whatever
      the search finds in the lines after it;
    - a body starting with a character _on_info ignores, or empty;
    - a "C"/"R" body other than "Connected..." with no " via " on the line;
    - one of ``bodies`` (read already, holding no marker) and the end of the line.

    The literal "NCCL" in front lets the search skip from one "NCCL" to the next in C.
    """
    skips = []
    if paths:
        skips.append(b"(?:Cha|R)[^a]* via " + _alternatives([path + b"\n" for path in paths]))
    skips.append(b"[^" + re.escape("".join(sorted(_INTERESTING_FIRST_CHARS)).encode("ascii")) + b"]")
    skips.append(b"(?!Connected)[CR](?![^\n]* via )")
    if bodies:
        skips.append(_alternatives([body + b"\n" for body in bodies]))
    return b"NCCL(?! INFO (?:" + b"|".join(skips) + b"))(?<!NCCL INFO NCCL)" + _COMM_LINE


# After the scan pattern's "NCCL": NCCL 2.12+'s communicator lines, read in C. Groups: comm,
# rank, then nranks, cudaDev, busId, commId and START|COMPLETE of "Init" lines, or nRanks
# and nNodes of the line that follows Init START. Any other form is read by _on_comm.
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


def _path_kind(path):
    """Normalise an intra-node path: ``P2P/IPC/read`` -> ``P2P/IPC``, ``SHM/direct/direct`` -> ``SHM``."""
    head, _sep, rest = path.partition("/")
    if head == "P2P":
        kind = rest.split("/", 1)[0].split("(", 1)[0].split(" ", 1)[0]
        return "P2P/" + kind if kind else "P2P"
    if head.upper() == "COLLNET":
        return "CollNet"
    return head.split(" ", 1)[0].split("(", 1)[0] or path


def check_expectations(result, expect):
    """Return one message per expectation the NCCL facts do not meet.

    Each message names the field, what was expected, what was found and the remedy.
    """
    expect = expect or {}
    failures = []
    if expect.get("nccl_used") and not result["nccl_used"]:
        failures.append(
            "nccl_used: expected NCCL output, found no NCCL lines (set NCCL_DEBUG=INFO for every "
            "rank, and use the nccl backend on GPUs)"
        )
        return failures
    nranks = expect.get("nranks")
    if nranks is not None:
        if result["nranks"] != nranks:
            failures.append(
                "nranks: expected a communicator of %d ranks, found %s (check the world size the "
                "launcher started and that every rank's log was collected)" % (nranks, result["nranks"])
            )
        if result.get("nranks_source") != "nccl-tests":
            present = {rank for rank in result["init_complete_ranks"] if 0 <= rank < nranks}
            missing = missing_ranks(nranks, present)
            if missing:
                failures.append(
                    "init_complete_ranks: expected ranks 0-%d to reach Init COMPLETE, ranks %s did not "
                    "(read those ranks' logs: they hung or failed during NCCL init)"
                    % (nranks - 1, _ranks_text(missing, nranks - len(present)))
                )
    transport = expect.get("transport")
    if transport and result["transport"] != transport:
        found = result["transport"] or "no network"
        remedy = ""
        if transport in ("IB", "Plugin") and result["transport"] == "Socket":
            remedy = " (NCCL fell back to TCP sockets. %s)" % _REMEDY_NETWORK_SELECTION
        elif transport == "IB" and result.get("ib_no_device"):
            remedy = " (NET/IB found no device: %s)" % _REMEDY_NETWORK_SELECTION
        failures.append("transport: expected %s, found %s%s" % (transport, found, remedy))
    if expect.get("gdr") and not result["gdr"]:
        failures.append(
            "gdr: expected GPUDirect RDMA, found %s (no GDRDMA on the network channel lines; load "
            "nvidia-peermem or use dma-buf, and check NCCL_NET_GDR_LEVEL and the GPU-NIC PCIe distance)"
            % ("it disabled" if result["gdr"] is False else "no statement in the log")
        )
    if expect.get("no_errors"):
        for error in result.get("errors") or []:
            failures.append(
                "no_errors: expected none, found %s: %s (%d lines, first: %s). Remedy: %s"
                % (error["kind"], error["message"], error["count"], error["lines"][0], error["remedy"])
            )
    return failures


def _ranks_text(ranks, total=None):
    total = len(ranks) if total is None else total
    if total > 20:
        return "%s ... (%d ranks)" % (", ".join(str(rank) for rank in ranks[:20]), total)
    return ", ".join(str(rank) for rank in ranks)


def missing_ranks(nranks, present, limit=MAX_RANKS_LISTED):
    """The ranks below ``nranks`` not in ``present``, in order, at most ``limit`` of them;
    never a list (or a set) as long as ``nranks``, whatever a log says it is."""
    present = set(present)
    missing = []
    for rank in range(nranks or 0):
        if rank not in present:
            missing.append(rank)
            if len(missing) >= limit:
                break
    return missing


def parse_nccl_logs(sources):
    """Parse every source and return the facts (see :meth:`NcclLogParser.result`)."""
    return NcclLogParser().feed_sources(sources).result()

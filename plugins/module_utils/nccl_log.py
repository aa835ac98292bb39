# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read NCCL's debug output (``NCCL_DEBUG=INFO``) into facts an operator can act on.

NCCL prefixes its lines with ``host:pid:tid [cudaDev] NCCL INFO|WARN`` (a WARN may carry
``file.cc:line`` before ``NCCL``). From those lines this parser extracts the NCCL and CUDA
versions, the bootstrap interface, every communicator's rank, size, device and whether it
reached ``Init COMPLETE`` (when no init line survived, the size and the ranks of the ``Abort
COMPLETE`` / ``Destroy COMPLETE`` lines), the network transport (IB or RoCE devices, sockets, or a net
plugin such as aws-ofi-nccl), GPUDirect RDMA, the intra-node paths, channel counts and
every WARN line. It classifies the failures it recognises and names their remedy in this
collection's terms; for the NCCL errors PyTorch reports, the ``Last error:`` line torch prints
after them and the line after it (what failed) are their evidence.

Only lines holding ``NCCL`` matter (plus nccl-tests' ``Rank N ... on host`` lines, which
give the job size when NCCL itself printed nothing, and torch's CUDA out-of-memory
message). :func:`parse_nccl_logs` reads the files with the fast scan of nccl_scan, which
steps, in C, over every NCCL line that cannot add a fact (topology dumps, channel paths and
messages another rank already printed) and feeds this parser the rest: Python sees a few
lines per rank and communicator, and gets the same result as reading every line. The facts
are read here alone; the scan learns from what the parser reports it read for the first
time. The state kept is bounded (see the ``MAX_*`` limits): memory does not grow with the
size of a log.
"""

from __future__ import annotations

import contextlib
import heapq
import re

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import iter_lines
from ansible_collections.gpuops.training.plugins.module_utils.nccl_scan import NcclScan, find_marker
from ansible_collections.gpuops.training.plugins.module_utils.ranks_text import (
    MAX_PARTS,
    ranks_phrase,
    ranks_text,
    where_ranks_ran,
)

# Bounds on what is kept, so that memory stays flat on any input.
MAX_WARNINGS = 200
MAX_SAMPLES_PER_ERROR = 5
MAX_COMMUNICATORS = 65536
MAX_COMMUNICATORS_LISTED = 4096  # in the result; communicator_count has them all
MAX_NAMES = 1024  # hosts, devices, interfaces, path kinds
MAX_PARSE_WARNINGS = 50
MAX_SAMPLE_CHARS = 400
MAX_DETAILS_NAMED = 3  # distinct "Last error" details named in an error's message
# Lines after torch's NCCL error line in which its "Last error:" may come, and after that
# line, in which what failed may come (other ranks' lines count).
MAX_EVIDENCE_LINES = 4

# Distinct INFO bodies remembered so that repeats are skipped.
MAX_SEEN = 65536
# Ranks listed in missing_ranks: a communicator size read from a log (or expected) can be
# any number, and a list of every rank below it could exhaust memory.
MAX_RANKS_LISTED = 65536
# Line prefixes whose host and pid are remembered (a rank prints many lines with one prefix).
_MAX_HEADERS = 8192

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
_GLUED_HOST = re.compile(r"[A-Za-z][A-Za-z0-9.-]*$")
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
            "Heartbeat monitor timed out",
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
        "internal_error",
        ("internal error", "ncclInternalError"),
        "NCCL reported an internal error (ncclInternalError)",
        "NCCL 2.18 reports most network failures as internal errors: read the WARN lines just before "
        "(rerun with NCCL_DEBUG=WARN, or INFO with NCCL_DEBUG_SUBSYS=INIT,NET). Check that every rank "
        "runs the same NCCL version (the same image everywhere), that NCCL_SOCKET_IFNAME, NCCL_IB_HCA "
        "and NCCL_TOPO_FILE name what exists in every pod, and that the net plugin matches the NCCL "
        "release.",
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
    (
        # Only for a line no other rule matched (see FALLBACK_KINDS).
        "nccl_error",
        ("NCCL error",),
        "PyTorch reported an NCCL error this collection does not classify further",
        "Read the NCCL error string in the line and the NCCL WARN lines before it (rerun with "
        "NCCL_DEBUG=WARN if there are none); the first rank to fail names the cause.",
    ),
)
# Kinds recorded only when a line matches no other rule.
FALLBACK_KINDS = frozenset(["nccl_error"])
# Ranks listed per failure kind.
MAX_ERROR_RANKS = 4096
# A rank the message itself names: torch's "[Rank 1]" and "[PG ID 0 PG GUID 0(default_pg) Rank 1]",
# "... was aborted on rank 3".
_MESSAGE_RANK = re.compile(r"\[(?:PG [^\]]*? )?Rank (\d+)\]|\bon rank (\d+)\b")
_REMEDIES = {kind: remedy for kind, _needles, _message, remedy in FAILURE_RULES}
_MESSAGES = {kind: message for kind, _needles, message, _remedy in FAILURE_RULES}


def failure_remedy(kind):
    """The remedy text of a failure kind (see FAILURE_RULES)."""
    return _REMEDIES.get(kind)


class ErrorCollector:
    """Count the failures seen per kind and keep a few sample lines of each.

    Samples are kept for the first MAX_SAMPLES_PER_ERROR lines of a kind, each with the
    lines that are its evidence (:meth:`add_evidence`), in the order of the log.
    """

    def __init__(self):
        self._kinds = {}
        self._sources = {}  # source name -> order of first sight, to keep samples in log order

    def classify(self, text, where, sample=None, rank=None):
        """Record every failure kind ``text`` matches; return the kinds it did.

        ``sample`` is the line to keep as an example, ``text`` when not given. ``rank`` is
        the rank a collector prefix named; without it, the rank the message names (torch's
        ``[Rank N]``) is kept.
        """
        matched = []
        for kind, needles, _message, _remedy in FAILURE_RULES:
            if matched and kind in FALLBACK_KINDS:
                continue
            for needle in needles:
                if needle in text:
                    if rank is None:
                        rank = message_rank(text)
                    self.add(kind, sample or text, where, rank=rank)
                    matched.append(kind)
                    break
        return matched

    def add(self, kind, text, where, message=None, remedy=None, rank=None):
        entry = self._kinds.get(kind)
        if entry is None:
            entry = self._kinds[kind] = {
                "kind": kind,
                "message": message or _MESSAGES.get(kind, kind),
                "remedy": remedy or _REMEDIES.get(kind, ""),
                "lines": [],
                "count": 0,
                "ranks": set(),
                "order": [],  # where each of lines is in the log
                "details": [],  # what the evidence says, as named in the message
                "more_details": 0,
            }
        entry["count"] += 1
        if entry["count"] <= MAX_SAMPLES_PER_ERROR:
            self._insert(entry, where, text)
        if rank is not None and len(entry["ranks"]) < MAX_ERROR_RANKS:
            entry["ranks"].add(rank)

    def sampled(self, kind):
        """Whether the last line recorded for ``kind`` was kept as a sample."""
        return self._kinds[kind]["count"] <= MAX_SAMPLES_PER_ERROR

    def add_evidence(self, kinds, sampled, lines, detail):
        """Lines (``(where, text)``) that tell more about the last failure of ``kinds``: kept
        beside its sample for the kinds in ``sampled``; ``detail`` (what they say) is named
        in the message of every kind."""
        for kind in kinds:
            entry = self._kinds[kind]
            if kind in sampled:
                for where, text in lines:
                    self._insert(entry, where, text)
            if detail and detail not in entry["details"]:
                if len(entry["details"]) < MAX_DETAILS_NAMED:
                    entry["details"].append(detail)
                else:
                    entry["more_details"] += 1

    def _insert(self, entry, where, text):
        """Keep a sample in the order of the log (evidence can be read before the samples of
        the lines it follows in the log, see NcclScan)."""
        key = self._order(where)
        order, lines = entry["order"], entry["lines"]
        index = len(lines)
        if key is not None:
            while index and order[index - 1] is not None and order[index - 1] > key:
                index -= 1
        order.insert(index, key)
        lines.insert(index, _sample(where, text))

    def _order(self, where):
        """``(source order, line number)`` of a ``source:line`` place, or None."""
        if not where:
            return None
        source, _colon, number = where.rpartition(":")
        if not number.isdigit():
            source, number = where, "0"
        position = self._sources.get(source)
        if position is None:
            position = self._sources[source] = len(self._sources)
        return position, int(number)

    def result(self):
        return [
            {
                "kind": entry["kind"],
                "message": _with_details(entry),
                "remedy": entry["remedy"],
                "lines": list(entry["lines"]),
                "count": entry["count"],
                "ranks": sorted(entry["ranks"]),
            }
            for entry in self._kinds.values()
        ]


def _with_details(entry):
    """The message of a kind, naming what its evidence says (NCCL's last error)."""
    if not entry["details"]:
        return entry["message"]
    more = " (and %d more)" % entry["more_details"] if entry["more_details"] else ""
    return "%s; NCCL's last error: %s%s" % (entry["message"], " | ".join(entry["details"]), more)


def message_rank(text):
    """The rank a failure message names (``[Rank 1]``, ``on rank 3``), or None."""
    if "ank " not in text:
        return None
    match = _MESSAGE_RANK.search(text)
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


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

    The fast scan (nccl_scan.NcclScan) feeds it through :meth:`read_line`, :meth:`on_info`
    and :meth:`update_comm`, and learns from ``new_paths`` and ``new_bodies`` what it may
    step over from then on.
    """

    # What on_info reads: INFO bodies starting with one of these characters (the fast scan
    # steps over the others), and of those starting with C or R only "Connected..." and the
    # ones naming a path " via ". A fact read from a body starting otherwise needs its first
    # character here.
    INFO_FIRST_CHARS = frozenset("NncCRUBGS0123456789\x1b")
    # Besides lines holding "NCCL", read_line reads lines with "Rank" (nccl-tests' device
    # lines, only while no communicator is known) and "CUDA out of memory" (torch's OOM
    # message), which name neither; the fast scan finds them by these bytes. Each needle
    # costs the scan one search of the whole log (about 10% of its time on the benchmark's
    # log), so torch's "ncclSystemError: ..." lines have none: torch prints them right after
    # the "NCCL error in: ..., unhandled system error, ..." line, which names the same failure.
    OTHER_NEEDLES = (b"Rank", b"CUDA out of memory")

    def __init__(self, max_warnings=MAX_WARNINGS):
        self.max_warnings = max_warnings
        self.lines = 0
        self.nccl_lines = 0
        self.nccl_version = None
        self.cuda_version = None
        self.communicators = {}  # (host, pid, comm) -> facts
        # (comm, rank, nranks) -> the keys of communicators that were announced so: a piece
        # of a line another process cut short has no prefix (no host), yet is one of them.
        self._members = {}
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
        # Ranks of the Abort / Destroy COMPLETE lines, by communicator size: the world size
        # when no init line survived (a crashed run's tail).
        self.teardown_ranks = {}
        self.errors = ErrorCollector()
        # torch's NCCL error line whose evidence the next lines may hold (see on_follow_line).
        self.evidence = None
        self.parse_warnings = []
        self.parse_warning_count = 0
        self.invalid_utf8_lines = 0
        self._seen_via = set()
        self._seen_bodies = set()
        self._host_pids = {}  # header -> _host_pid(header)
        # Channel paths and INFO bodies read for the first time, for the fast scan to learn
        # from; it empties the lists.
        self.new_paths = []
        self.new_bodies = []
        # source:line of the line being read, for a reader that gives no ``where`` (see _where).
        self.locate = None

    # -- input ---------------------------------------------------------------------

    def feed(self, source, text, tags=None, line_number=None):
        """Take one line (already normalised by ``log_sources.normalize_line``) and its tags."""
        self.lines += 1
        where = _where(source, line_number)
        rank = tags.get("rank") if tags else None
        if self.evidence is not None:
            self.on_follow_line(text, where, rank)
        self.read_line(text, where, rank)

    def feed_sources(self, sources):
        """Read every source with the fast scan; same result as :meth:`feed_sources_line_by_line`."""
        NcclScan(self).feed_sources(sources)
        return self

    def feed_sources_line_by_line(self, sources):
        """Read every line through ``iter_lines``; slower, same result as :meth:`feed_sources`."""
        numbers = {}
        for source, text, tags in iter_lines(sources):
            numbers[source] = numbers.get(source, 0) + 1
            self.feed(source, text, tags, numbers[source])
        return self

    def _where(self, where):
        """``where`` as given, or, from a reader that left it out, the line it is reading."""
        return self.locate() if where is None else where

    def _note_bad_bytes(self, text):
        """Count pieces the parser keeps something from that held invalid UTF-8 (now U+FFFD)."""
        if "\ufffd" in text:
            self.invalid_utf8_lines += 1

    def _parse_warning(self, where, message):
        self.parse_warning_count += 1
        if len(self.parse_warnings) < MAX_PARSE_WARNINGS:
            self.parse_warnings.append("%s: %s" % (where, message) if where else message)

    # -- one line ------------------------------------------------------------------

    def read_line(self, text, where, rank=None):
        """Read one normalised line, counted by the caller; ``where`` is source:line and
        ``rank`` the rank its collector prefix named, if any."""
        if "NCCL" in text:
            self._on_nccl_line(text, where, rank)
        elif "Rank" in text:
            self._on_rank_line(text)
        elif "CUDA out of memory" in text:
            self._note_bad_bytes(text)
            self.errors.classify(text, where, rank=rank)

    def _on_nccl_line(self, text, where, rank=None):
        position, body_start = find_marker(text, 0)
        if position < 0:
            self._on_unprefixed(text, where, rank)
            return
        header = text[:position]
        # Interleaved writes can glue several NCCL lines into one: read each piece. Only
        # the first piece's prefix is trustworthy; the others are glued to a cut body.
        while position >= 0:
            is_info = text.startswith(("INFO", "TRACE"), position + 5)
            next_position, next_body_start = find_marker(text, body_start)
            body = text[body_start:next_position] if next_position >= 0 else text[body_start:]
            self.nccl_lines += 1
            if is_info:
                self.on_info(body, header, where, rank)
            else:
                # Show the whole line as the sample, unless it is one piece of glued lines.
                self._on_warn(
                    body, header, where, text if header is not None and next_position < 0 else body, rank
                )
            header = None
            position, body_start = next_position, next_body_start

    def _on_unprefixed(self, text, where, rank=None):
        """A line naming NCCL without NCCL's prefix: versions, nccl-tests and torch errors."""
        self._note_bad_bytes(text)
        if "NCCL version" in text:
            self._on_version(text)
        kinds = self.errors.classify(text, where, rank=rank)
        if kinds and "NCCL error" in text:
            # torch's "NCCL error in: ..., <reason>, NCCL version X": the lines it prints next
            # ("ncclXxxError: ...", "Last error:" and what failed) are its evidence.
            self.evidence = _Evidence(
                where, rank, kinds, [kind for kind in kinds if self.errors.sampled(kind)]
            )

    def on_follow_line(self, text, where, rank=None):
        """A line after torch's NCCL error line, while :attr:`evidence` waits for its last error
        (the line-by-line reader gives it every line; the fast scan the lines that follow)."""
        evidence = self.evidence
        if where.rpartition(":")[0] != evidence.source or (
            "NCCL error" in text and find_marker(text, 0)[0] < 0
        ):
            self.evidence = None  # another source, or another error of torch's: its own evidence
            return
        evidence.left -= 1
        if rank is not None and evidence.rank is not None and rank != evidence.rank:
            if evidence.left <= 0:
                self.evidence = None
            return  # another rank's line
        text = text.strip()
        if evidence.last_error is None:
            at = text.find("Last error:")
            if at < 0:
                if evidence.left <= 0:
                    self.evidence = None
                return
            detail = text[at + len("Last error:") :].strip()
            if detail:  # "Last error: <what failed>" on one line
                self._add_evidence([(where, text)], detail)
            else:
                # What failed is on the next line, behind the same prefix (a logger's, say).
                evidence.last_error = (where, text, text[:at])
                evidence.left = MAX_EVIDENCE_LINES
            return
        last_where, last_text, prefix = evidence.last_error
        detail = text[len(prefix) :].strip() if prefix and text.startswith(prefix) else text
        self._add_evidence([(last_where, last_text), (where, text)], detail)

    def _add_evidence(self, lines, detail):
        self._note_bad_bytes(detail)
        evidence, self.evidence = self.evidence, None
        self.errors.add_evidence(evidence.kinds, evidence.sampled, lines, detail)

    def _on_version(self, text):
        if self.nccl_version is None:
            match = _VERSION.search(text)
            if match:
                self.nccl_version = match.group("nccl")
                self.cuda_version = match.group("cuda")

    def _on_warn(self, body, header, where, sample, rank=None):
        self.warning_count += 1
        self._note_bad_bytes(body)
        host, pid = _host_pid(header)
        if host:
            _add_bounded(self.hosts, host)
        if len(self.warnings) < self.max_warnings:
            self.warnings.append({"host": host, "pid": pid, "message": body.strip(), "line": where})
        self.errors.classify(body, where, sample, rank)

    def on_info(self, body, header, where, rank=None):
        """Read the body of an NCCL INFO line; ``where`` may be None (see _where); ``rank``
        is the rank the line's collector prefix named.

        The fast scan steps over what this drops (see INFO_FIRST_CHARS): keep them in step.
        """
        first = body[:1]
        if first == "C" or first == "R":
            via = body.find(" via ")  # "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", "Ring 00 : ..."
            if via >= 0:
                self._on_via(body[via + 5 :].strip())
                return
            if not body.startswith("Connected"):
                return
        elif first not in self.INFO_FIRST_CHARS:
            return
        elif (first == "c" or first == "n") and "comm 0x" in body:
            if "rank " in body:
                self._on_comm(body, header, where, rank)
            return
        # What is left reads the same from every rank that prints it: read each body once.
        if body in self._seen_bodies:
            return
        if len(self._seen_bodies) < MAX_SEEN:
            self._seen_bodies.add(body)
            self.new_bodies.append(body)
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
            self.new_paths.append(path)
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

    def _on_comm(self, body, header, where, rank=None):
        """A communicator line; ``where`` may be None (see _where): it is needed rarely."""
        if "\ufffd" in body:
            self.invalid_utf8_lines += 1
        teardown = "Destroy COMPLETE" in body or "Abort COMPLETE" in body
        if "Abort COMPLETE" in body:
            self.errors.add("aborted", body, self._where(where), rank=rank)
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
        if teardown:
            self._on_teardown(header, rank, nranks)
            return
        values = []
        for field, name, convert in _COMM_FIELDS:
            if field in fields:
                with contextlib.suppress(ValueError):
                    values.append((name, convert(fields[field])))
        self.update_comm(
            self.host_pid_of(header),
            tokens[1],
            rank,
            nranks,
            values,
            "Init START" in body,
            "Init COMPLETE" in body,
            where,
        )

    def _on_teardown(self, header, rank, nranks):
        """``comm ... rank R nranks N ... - Abort|Destroy COMPLETE``: rank R of a communicator
        of N ranks existed (whether its init completed, these lines do not say)."""
        if not 0 <= rank < nranks:
            return
        self._add_host(header)
        ranks = self.teardown_ranks.get(nranks)
        if ranks is None:
            if len(self.teardown_ranks) >= MAX_NAMES:
                return
            ranks = self.teardown_ranks[nranks] = set()
        if len(ranks) < MAX_RANKS_LISTED:
            ranks.add(rank)

    def host_pid_of(self, header):
        """_host_pid(header), remembered: a rank prints many lines with the same prefix."""
        host_pid = self._host_pids.get(header)
        if host_pid is None:
            if len(self._host_pids) >= _MAX_HEADERS:
                self._host_pids.clear()
            host_pid = self._host_pids[header] = _host_pid(header)
        return host_pid

    def update_comm(self, host_pid, comm, rank, nranks, values, start, complete, where):
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
        if host is None:
            # A piece of a line another process's output cut short has no prefix of its own:
            # it announces a communicator with a host when the address, rank and size say so.
            entry = self._member_with_host(comm, rank, nranks)
            if entry is not None:
                start = False  # a cut copy of an announcement: no new communicator
            else:
                entry = self.communicators.get(key)
        else:
            entry = self.communicators.get(key)
            if entry is None:
                entry = self._member_without_host(key, rank, nranks)
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
            self._members.setdefault((comm, rank, nranks), []).append(key)
        elif start and entry["init_complete"]:
            # NCCL reused the address of a destroyed communicator for a new one.
            entry["init_complete"] = False
        entry["rank"], entry["nranks"] = rank, nranks
        entry.update(values)
        if complete:
            entry["init_complete"] = True

    def _member_with_host(self, comm, rank, nranks):
        """The one communicator with a host announced with this address, rank and size, or None."""
        keys = self._members.get((comm, rank, nranks))
        if not keys:
            return None
        known = [key for key in keys if key[0] is not None]
        if len(known) != 1:
            return None
        entry = self.communicators[known[0]]
        return entry if (entry["rank"], entry["nranks"]) == (rank, nranks) else None

    def _member_without_host(self, key, rank, nranks):
        """The communicator a piece without a prefix announced with this address, rank and
        size, now filed under ``key`` (its host, pid and address), or None."""
        host, pid, comm = key
        keys = self._members.get((comm, rank, nranks))
        piece = (None, None, comm)
        if not keys or piece not in keys:
            return None
        entry = self.communicators[piece]
        if (entry["rank"], entry["nranks"]) != (rank, nranks):
            return None  # the piece's address went to another rank since
        del self.communicators[piece]
        keys[keys.index(piece)] = key
        entry["host"], entry["pid"] = host, pid
        self.communicators[key] = entry
        return entry

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
        if nranks is None and self.teardown_ranks:
            # No init line survived: the Abort / Destroy COMPLETE lines say how many ranks there were.
            nranks = max(self.teardown_ranks)
            nranks_source = "teardown"
        hosts = set(self.hosts)
        if self.tests_ranks:
            hosts.update(list(self.tests_ranks.values())[: MAX_NAMES - len(hosts)])
            if nranks is None:
                nranks = max(self.tests_ranks) + 1
                nranks_source = "nccl-tests"
        # Ranks of the world the log names in any communicator line (or nccl-tests' rank lines).
        if nranks_source == "nccl-tests":
            seen = set(self.tests_ranks)
        else:
            seen = {comm["rank"] for comm in world}
            seen.update(self.teardown_ranks.get(nranks, ()))
        seen_ranks = sorted(seen)[:MAX_RANKS_LISTED]
        if nranks_source == "communicators":
            missing = missing_ranks(nranks, init_complete_ranks)
        elif nranks_source == "teardown":
            missing = missing_ranks(nranks, seen)  # init is not told: the ranks never named
        else:
            missing = []  # no communicator line tells which ranks reached Init COMPLETE
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
            "seen_ranks": seen_ranks,
            "missing_ranks": missing,
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


class _Evidence:
    """What a torch NCCL error line waits for: "Last error:" and what failed, in the next
    MAX_EVIDENCE_LINES lines of its source and rank."""

    __slots__ = ("source", "rank", "kinds", "sampled", "left", "last_error")

    def __init__(self, where, rank, kinds, sampled):
        self.source = where.rpartition(":")[0]
        self.rank = rank
        self.kinds = kinds
        self.sampled = sampled
        self.left = MAX_EVIDENCE_LINES
        self.last_error = None  # (where, text, prefix) of the "Last error:" line


def _communicator_order(comm):
    return comm["nranks"], comm["rank"], comm["host"] or "", comm["comm"]


def _where(source, line_number):
    if line_number is None:
        return source
    return "%s:%d" % (source, line_number)


def _host_pid(header):
    """Host and pid from the text before ``NCCL``: ``[collector prefix]host:pid:tid [dev] [file:line]``."""
    if not header:
        return None, None
    bracket = header.rfind(" [")
    if bracket < 0:
        return None, None
    before, _space, token = header[:bracket].rpartition(" ")
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
    elif before.strip() and host[:1] and not host[0].isalpha():
        # An NCCL line that starts in the middle of another process's line
        # ("step 12 loss 0.5host:123:456 [0] NCCL INFO ..."): the host name is the part
        # that starts with a letter. A host whose name starts with a digit is kept whole.
        match = _GLUED_HOST.search(host)
        if match:
            host = match.group(0)
    if not host:
        return None, None
    return host, int(pid)


def _path_kind(path):
    """Normalise an intra-node path: ``P2P/IPC/read`` -> ``P2P/IPC``, ``SHM/direct/direct`` -> ``SHM``."""
    head, _sep, rest = path.partition("/")
    if head == "P2P":
        kind = rest.split("/", 1)[0].split("(", 1)[0].split(" ", 1)[0]
        return "P2P/" + kind if kind else "P2P"
    if head.upper() == "COLLNET":
        return "CollNet"
    return head.split(" ", 1)[0].split("(", 1)[0] or path


# NCCL_DEBUG levels that print INFO lines; the subsystems whose INFO lines carry the facts
# the expectations read (communicators, Init COMPLETE, the network, the channels).
INFO_LEVELS = ("INFO", "TRACE")
INFO_SUBSYSTEMS = ("INIT", "ALL")
# Expectations that need NCCL's INFO lines; no_errors reads WARN lines and PyTorch's messages.
INFO_EXPECTATIONS = ("nccl_used", "nranks", "transport", "gdr")


def info_gap(debug=None, debug_subsys=None):
    """Why the run's NCCL settings printed none of the INFO lines the expectations read, or
    None when they did (or when ``debug`` is None: the settings are not known)."""
    if debug is None:
        return None
    level = str(debug).strip().upper()
    if level not in INFO_LEVELS:
        return (
            "NCCL_DEBUG=%s prints no INFO lines" % level
            if level
            else "NCCL_DEBUG was not set, so NCCL printed no INFO lines"
        )
    subsys = str(debug_subsys or "").strip().upper()
    if not subsys:
        return None
    names = {name.strip() for name in subsys.lstrip("^").split(",")}
    hidden = (
        bool(names & set(INFO_SUBSYSTEMS)) if subsys.startswith("^") else not names & set(INFO_SUBSYSTEMS)
    )
    return "NCCL_DEBUG_SUBSYS=%s leaves out INIT, whose INFO lines carry them" % subsys if hidden else None


def unverifiable(expect):
    """One statement per group of expectations the run's NCCL settings left unverifiable
    (``expect`` carries ``debug`` and ``debug_subsys``, the run's NCCL_DEBUG and
    NCCL_DEBUG_SUBSYS); empty when every expectation can be checked."""
    expect = expect or {}
    gap = info_gap(expect.get("debug"), expect.get("debug_subsys"))
    wanted = [key for key in INFO_EXPECTATIONS if expect.get(key) not in (None, False)]
    if gap is None or not wanted:
        return []
    return [
        "not verifiable: %s (%s): %s. Set NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,NET to verify them "
        "(the training_job role's defaults)" % (", ".join(wanted), _INFO_FACTS, gap)
    ]


_INFO_FACTS = "the NCCL transport, GPUDirect RDMA and every rank's NCCL init"


def check_expectations(result, expect):
    """Return one message per expectation the NCCL facts do not meet.

    Each message names the field, what was expected, what was found and the remedy. The
    expectations that need NCCL's INFO lines are not checked when ``expect``'s ``debug`` and
    ``debug_subsys`` say the run printed none (see :func:`unverifiable`).
    """
    expect = expect or {}
    if unverifiable(expect):
        # The INFO lines the settings say were off are there all the same: a rank they show
        # missing still fails (a result never passes while it lists missing ranks).
        return _init_failures(result, None) + _error_failures(result, expect)
    failures = []
    if expect.get("nccl_used") and not result["nccl_used"]:
        failures.append(
            "nccl_used: expected NCCL output, found no NCCL lines (set NCCL_DEBUG=INFO for every "
            "rank, and use the nccl backend on GPUs)"
        )
        # Failures PyTorch reported about NCCL are still worth naming.
        return failures + _error_failures(result, expect)
    nranks = expect.get("nranks")
    if nranks is not None and result["nranks"] != nranks:
        failures.append(
            "nranks: expected a communicator of %d ranks, found %s (check the world size the "
            "launcher started and that every rank's log was collected)" % (nranks, result["nranks"])
        )
    failures.extend(_init_failures(result, nranks))
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
    return failures + _error_failures(result, expect)


def _init_failures(result, nranks):
    """The ranks below ``nranks`` (expected; else the size the log shows, when it lists
    missing ranks) that did not reach Init COMPLETE, as one message; when the log has no init
    line but Abort / Destroy COMPLETE ones, the ranks none of them names; none when the log
    has no communicator line to tell (nranks read from nccl-tests' rank lines)."""
    source = result.get("nranks_source")
    if source == "nccl-tests":
        return []
    if nranks is None:
        if not result.get("missing_ranks"):
            return []
        nranks = result["nranks"]
    if source == "teardown":
        # Only Abort / Destroy COMPLETE lines: whether init completed is not told, only
        # which ranks the log holds.
        present = {rank for rank in result.get("seen_ranks") or [] if 0 <= rank < nranks}
        missing = missing_ranks(nranks, present)
        if not missing:
            return []
        total = nranks - len(present)
        return [
            "init_complete_ranks: expected ranks 0-%d to reach Init COMPLETE; no NCCL init line is in the "
            "log, and %s %s in none of its lines (collect those ranks' logs, and read them: they hung or "
            "failed during NCCL init if they never reached it)"
            % (nranks - 1, ranks_phrase(missing, total), "appears" if total == 1 else "appear")
        ]
    present = {rank for rank in result["init_complete_ranks"] if 0 <= rank < nranks}
    missing = missing_ranks(nranks, present)
    if not missing:
        return []
    total = nranks - len(present)
    hosts = {
        comm["rank"]: comm.get("host")
        for comm in result.get("communicators") or []
        if comm.get("nranks") == nranks and comm.get("rank") in missing[:MAX_PARTS]
    }
    where = (" " + where_ranks_ran(hosts, "host")) if hosts and total <= MAX_PARTS else ""
    return [
        "init_complete_ranks: expected ranks 0-%d to reach Init COMPLETE, %s did not%s "
        "(read those ranks' logs: they hung or failed during NCCL init)"
        % (nranks - 1, ranks_phrase(missing, total), where)
    ]


def _error_failures(result, expect):
    if not expect.get("no_errors"):
        return []
    return [
        "no_errors: expected none, found %s: %s (%d lines%s, first: %s). Remedy: %s"
        % (
            error["kind"],
            error["message"],
            error["count"],
            "; ranks %s" % ranks_text(error["ranks"]) if error.get("ranks") else "",
            error["lines"][0],
            error["remedy"],
        )
        for error in result.get("errors") or []
    ]


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

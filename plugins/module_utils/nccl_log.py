# Copyright: gpuops.training contributors
# Apache License 2.0 (see LICENSE)
"""Read NCCL's debug output (``NCCL_DEBUG=INFO``) into facts an operator can act on.

NCCL prefixes its lines with ``host:pid:tid [cudaDev] NCCL INFO|WARN``. From those
lines this parser extracts the versions, every communicator's rank, size, device and
whether it reached ``Init COMPLETE``, the network transport and GPUDirect RDMA, and
every WARN line. Lines without ``NCCL`` are skipped after one substring test, which
keeps large logs cheap to read.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import iter_lines

_NCCL_PREFIX = re.compile(
    r"(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN|TRACE|ERROR) ?"
)
_VERSION = re.compile(r"NCCL version (?P<nccl>\d+\.\d+\.\d+)(?:\S*?\+cuda(?P<cuda>\d+\.\d+))?")
_INIT_COMPLETE = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+).*- Init COMPLETE"
)
_INIT_START = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+).*- Init START"
)
_NET_IB = re.compile(r"NET/IB ?: Using (?P<devices>.*?)(?: ?; OOB (?P<oob>\S+))?$")
_IB_DEVICE = re.compile(r"\[\d+\](?P<name>[\w.+-]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_NET_SOCKET = re.compile(r"NET/Socket ?: Using (?P<ifaces>.*)$")
_SOCKET_IFACE = re.compile(r"\[\d+\](?P<name>[\w.@-]+):")
_USING_NETWORK = re.compile(r"Using network (?P<name>.+?)\s*$")
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using (?P<iface>[\w.@-]+):")
_VIA = re.compile(r" via (?P<path>\S+)")


def _network_kind(name):
    """Map NCCL's network name to IB, Socket or Plugin (a net plugin such as aws-ofi-nccl)."""
    if name == "IB":
        return "IB"
    if name == "Socket":
        return "Socket"
    return "Plugin"


class NcclLogParser:
    """Feed it lines with :meth:`feed`; read the facts with :meth:`result`."""

    def __init__(self, max_warnings=200):
        self.max_warnings = max_warnings
        self.lines = 0
        self.nccl_lines = 0
        self.nccl_version = None
        self.cuda_version = None
        self.communicators = {}  # (host, pid, comm) -> facts
        self.networks = set()
        self.ib_devices = {}
        self.socket_ifaces = set()
        self.bootstrap_ifaces = set()
        self.gdr = None
        self.p2p_types = set()
        self.warnings = []
        self.warning_count = 0
        self.hosts = set()

    def feed(self, source, text, tags=None):
        self.lines += 1
        if "NCCL" not in text:
            return
        if "NCCL version" in text and self.nccl_version is None:
            match = _VERSION.search(text)
            if match:
                self.nccl_version = match.group("nccl")
                self.cuda_version = match.group("cuda")
        prefix = _NCCL_PREFIX.search(text)
        if prefix is None:
            return
        self.nccl_lines += 1
        host = prefix.group("host")
        self.hosts.add(host)
        body = text[prefix.end() :]
        if prefix.group("level") == "WARN":
            self.warning_count += 1
            if len(self.warnings) < self.max_warnings:
                self.warnings.append({"host": host, "pid": int(prefix.group("pid")), "message": body.strip()})
            return
        self._on_info(host, prefix.group("pid"), body)

    def _on_info(self, host, pid, body):
        if "Init COMPLETE" in body or "Init START" in body:
            complete = "Init COMPLETE" in body
            match = (_INIT_COMPLETE if complete else _INIT_START).search(body)
            if match:
                key = (host, pid, match.group("comm"))
                comm = self.communicators.setdefault(
                    key,
                    {
                        "host": host,
                        "pid": int(pid),
                        "comm": match.group("comm"),
                        "rank": int(match.group("rank")),
                        "nranks": int(match.group("nranks")),
                        "cuda_dev": int(match.group("dev")),
                        "bus_id": match.group("bus"),
                        "init_complete": False,
                    },
                )
                comm["init_complete"] = comm["init_complete"] or complete
            return
        if body.startswith("NET/IB"):
            match = _NET_IB.search(body)
            if match and "No device found" not in body:
                for device in _IB_DEVICE.finditer(match.group("devices")):
                    self.ib_devices[device.group("name")] = device.group("link")
            return
        if body.startswith("NET/Socket"):
            match = _NET_SOCKET.search(body)
            if match:
                self.socket_ifaces.update(
                    m.group("name") for m in _SOCKET_IFACE.finditer(match.group("ifaces"))
                )
            return
        if body.startswith("Using network"):
            match = _USING_NETWORK.search(body)
            if match:
                self.networks.add(match.group("name"))
            return
        if body.startswith("Bootstrap"):
            match = _BOOTSTRAP.search(body)
            if match:
                self.bootstrap_ifaces.add(match.group("iface"))
            return
        if " via " in body:
            for match in _VIA.finditer(body):
                path = match.group("path")
                if path.startswith("NET/"):
                    if "GDRDMA" in path:
                        self.gdr = True
                else:
                    self.p2p_types.add(path.split("/direct")[0] if path.startswith("SHM") else path)
            return
        if "GPU Direct RDMA Disabled" in body and self.gdr is None:
            self.gdr = False

    def feed_sources(self, sources):
        for source, text, tags in iter_lines(sources):
            self.feed(source, text, tags)
        return self

    def result(self):
        comms = sorted(self.communicators.values(), key=lambda c: (c["nranks"], c["rank"], c["host"]))
        nranks = max((c["nranks"] for c in comms), default=None)
        world = [c for c in comms if c["nranks"] == nranks]
        init_complete_ranks = sorted({c["rank"] for c in world if c["init_complete"]})
        kinds = sorted({_network_kind(name) for name in self.networks})
        if not kinds:
            if self.ib_devices:
                kinds = ["IB"]
            elif self.socket_ifaces:
                kinds = ["Socket"]
        transport = kinds[0] if len(kinds) == 1 else ("mixed" if kinds else None)
        return {
            "nccl_used": self.nccl_lines > 0,
            "lines": self.lines,
            "nccl_lines": self.nccl_lines,
            "nccl_version": self.nccl_version,
            "cuda_version": self.cuda_version,
            "hosts": sorted(self.hosts),
            "nranks": nranks,
            "communicators": comms,
            "init_complete_ranks": init_complete_ranks,
            "missing_ranks": sorted(set(range(nranks or 0)) - set(init_complete_ranks)),
            "transport": transport,
            "networks": sorted(self.networks),
            "ib_devices": [{"name": name, "link": link} for name, link in sorted(self.ib_devices.items())],
            "socket_ifaces": sorted(self.socket_ifaces),
            "bootstrap_ifaces": sorted(self.bootstrap_ifaces),
            "gdr": self.gdr,
            "p2p_types": sorted(self.p2p_types),
            "warnings": self.warnings,
            "warning_count": self.warning_count,
        }


def check_expectations(result, expect):
    """Return one message per expectation the NCCL facts do not meet."""
    expect = expect or {}
    failures = []
    if expect.get("nccl_used") and not result["nccl_used"]:
        failures.append(
            "NCCL was not used: no NCCL lines were found (set NCCL_DEBUG=INFO, and use "
            "the nccl backend on GPUs)"
        )
        return failures
    nranks = expect.get("nranks")
    if nranks is not None:
        if result["nranks"] != nranks:
            failures.append("NCCL communicator size is %s, expected %d" % (result["nranks"], nranks))
        missing = sorted(set(range(nranks)) - set(result["init_complete_ranks"]))
        if missing:
            failures.append(
                "NCCL ranks %s never reached Init COMPLETE" % ", ".join(str(rank) for rank in missing)
            )
    transport = expect.get("transport")
    if transport and result["transport"] != transport:
        failures.append(
            "NCCL used the %s transport, expected %s" % (result["transport"] or "no network", transport)
        )
    if expect.get("gdr") and not result["gdr"]:
        failures.append("GPUDirect RDMA was not used (no GDRDMA path in the channel lines)")
    return failures


def parse_nccl_logs(sources):
    return NcclLogParser().feed_sources(sources).result()

"""A rank's memory, sampled cheaply for its metrics records (``memory`` objects, README.md).

Host: the process's resident set and its high-water mark (``VmRSS`` and ``VmHWM`` in
/proc/self/status; the mark catches a spike that falls between two samples). Container: the
memory cgroup's usage, limit and working set, v2 (``memory.current``, ``memory.max``) or v1
(``memory.usage_in_bytes``, ``memory.limit_in_bytes``). The cgroup also counts the DataLoader
workers, which are processes of their own, and the page cache of the files the rank reads and
writes; the kernel reclaims that cache before it OOM-kills anyone, so the working set (usage
less inactive file pages, as the kubelet computes it) is what a limit has to hold. GPU: the
caching allocator's allocated and reserved bytes for the rank's device, now and at their peak
since the last ``reset_peaks``; and the device's own used and total bytes as the driver sees
them (``cudaMemGetInfo``), which also count what the allocator does not: the CUDA context,
NCCL's buffers, cuBLAS/cuDNN workspaces and any other process on the same GPU.

A sample reads a few small files in /proc and /sys (tens of microseconds: no subprocess, no
GPU synchronisation) and, on CUDA, asks the driver once. A file that is missing or unreadable
makes its fields None, never an error: outside a container there may be no memory cgroup, and
on a CPU there is no GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .metrics import MetricsWriter

PROC_ROOT = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The phases a memory event can name. The collection's log reader keeps the same list, plus
# "train" for the sample a step record carries; a collection test checks that they agree.
EVENT_PHASES = (
    "start",
    "loader_start",
    "epoch_end",
    "checkpoint_write_before",
    "checkpoint_write_after",
    "eval_after",
)

# cgroup v1 writes "no limit" as the largest page count it can hold, in bytes
# (9223372036854771712 with 4 KiB pages); no machine has 4 EiB of memory.
V1_UNLIMITED_FROM = 1 << 62


@dataclass(frozen=True)
class CgroupFiles:
    """The names of a cgroup version's memory files."""

    version: int
    usage: str
    limit: str
    inactive_file: str  # the memory.stat key of the reclaimable file cache


CGROUP_V2 = CgroupFiles(2, "memory.current", "memory.max", "inactive_file")
# total_: hierarchical, children included (memory.usage_in_bytes counts them too).
CGROUP_V1 = CgroupFiles(1, "memory.usage_in_bytes", "memory.limit_in_bytes", "total_inactive_file")


@dataclass(frozen=True)
class MemoryCgroup:
    """The memory cgroup whose figures a sample reports."""

    files: CgroupFiles
    path: str  # its directory under the cgroup mount

    def usage_bytes(self) -> int | None:
        return _parse_int(_read_bytes(f"{self.path}/{self.files.usage}"))

    def limit_bytes(self) -> int | None:
        """None for no limit ("max" in v2, a huge number in v1)."""
        limit = _parse_int(_read_bytes(f"{self.path}/{self.files.limit}"))  # "max": None
        if limit is not None and self.files.version == 1 and limit >= V1_UNLIMITED_FROM:
            return None
        return limit

    def inactive_file_bytes(self) -> int | None:
        stat = _read_bytes(f"{self.path}/memory.stat")
        return _field(stat, f"\n{self.files.inactive_file} ".encode()) if stat else None


def find_memory_cgroup(
    proc_root: Path = PROC_ROOT, cgroup_root: Path = CGROUP_ROOT
) -> MemoryCgroup | None:
    """The memory cgroup that limits this process, from /proc/self/cgroup; None if there is
    none to read.

    A v1 line names its controllers ("4:memory:/path", "7:cpu,memory:/path"); the v2 line is
    "0::/path". A v1 memory line wins: on a hybrid host the v2 hierarchy has no memory files.
    Where the path is not under the mount, the mount itself is the process's cgroup: in a
    container with its own cgroup namespace the path reads "/", and a container that sees the
    host's paths has only its own cgroup mounted. Of that cgroup and its ancestors up to the
    mount, the nearest one with a limit is the one reported (the limit the kernel enforces
    first); with none, the process's own cgroup, without a limit.
    """
    text = _read_text(proc_root / "self" / "cgroup")
    if text is None:
        return None
    v1, v2 = None, None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if "memory" in controllers.split(","):
            v1 = (controllers, path)
        elif hierarchy == "0" and controllers == "":
            v2 = path
    if v1 is not None:
        controllers, path = v1
        # The hierarchy is mounted at memory/, or named after every controller it joins.
        for mount in dict.fromkeys((cgroup_root / "memory", cgroup_root / controllers)):
            if mount.is_dir():
                return _nearest_limited(CGROUP_V1, mount, path)
        return None
    if v2 is not None:
        return _nearest_limited(CGROUP_V2, cgroup_root, v2)
    return None


def _nearest_limited(files: CgroupFiles, mount: Path, path: str) -> MemoryCgroup | None:
    own = mount / path.strip("/")
    if not (own / files.usage).is_file():
        own = mount
    if not (own / files.usage).is_file():
        return None  # the v2 root has no memory files: not in a memory cgroup
    directory = own
    while True:
        cgroup = MemoryCgroup(files, str(directory))
        if cgroup.limit_bytes() is not None:
            return cgroup
        if directory == mount or mount not in directory.parents:  # nothing above limits it
            return MemoryCgroup(files, str(own))
        directory = directory.parent


# Reads a CUDA device's memory as the driver sees it: (used, total) bytes.
DeviceMemoryReader = Callable[[torch.device], tuple[int, int]]


def cuda_device_memory(device: torch.device) -> tuple[int, int]:
    """The device's used and total bytes from ``cudaMemGetInfo`` (``torch.cuda.mem_get_info``):
    total less free, for the whole device (under MIG, the instance), every process on it.

    Chosen over ``torch.cuda.device_memory_used`` (NVML): that needs the nvidia-ml-py package,
    which the trainer does not depend on, and NVML's total is the whole framebuffer, while this
    total is what CUDA can allocate from. One driver call (microseconds on a current driver);
    a step record's sample is taken after that record's own synchronisation.
    """
    free, total = torch.cuda.mem_get_info(device)
    return total - free, total


def device_peak_estimate(
    used: int, total: int, reserved: int | None, reserved_peak: int | None
) -> int:
    """The device's peak use since the allocator's peaks were reset, estimated from one sample.

    The driver keeps no peak. What the allocator does not hold (USED less its RESERVED bytes
    now: the CUDA context, NCCL's buffers, other processes) plus the allocator's own reserved
    peak catches a spike between two samples; never below USED, never above TOTAL.
    """
    peak = used
    if reserved is not None and reserved_peak is not None and reserved_peak > reserved:
        peak = used - reserved + reserved_peak
    return min(peak, total)


class MemorySampler:
    """Samples this process's memory; ``device`` is the rank's (GPU figures on CUDA only).

    The roots are parameters so that tests can give a fake /proc and /sys/fs/cgroup, and so is
    ``device_memory``, the reader of the device's used and total bytes (``cuda_device_memory``
    unless given), so that tests can give a device's figures where there is no GPU.
    """

    def __init__(
        self,
        device: torch.device | None = None,
        proc_root: Path | str = PROC_ROOT,
        cgroup_root: Path | str = CGROUP_ROOT,
        device_memory: DeviceMemoryReader = cuda_device_memory,
    ) -> None:
        self.status_path = f"{proc_root}/self/status"
        self.cuda_device = device if device is not None and device.type == "cuda" else None
        self.device_memory = device_memory
        # The device's highest use since the last reset_peaks (see _device).
        self.device_peak: int | None = None
        # Found once: a process does not move between cgroups. Its limit is read at every
        # sample, as a pod's can be resized in place.
        self.cgroup = find_memory_cgroup(Path(proc_root), Path(cgroup_root))

    def sample(self) -> dict[str, int | None]:
        rss, rss_peak = self._host()
        sample = {"rss_bytes": rss, "rss_peak_bytes": rss_peak}
        sample.update(self._cgroup())
        sample.update(self._cuda())
        sample.update(self._device(sample))
        return sample

    def reset_peaks(self) -> None:
        """Start new GPU peaks (each epoch and each evaluation). The host's high-water mark
        is the process's and stays: it is its peak over the whole run."""
        if self.cuda_device is not None:
            torch.cuda.reset_peak_memory_stats(self.cuda_device)
            self.device_peak = None

    def _host(self) -> tuple[int | None, int | None]:
        status = _read_bytes(self.status_path)
        if status is None:
            return None, None
        rss_kib, peak_kib = _field(status, b"\nVmRSS:"), _field(status, b"\nVmHWM:")
        return _kib_to_bytes(rss_kib), _kib_to_bytes(peak_kib)

    def _cgroup(self) -> dict[str, int | None]:
        if self.cgroup is None:
            usage = limit = working_set = None
        else:
            usage, limit = self.cgroup.usage_bytes(), self.cgroup.limit_bytes()
            inactive = self.cgroup.inactive_file_bytes()
            working_set = None
            if usage is not None and inactive is not None:
                working_set = max(usage - inactive, 0)
        return {
            "cgroup_usage_bytes": usage,
            "cgroup_working_set_bytes": working_set,
            "cgroup_limit_bytes": limit,
        }

    def _cuda(self) -> dict[str, int | None]:
        # One call for all four (torch.cuda.memory_allocated() & co. each flatten and sort the
        # whole statistics dictionary); host-side counters, so no GPU synchronisation.
        stats = {}
        if self.cuda_device is not None:
            stats = torch.cuda.memory_stats_as_nested_dict(self.cuda_device)
        allocated = stats.get("allocated_bytes", {}).get("all", {})
        reserved = stats.get("reserved_bytes", {}).get("all", {})
        return {
            "cuda_allocated_bytes": allocated.get("current"),
            "cuda_reserved_bytes": reserved.get("current"),
            "cuda_max_allocated_bytes": allocated.get("peak"),
            "cuda_max_reserved_bytes": reserved.get("peak"),
        }

    def _device(self, sample: dict[str, int | None]) -> dict[str, int | None]:
        """The device's used and total bytes now, and its peak use since the last reset: the
        highest ``device_peak_estimate`` of the samples since then."""
        used = total = None
        if self.cuda_device is not None:
            used, total = self.device_memory(self.cuda_device)
            peak = device_peak_estimate(
                used, total, sample["cuda_reserved_bytes"], sample["cuda_max_reserved_bytes"]
            )
            if self.device_peak is None or peak > self.device_peak:
                self.device_peak = peak
        return {
            "device_used_bytes": used,
            "device_used_peak_bytes": self.device_peak if used is not None else None,
            "device_total_bytes": total,
        }


def emit_memory(
    metrics: MetricsWriter, sampler: MemorySampler, phase: str, *, epoch: int, step: int
) -> None:
    """One ``memory`` event: a sample taken at PHASE of the run (one of EVENT_PHASES)."""
    if phase not in EVENT_PHASES:
        known = ", ".join(EVENT_PHASES)
        raise ValueError(f"memory phase must be one of {known}, got {phase!r}")
    metrics.emit("memory", phase=phase, epoch=epoch, step=step, memory=sampler.sample())


def _read_text(path: Path) -> str | None:
    text = _read_bytes(str(path))
    return text.decode("ascii", "replace") if text is not None else None


def _read_bytes(path: str) -> bytes | None:
    """The whole of a small /proc or /sys file, or None; a sample reads several of them, so
    the reading is the plain system calls (bytes, no buffered text file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 16384):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _field(text: bytes, key: bytes) -> int | None:
    """The number after KEY (which starts with a newline) in a "key value" file; the first
    line has no newline before it, and the callers' keys are never on it."""
    start = text.find(key)
    if start < 0:
        return None
    start += len(key)
    end = text.find(b"\n", start)
    return _parse_int(text[start : end if end >= 0 else len(text)].removesuffix(b" kB"))


def _kib_to_bytes(kib: int | None) -> int | None:
    return kib * 1024 if kib is not None else None


def _parse_int(text: bytes | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)  # int() skips surrounding whitespace, and b"max" is not a number
    except ValueError:
        return None

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the trainer's JSON-lines metrics (schema ``gpuops.metrics/v1``) out of any log.

The trainer prints one JSON object per line on every rank; those lines reach us mixed
with tracebacks, torchrun's own messages and NCCL output, sometimes behind collector
prefixes (see ``log_sources``). This parser keeps what a verdict needs: per-rank
progress, the loss per epoch, throughput, checkpoints, resumes and restarts, the last
lines each rank printed, torchrun's report of which rank failed first, and each rank's step
time split into data, compute and collective waits, from which stragglers are named.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import statistics
from array import array
from collections import deque

from ansible_collections.gpuops.training.plugins.module_utils.job_status import (
    SIGKILL_NOTE,
    describe_kill,
)
from ansible_collections.gpuops.training.plugins.module_utils.log_parallel import parse_split
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import iter_lines
from ansible_collections.gpuops.training.plugins.module_utils.quantities import format_bytes
from ansible_collections.gpuops.training.plugins.module_utils.ranks_text import (
    ranks_phrase,
    ranks_text,
    where_ranks_ran,
)

try:
    # orjson decodes a metrics line in about a third of the time json takes, and a fleet's logs
    # are millions of them (128 pods x 10 MB: 2 million lines); json reads what it refuses.
    from orjson import loads as _fast_loads
except ImportError:  # optional: json alone reads every line the same way
    _fast_loads = None

SCHEMA = "gpuops.metrics/v1"
DEFAULT_TAIL_LINES = 20
# How the trainer writes an unlimited RLIMIT_MEMLOCK (RLIM_INFINITY).
MEMLOCK_UNLIMITED = -1
MEMLOCK_REMEDY = (
    "RDMA memory registration (ibv_reg_mr) needs an unlimited locked-memory limit, and NCCL "
    "falls back to sockets without it: apply gpuops.training.crio_limits or "
    "gpuops.training.containerd_limits on the nodes (gpuops.training.machineconfig_limits on "
    "OpenShift) and start the pods again; IPC_LOCK alone does not lift the limit for a "
    "non-root user"
)
# Points kept for the loss and throughput curves; a longer run is thinned to every 2nd, 4th,
# ... step, so memory stays bounded however long the run.
MAX_CURVE_POINTS = 2048
MIB = 1 << 20
MAX_BYTE_COUNT = (1 << 63) - 1
# Growth of a rank's per-epoch minimum, in MiB per epoch, above which it is a suspected leak.
# A healthy CPU run's minimum moves by under 1 MiB an epoch; the allocator keeps or returns up
# to about 10 MiB from one epoch to the next.
DEFAULT_LEAK_TOLERANCE_MIB = 16
# Epochs the leak fit needs, after the first (which warms up: allocator, autograd buffers).
LEAK_MIN_EPOCHS = 3
# A source whose records show workers of several nodes (see TrainingLogParser._local_offset);
# a string, not object(), so that a parser pickled to or from another process keeps it.
_MIXED = "several nodes"
# The phase of a memory sample taken in a step record.
STEP_PHASE = "train"
# Every phase a sample can name: the step records' own and the trainer's memory events'.
MEMORY_PHASES = (
    "start",
    "loader_start",
    STEP_PHASE,
    "epoch_end",
    "checkpoint_write_before",
    "checkpoint_write_after",
    "eval_after",
)
# Memory events taken before training starts: not in the per-epoch minimum.
PRE_TRAINING_PHASES = ("start",)
# The memory quantities a rank reports: name, the sample's key, the key of its high-water mark
# (None: none), and what a leak of it is (None: not checked - the cgroup's figures are shared by
# every process in the container, so another rank's leak would show on all of them; so are the
# device's, by every process on the GPU).
MEMORY_QUANTITIES = (
    ("host_rss", "rss_bytes", "rss_peak_bytes", "host"),
    ("cgroup_usage", "cgroup_usage_bytes", None, None),
    ("cgroup_working_set", "cgroup_working_set_bytes", None, None),
    ("cuda_allocated", "cuda_allocated_bytes", "cuda_max_allocated_bytes", "gpu"),
    ("cuda_reserved", "cuda_reserved_bytes", "cuda_max_reserved_bytes", None),
    # The GPU as the driver sees it: the allocator's bytes, the CUDA context, NCCL's buffers and
    # any other process on it (training/README.md, Memory).
    ("device_used", "device_used_bytes", "device_used_peak_bytes", None),
)
# The step time split a step record's ``timing`` carries (training/README.md, Step timing):
# mean seconds per optimizer step over the record's window.
TIMING_KEYS = ("step_s", "data_s", "compute_s", "collective_s")
# A rank whose compute throughput is more than this many percent below the median of all
# ranks' is a straggler (0 turns the check off).
DEFAULT_STRAGGLER_PERCENT = 20.0
# Every key of a memory sample (training/README.md, Memory), as the last sample keeps them.
SAMPLE_KEYS = (
    "rss_bytes",
    "rss_peak_bytes",
    "cgroup_usage_bytes",
    "cgroup_working_set_bytes",
    "cgroup_limit_bytes",
    "cuda_allocated_bytes",
    "cuda_reserved_bytes",
    "cuda_max_allocated_bytes",
    "cuda_max_reserved_bytes",
    "device_used_bytes",
    "device_used_peak_bytes",
    "device_total_bytes",
)


class _RankState:
    __slots__ = (
        "rank",
        "local_rank",
        "host",
        "node",
        "attempt",
        "run_start",
        "run_end",
        "epochs",
        "last_step_record",
        "first_step_loss",
        "tail",
        "sources",
        "memory",
        "memory_samples",
        "cgroup_limit",
        "device_total",
        "last_memory",
        "last_memory_by_source",
        "timing",
        "timing_source",
    )

    def __init__(self, rank, tail_lines):
        self.rank = rank
        self.local_rank = None  # the GPU index on its node, as the trainer reports it
        self.host = None
        self.node = None
        self.attempt = 0
        self.run_start = None
        self.run_end = None
        self.epochs = {}  # epoch -> the latest epoch record for it (a restart may redo one)
        self.last_step_record = None
        self.first_step_loss = None
        self.tail = deque(maxlen=tail_lines)
        self.sources = set()
        self.memory = {}  # quantity name -> _MemoryTrack
        self.memory_samples = 0
        self.cgroup_limit = None  # the smallest memory cgroup limit a sample reported
        self.device_total = None  # the smallest GPU memory total a sample reported
        self.last_memory = None  # the newest sample (see _add_memory)
        self.last_memory_by_source = {}  # source -> the newest sample it holds
        self.timing = None  # _TimingTrack, from the first step record with timing
        self.timing_source = None  # the log of the newest step record with timing


class _TimingTrack:
    """One rank's step timing: each step record's four values and images per optimizer step
    (the record's images/s times its step time), 8 bytes each, however long the run."""

    __slots__ = ("values", "columns", "images")

    def __init__(self):
        self.values = {key: array("d") for key in TIMING_KEYS}
        self.columns = tuple(self.values[key] for key in TIMING_KEYS)
        self.images = array("d")

    def add(self, values, images):
        """``values``: the four numbers, in the order of TIMING_KEYS."""
        columns = self.columns
        for index, value in enumerate(values):
            columns[index].append(value)
        if images is not None:
            self.images.append(images)

    def summary(self, run_start):
        """The medians over the rank's step records, and its compute throughput."""
        medians = {key: _round(statistics.median(self.values[key])) for key in TIMING_KEYS}
        medians["records"] = len(self.values["step_s"])
        images = _images_per_step(self.images, run_start)
        compute = medians["compute_s"]
        rate = _round(images / compute) if images and compute > 0 else None
        return medians, images, rate


def _images_per_step(images, run_start):
    """Images one optimizer step of the rank trains: the median over its step records of
    images/s times step time (exact: both come from the record's window), else its run_start
    record's batch size times gradient accumulation steps; None when neither is known."""
    if images:
        return round(statistics.median(images), 3)
    batch = (run_start or {}).get("batch_size")
    accum = (run_start or {}).get("grad_accum_steps", 1)
    if _is_positive_int(batch) and _is_positive_int(accum):
        return batch * accum
    return None


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class _MemoryTrack:
    """One memory quantity of one rank: every value (for the median), the peak and where it
    happened, and each epoch's smallest value (for leaks)."""

    __slots__ = ("values", "peak", "where", "epoch_min")

    def __init__(self):
        self.values = array("q")  # 8 bytes a sample, however long the run
        self.peak = None
        self.where = None
        self.epoch_min = {}

    def add(self, value, high_water, where, epoch=None):
        """``where`` is ``(phase, epoch, step)`` of the sample; ``epoch`` the epoch whose
        minimum it counts in (None: none, a sample taken before training)."""
        self.values.append(value)
        top = high_water if high_water is not None and high_water > value else value
        if self.peak is None or top > self.peak:
            self.peak, self.where = top, where
        if epoch is not None:
            known = self.epoch_min.get(epoch)
            if known is None or value < known:
                self.epoch_min[epoch] = value

    def summary(self):
        epoch_min = [{"epoch": epoch, "bytes": self.epoch_min[epoch]} for epoch in sorted(self.epoch_min)]
        return {
            "samples": len(self.values),
            "median_bytes": int(statistics.median(self.values)),
            "peak_bytes": self.peak,
            "peak_phase": self.where[0],
            "peak_epoch": self.where[1],
            "peak_step": self.where[2],
            "epoch_min_bytes": epoch_min,
            "growth_mib_per_epoch": epoch_growth_mib(self.epoch_min.items()),
        }


class TrainingLogParser:
    """Feed it lines with :meth:`feed`; read the verdict's inputs with :meth:`result`."""

    def __init__(
        self,
        tail_lines=DEFAULT_TAIL_LINES,
        leak_tolerance_mib=DEFAULT_LEAK_TOLERANCE_MIB,
        straggler_percent=DEFAULT_STRAGGLER_PERCENT,
    ):
        self.tail_lines = tail_lines
        self.leak_tolerance_mib = leak_tolerance_mib
        self.straggler_percent = straggler_percent
        self.ranks = {}
        self.checkpoints = []
        self.resumes = []
        self.skipped_checkpoints = []
        self.evaluations = []
        self.parse_warnings = []
        self.lines = 0
        self.records = 0
        self.launcher_failures = []
        self._report_section = None  # inside torchrun's failure report: "other" or "root"
        self._failure_block = None  # the entry of that report being read
        # Lines that carry no rank tag are attributed to the one rank a source speaks for.
        self._source_rank = {}
        self._untagged_tail = {}
        # torchrun's [defaultN]: tags name a local rank: a source's records tell its node's
        # offset (rank - local_rank; _MIXED when a stream holds several nodes), and lines of a
        # local rank wait here, by (source, local rank), until the offset is known.
        self._local_offset = {}
        self._local_tail = {}
        self._seen_checkpoints = set()
        self._curve = {}  # global step -> [loss sum, loss count, images/s sum, images/s count]
        self._curve_stride = 1

    # -- input -------------------------------------------------------------------

    def feed(self, source, text, tags=None):
        self.lines += 1
        stripped = text.strip()
        if not stripped:
            return
        if stripped[0] == "{" and SCHEMA in stripped:
            record = self._decode(source, stripped)
            if record is not None:
                self._on_record(source, record)
                return
        if self._report_section is not None or stripped == "Failures:" or stripped.startswith("Root Cause"):
            self._on_launcher_line(stripped)
        rank = tags.get("rank") if tags else None
        if rank is None and tags and tags.get("local_rank") is not None:
            offset = self._local_offset.get(source, _MIXED)
            if offset == _MIXED:
                key = (source, tags["local_rank"])
                self._local_tail.setdefault(key, deque(maxlen=self.tail_lines)).append(stripped)
                return
            rank = tags["local_rank"] + offset
        if rank is None:
            rank = self._source_rank.get(source)
        if rank is None:
            self._untagged_tail.setdefault(source, deque(maxlen=self.tail_lines)).append(stripped)
        else:
            self._rank(rank).tail.append(stripped)

    def feed_sources(self, sources):
        for source, text, tags in iter_lines(sources):
            self.feed(source, text, tags)
        return self

    @classmethod
    def merged(cls, parsers):
        """One parser holding what ``parsers`` read from disjoint shares of the sources, in the
        order of the shares (log_parallel); None when a rank's records are in two shares, which
        only one parser reading both can put in order."""
        first = parsers[0]
        for other in parsers[1:]:
            if first.ranks.keys() & other.ranks.keys():
                return None
            first.ranks.update(other.ranks)
            for checkpoint in other.checkpoints:
                key = repr((checkpoint.get("epoch"), checkpoint.get("step"), checkpoint.get("path")))
                if key not in first._seen_checkpoints:
                    first._seen_checkpoints.add(key)
                    first.checkpoints.append(checkpoint)
            first.resumes += other.resumes
            first.skipped_checkpoints += other.skipped_checkpoints
            first.evaluations += other.evaluations
            first.parse_warnings = (first.parse_warnings + other.parse_warnings)[:100]
            first.lines += other.lines
            first.records += other.records
            first.launcher_failures += other.launcher_failures
            for mine, theirs in (
                (first._source_rank, other._source_rank),
                (first._untagged_tail, other._untagged_tail),
                (first._local_offset, other._local_offset),
                (first._local_tail, other._local_tail),
            ):
                mine.update(theirs)
            first._merge_curve(other)
        return first

    def _merge_curve(self, other):
        stride = max(self._curve_stride, other._curve_stride)
        curve = {}
        for points in (self._curve, other._curve):
            for step, point in points.items():
                if step % stride == 0:
                    total = curve.setdefault(step, [0.0, 0, 0.0, 0])
                    for index in range(4):
                        total[index] += point[index]
        while len(curve) > MAX_CURVE_POINTS:
            stride *= 2
            curve = {step: point for step, point in curve.items() if step % stride == 0}
        self._curve, self._curve_stride = curve, stride

    def _decode(self, source, text):
        try:
            record = _loads(text)
        except ValueError as exc:
            # A metrics line cut short (a killed rank, a truncated log) is expected.
            self._warn("%s: unreadable metrics line (%s)" % (source, exc))
            return None
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            return None
        if not isinstance(record.get("rank"), int) or not isinstance(record.get("event"), str):
            self._warn("%s: metrics record without an integer rank or an event" % source)
            return None
        return record

    def _add_curve_point(self, record):
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step % self._curve_stride:
            return
        point = self._curve.get(step)
        if point is None:
            if len(self._curve) >= MAX_CURVE_POINTS:
                self._curve_stride *= 2
                self._curve = {
                    key: value for key, value in self._curve.items() if key % self._curve_stride == 0
                }
                if step % self._curve_stride:
                    return
            point = self._curve[step] = [0.0, 0, 0.0, 0]
        loss, images_per_s = record.get("loss"), record.get("images_per_s")
        if _is_number(loss) and math.isfinite(loss):
            point[0] += loss
            point[1] += 1
        if _is_number(images_per_s) and math.isfinite(images_per_s):
            point[2] += images_per_s
            point[3] += 1

    def _steps_table(self):
        """Per recorded global step: the loss and the images/s per rank, averaged over the
        ranks that recorded it (a step redone after a restart counts each time)."""
        return [
            {
                "step": step,
                "ranks": max(point[1], point[3]),
                "loss": _round(point[0] / point[1]) if point[1] else None,
                "images_per_s_per_rank": _round(point[2] / point[3]) if point[3] else None,
            }
            for step, point in sorted(self._curve.items())
        ]

    def _warn(self, message):
        if len(self.parse_warnings) < 100:
            self.parse_warnings.append(message)

    def _rank(self, rank):
        state = self.ranks.get(rank)
        if state is None:
            state = self.ranks[rank] = _RankState(rank, self.tail_lines)
        return state

    def _on_record(self, source, record):
        self.records += 1
        rank = record["rank"]
        state = self._rank(rank)
        state.sources.add(source)
        known = self._source_rank.setdefault(source, rank)
        if known != rank:
            self._source_rank[source] = None  # an interleaved stream speaks for several ranks
        if source in self._untagged_tail and self._source_rank[source] == rank:
            state.tail.extend(self._untagged_tail.pop(source))
        local_rank = record.get("local_rank")
        if isinstance(local_rank, int):
            state.local_rank = local_rank
            offset = rank - local_rank
            # Nothing to learn once the source's offset is known and no line waits for it.
            if self._local_offset.get(source) != offset or self._local_tail:
                self._learn_offset(source, offset)
        state.host = record.get("host", state.host)
        state.node = record.get("node", state.node)
        attempt = record.get("attempt")
        if isinstance(attempt, int):
            state.attempt = max(state.attempt, attempt)
        event = record["event"]
        if event == "step":  # first: nearly every record is one
            state.last_step_record = record
            if state.first_step_loss is None and _is_number(record.get("loss")):
                state.first_step_loss = record["loss"]
            self._add_curve_point(record)
            self._add_memory(state, record, STEP_PHASE, source)
            self._add_timing(state, record, source)
        elif event == "run_start":
            state.run_start = record
            state.run_end = None  # a restarted attempt supersedes the previous ending
        elif event == "run_end":
            state.run_end = record
        elif event == "memory":
            phase = record.get("phase")
            self._add_memory(state, record, phase if isinstance(phase, str) else "unknown", source)
        elif event == "epoch":
            if isinstance(record.get("epoch"), int):
                state.epochs[record["epoch"]] = record
        elif event == "checkpoint":
            # repr: a field of a broken line may be a list or a dict, which cannot be hashed.
            key = repr((record.get("epoch"), record.get("step"), record.get("path")))
            if key not in self._seen_checkpoints:
                self._seen_checkpoints.add(key)
                self.checkpoints.append(_pick(record, "rank", "epoch", "step", "path", "time"))
        elif event == "resume":
            self.resumes.append(_pick(record, "rank", "epoch", "step", "path", "attempt"))
        elif event == "checkpoint_skipped":
            self.skipped_checkpoints.append(_pick(record, "rank", "path", "reason"))
        elif event == "eval":
            self.evaluations.append(record)

    def _add_timing(self, state, record, source):
        """Take the ``timing`` of a step record: four finite, non-negative numbers, or nothing.
        A step record's hot path (a fleet's logs hold millions), hence the plain loop."""
        timing = record.get("timing")
        if type(timing) is not dict:  # noqa: E721  # pylint: disable=unidiomatic-typecheck
            return
        values = []
        for key in TIMING_KEYS:
            value = timing.get(key)
            # A NaN fails both comparisons; an infinity the second.
            if type(value) not in _NUMBER_TYPES or not 0 <= value < _INFINITY:
                message = "%s: rank %s: a step record's timing is not four numbers of seconds"
                self._warn(message % (source, state.rank))
                return
            values.append(value)
        images_per_s = record.get("images_per_s")
        images = None
        if type(images_per_s) in _NUMBER_TYPES and 0 < images_per_s < _INFINITY:
            images = images_per_s * values[0]
        if state.timing is None:
            state.timing = _TimingTrack()
        state.timing.add(values, images)
        state.timing_source = source

    def _add_memory(self, state, record, phase, source=None):
        """Take the ``memory`` sample of a step record or a memory event. The hot path of a long
        run's log: the newest sample is kept as a reference and described once, at the end."""
        sample = record.get("memory")
        if not isinstance(sample, dict):
            return
        epoch = record.get("epoch")
        where = (phase, epoch, record.get("step"))
        if not _is_byte_count(epoch) or phase in PRE_TRAINING_PHASES:
            epoch = None
        taken = False
        memory = state.memory
        get = sample.get
        for name, key, high_water_key, _kind in MEMORY_QUANTITIES:
            value = get(key)
            # _is_byte_count, inline: this runs for every quantity of every step record.
            if type(value) is not int or not 0 <= value <= MAX_BYTE_COUNT:  # noqa: E721  # pylint: disable=unidiomatic-typecheck
                continue  # None: the quantity is not measured
            high_water = get(high_water_key) if high_water_key else None
            if type(high_water) is not int or not 0 <= high_water <= MAX_BYTE_COUNT:  # noqa: E721  # pylint: disable=unidiomatic-typecheck
                high_water = None
            track = memory.get(name)
            if track is None:
                track = memory[name] = _MemoryTrack()
            track.add(value, high_water, where, epoch)
            taken = True
        limit = sample.get("cgroup_limit_bytes")
        if _is_byte_count(limit) and limit > 0 and (state.cgroup_limit is None or limit < state.cgroup_limit):
            state.cgroup_limit = limit
        total = sample.get("device_total_bytes")  # None on a CPU: skipped first
        if (
            total is not None
            and _is_byte_count(total)
            and total > 0
            and (state.device_total is None or total < state.device_total)
        ):
            state.device_total = total
        if taken:
            state.memory_samples += 1
            moment = record.get("time")
            last = (moment if _is_number(moment) else None, record, phase, source)
            if _is_newer(last, state.last_memory):
                state.last_memory = last
            if _is_newer(last, state.last_memory_by_source.get(source)):
                state.last_memory_by_source[source] = last

    def _on_launcher_line(self, text):
        """Read torchrun's ChildFailedError report: 'Failures:' and 'Root Cause' entries."""
        if text == "Failures:":
            self._report_section = "other"
            return
        if text.startswith("Root Cause"):
            self._report_section = "root"
            return
        if text.startswith("=" * 8):
            self._report_section = None  # the report's closing rule
            self._failure_block = None
            return
        if text.startswith("[") and text.endswith("]:") and text[1:-2].isdigit():
            self._failure_block = {"root_cause": self._report_section == "root"}
            self.launcher_failures.append(self._failure_block)
            return
        if self._failure_block is None:
            return
        key, sep, value = text.partition(":")
        key = key.strip()
        if not sep or key not in ("time", "host", "rank", "exitcode", "error_file", "traceback"):
            return
        value = value.strip()
        if key in ("rank", "exitcode"):
            number = value.split(" ", 1)[0]
            try:
                self._failure_block[key] = int(number)
            except ValueError:
                self._failure_block[key] = value
            if key == "rank" and "local_rank:" in value:
                local = value.split("local_rank:", 1)[1].strip(" )")
                if local.isdigit():
                    self._failure_block["local_rank"] = int(local)
        else:
            self._failure_block[key] = value

    def _learn_offset(self, source, offset):
        known = self._local_offset.setdefault(source, offset)
        if known != _MIXED and known != offset:
            self._local_offset[source] = _MIXED
        elif known == offset:
            self._flush_local_tails(source, offset)

    def _flush_local_tails(self, source, offset):
        for key in [key for key in self._local_tail if key[0] == source]:
            self._rank(key[1] + offset).tail.extend(self._local_tail.pop(key))

    # -- output ------------------------------------------------------------------

    def _attribute_local_tails(self):
        """Local-rank lines of sources without records: a run whose every known offset is 0
        ran on one node (or none is known), so local ranks are ranks; otherwise they stay
        unattributed rather than be given to another node's rank."""
        offsets = set(self._local_offset.values())
        single_node = offsets <= {0}
        for (source, local_rank), tail in list(self._local_tail.items()):
            if source in self._local_offset or not single_node:
                name = "%s [local rank %d]" % (source, local_rank)
                self._untagged_tail.setdefault(name, deque(maxlen=self.tail_lines)).extend(tail)
            else:
                self._rank(local_rank).tail.extend(tail)
        self._local_tail.clear()

    def _attribute_by_directory(self):
        """Give a rank the lines of untagged files beside its metrics (torchrun's stderr.log)."""
        dir_rank = {}
        for source, rank in self._source_rank.items():
            directory = os.path.dirname(source)
            if rank is None or not directory:
                continue
            dir_rank[directory] = rank if dir_rank.get(directory, rank) == rank else None
        for source in list(self._untagged_tail):
            rank = dir_rank.get(os.path.dirname(source))
            if rank is not None:
                self._rank(rank).tail.extend(self._untagged_tail.pop(source))

    def result(self):
        self._attribute_by_directory()
        self._attribute_local_tails()
        ranks = [self._rank_summary(self.ranks[rank]) for rank in sorted(self.ranks)]
        world_sizes = sorted(
            {
                state.run_start["world_size"]
                for state in self.ranks.values()
                if state.run_start and isinstance(state.run_start.get("world_size"), int)
            }
        )
        epochs = self._epoch_table()
        first_start = next((s.run_start for s in self.ranks.values() if s.run_start), None) or {}
        result = {
            "schema": SCHEMA,
            "lines": self.lines,
            "records": self.records,
            "world_size": world_sizes[-1] if world_sizes else None,
            "ranks_reporting": [summary["rank"] for summary in ranks],
            "ranks": ranks,
            "backend": first_start.get("backend"),
            "model": first_start.get("model"),
            "device": first_start.get("device"),
            "workload": _workload(first_start),
            "epochs": epochs,
            "steps": self._steps_table(),
            "loss": _loss_trend(epochs),
            "memlock": _memlock_summary(ranks),
            "memory_leak_tolerance_mib": self.leak_tolerance_mib,
            "memory_leaks": memory_leaks(ranks, self.leak_tolerance_mib),
            "straggler_percent": self.straggler_percent,
            "stragglers": find_stragglers(ranks, self.straggler_percent),
            "throughput": {
                "images_per_s": _round(sum(e["images_per_s"] for e in epochs[-1:] if e["images_per_s"])),
                "ranks_counted": epochs[-1]["ranks"] if epochs else 0,
            },
            "checkpoints": self.checkpoints,
            "resumes": self.resumes,
            "skipped_checkpoints": self.skipped_checkpoints,
            "evaluations": self.evaluations,
            "restarts": max((state.attempt for state in self.ranks.values()), default=0),
            "launcher_failures": self.launcher_failures,
            "unattributed_tail": {name: list(tail) for name, tail in self._untagged_tail.items()},
            "parse_warnings": self.parse_warnings,
        }
        return result

    def _rank_summary(self, state):
        epochs = [state.epochs[epoch] for epoch in sorted(state.epochs)]
        if state.run_end is not None:
            status = "ok" if state.run_end.get("status") == "ok" else "error"
        elif state.run_start is not None:
            status = "incomplete"
        else:
            status = "unknown"
        last_step = state.last_step_record or {}
        timing = images_per_step = compute_rate = None
        if state.timing is not None:
            timing, images_per_step, compute_rate = state.timing.summary(state.run_start)
        return {
            "rank": state.rank,
            "local_rank": state.local_rank,
            "host": state.host,
            "node": state.node,
            "status": status,
            "error": (state.run_end or {}).get("error"),
            "error_time": (state.run_end or {}).get("time") if status == "error" else None,
            "attempt": state.attempt,
            "epochs_completed": len(epochs),
            "last_epoch": epochs[-1]["epoch"] if epochs else None,
            "last_step": last_step.get("step"),
            "first_loss": state.first_step_loss,
            "first_epoch_loss": epochs[0].get("loss") if epochs else None,
            "last_epoch_loss": epochs[-1].get("loss") if epochs else None,
            "images_per_s": epochs[-1].get("images_per_s") if epochs else last_step.get("images_per_s"),
            "uid": (state.run_start or {}).get("uid"),
            "memlock_bytes": _memlock_of(state.run_start),
            "memory": _rank_memory_summary(state),
            "last_memory": _memory_sample(state.last_memory),
            "last_memory_by_source": {
                source: _memory_sample(last) for source, last in state.last_memory_by_source.items()
            },
            "timing": timing,
            "images_per_step": images_per_step,
            "compute_images_per_s": compute_rate,
            "timing_source": state.timing_source,
            "sources": sorted(state.sources),
            "last_lines": list(state.tail),
        }

    def _epoch_table(self):
        """Per epoch: the loss averaged over ranks and the throughput summed over them."""
        table = {}
        for state in self.ranks.values():
            for epoch, record in state.epochs.items():
                row = table.setdefault(epoch, {"epoch": epoch, "losses": [], "medians": [], "ips": []})
                if _is_number(record.get("loss")):
                    row["losses"].append(record["loss"])
                if _is_number(record.get("loss_median")):
                    row["medians"].append(record["loss_median"])
                if _is_number(record.get("images_per_s")):
                    row["ips"].append(record["images_per_s"])
        rows = []
        for epoch in sorted(table):
            row = table[epoch]
            losses, medians = row["losses"], row["medians"]
            rows.append(
                {
                    "epoch": epoch,
                    "ranks": max(len(losses), len(row["ips"])),
                    "loss": _mean(losses),
                    "loss_median": _mean(medians),
                    "images_per_s": _round(sum(row["ips"])) if row["ips"] else None,
                }
            )
        return rows


def _rank_memory_summary(state):
    """A rank's memory: its samples, the cgroup limit, each quantity it reported and, when its
    samples carry it (a CUDA run), the device's total memory."""
    memory = {
        "samples": state.memory_samples,
        "cgroup_limit_bytes": state.cgroup_limit,
        "quantities": {
            name: state.memory[name].summary() for name, *_rest in MEMORY_QUANTITIES if name in state.memory
        },
    }
    if state.device_total is not None:  # a CPU run's summary stays as it was
        memory["device_total_bytes"] = state.device_total
    return memory


def epoch_growth_mib(epoch_minima, min_epochs=LEAK_MIN_EPOCHS):
    """How fast a per-epoch minimum grows, in MiB per epoch: the least-squares slope of
    ``epoch_minima`` ((epoch, bytes) pairs) over the epochs after the first, which warms up
    (allocator, autograd buffers). None when fewer than ``min_epochs`` epochs follow the first."""
    points = sorted(epoch_minima)[1:]
    if len(points) < max(min_epochs, 2):
        return None
    mean_x = sum(epoch for epoch, _value in points) / float(len(points))
    mean_y = sum(value for _epoch, value in points) / float(len(points))
    spread = sum((epoch - mean_x) ** 2 for epoch, _value in points)
    slope = sum((epoch - mean_x) * (value - mean_y) for epoch, value in points) / spread
    return round(slope / MIB, 3)


def memory_leaks(ranks, tolerance_mib=DEFAULT_LEAK_TOLERANCE_MIB):
    """The suspected leaks among rank summaries: each rank's host RSS and CUDA allocated bytes
    whose per-epoch minimum grows faster than ``tolerance_mib`` MiB per epoch."""
    leaks = []
    for summary in ranks:
        quantities = (summary.get("memory") or {}).get("quantities") or {}
        for name, _key, _high_water_key, kind in MEMORY_QUANTITIES:
            growth = (quantities.get(name) or {}).get("growth_mib_per_epoch")
            if kind is None or growth is None or growth <= tolerance_mib:
                continue
            minima = quantities[name]["epoch_min_bytes"]
            leaks.append(
                {
                    "rank": summary["rank"],
                    "host": summary.get("host"),
                    "kind": kind,
                    "quantity": name,
                    "rate_mib_per_epoch": growth,
                    "epochs": [minima[1]["epoch"], minima[-1]["epoch"]],
                    "from_bytes": minima[1]["bytes"],
                    "to_bytes": minima[-1]["bytes"],
                }
            )
    return leaks


def find_stragglers(ranks, percent=DEFAULT_STRAGGLER_PERCENT):
    """The ranks whose compute throughput (``compute_images_per_s``: images per optimizer step
    over the median compute time of a step) is more than ``percent`` below the median of every
    rank's, slowest first; each with ``rank``, ``compute_images_per_s``, ``peer_median`` (that
    median, the rank itself included), ``percent_below`` and ``source`` (the log its timing
    came from: ``logs/<pod>.log`` names its pod).

    Synchronous DDP makes every rank's wall-clock step the same (the fast ranks wait in the
    collectives for the slow one), so only compute time tells a straggler apart. Ranks without
    timing (trainers that predate it) are left out, never flagged; fewer than 2 ranks with it,
    or ``percent`` 0, flag nothing."""
    if not percent:
        return []
    rates = [
        (summary, summary["compute_images_per_s"])
        for summary in ranks
        if _is_number(summary.get("compute_images_per_s")) and summary["compute_images_per_s"] > 0
    ]
    if len(rates) < 2:
        return []
    median = statistics.median(rate for _summary, rate in rates)
    stragglers = []
    for summary, rate in rates:
        below = (median - rate) / median * 100.0
        if below > percent:
            stragglers.append(
                {
                    "rank": summary["rank"],
                    "compute_images_per_s": rate,
                    "peer_median": _round(median),
                    "percent_below": round(below, 1),
                    "source": summary.get("timing_source"),
                }
            )
    return sorted(stragglers, key=lambda straggler: straggler["compute_images_per_s"])


def describe_straggler(straggler, percent=DEFAULT_STRAGGLER_PERCENT, where=None):
    """One sentence on a straggler: the rank (``where`` it ran, such as ``pod p, node n``), its
    compute throughput against the median."""
    return (
        "straggler: rank %s%s computes %s images/s, %.1f %% below the median of all ranks (%s images/s; "
        "threshold %s %%): its peers wait for it in every collective, so the whole job runs at its pace"
        % (
            straggler["rank"],
            " (%s)" % where if where else "",
            _rate_text(straggler["compute_images_per_s"]),
            straggler["percent_below"],
            _rate_text(straggler["peer_median"]),
            _number_text(percent),
        )
    )


def _rate_text(value):
    """Images per second with three significant digits or more: 0.512, 5.12, 51.2, 512."""
    if not _is_number(value):
        return "-"
    return "%.0f" % value if value >= 100 else "%.1f" % value if value >= 10 else "%.2f" % value


def describe_memory_leak(leak, tolerance_mib):
    """One sentence on a suspected leak: the rank, host or GPU memory, and its rate."""
    return (
        "suspected %s memory leak on rank %s: its per-epoch minimum %s grew by %.1f MiB per epoch "
        "(epochs %s to %s, %s to %s; tolerance %s MiB per epoch)"
        % (
            "host" if leak["kind"] == "host" else "GPU",
            leak["rank"],
            "resident set (RSS)" if leak["quantity"] == "host_rss" else "CUDA allocated memory",
            leak["rate_mib_per_epoch"],
            leak["epochs"][0],
            leak["epochs"][1],
            format_bytes(leak["from_bytes"], "Mi"),
            format_bytes(leak["to_bytes"], "Mi"),
            _number_text(tolerance_mib),
        )
    )


def _number_text(value):
    return ("%g" % value) if isinstance(value, float) else str(value)


def _memlock_of(run_start):
    """The soft RLIMIT_MEMLOCK a rank reported (-1 for unlimited), or None if it did not."""
    value = (run_start or {}).get("memlock_bytes")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= -1 else None


def _memlock_summary(ranks):
    """Which ranks ran with a locked-memory limit, and the smallest one."""
    known = [(summary["rank"], summary["memlock_bytes"]) for summary in ranks]
    limited = [(rank, value) for rank, value in known if value is not None and value != MEMLOCK_UNLIMITED]
    return {
        "ranks_reporting": [rank for rank, value in known if value is not None],
        "limited_ranks": [rank for rank, _value in limited],
        "min_bytes": min((value for _rank, value in limited), default=None),
        "unlimited": bool(known) and all(value == MEMLOCK_UNLIMITED for _rank, value in known),
    }


def _loss_trend(epochs):
    """First and last epoch loss and whether it fell.

    The per-epoch median is compared when every epoch has one (the trainer records it):
    one spiking step can swing a short epoch's mean, not its median.
    """
    key = "loss_median" if epochs and all(row.get("loss_median") is not None for row in epochs) else "loss"
    measure = "median step loss per epoch" if key == "loss_median" else "mean step loss per epoch"
    losses = [row[key] for row in epochs if row[key] is not None]
    if not losses:
        return {
            "first": None,
            "last": None,
            "fell": None,
            "change_pct": None,
            "finite": None,
            "measure": measure,
        }
    first, last = losses[0], losses[-1]
    finite = all(math.isfinite(loss) for loss in losses)
    change = _round((last - first) / first * 100.0) if first else None
    return {
        "first": first,
        "last": last,
        "fell": bool(len(losses) > 1 and last < first),
        "change_pct": change,
        "finite": finite,
        "measure": measure,
    }


def check_expectations(result, expect, kills=None):
    """Return one message per expectation the parsed run does not meet.

    ``kills``: the containers a cluster launcher saw killed (job_status.container_kills), which
    the messages on unfinished ranks name with the killed ranks' last memory samples.
    """
    expect = expect or {}
    failures = []
    world_size = expect.get("world_size")
    ranks = {summary["rank"]: summary for summary in result["ranks"]}
    if world_size is not None:
        # The first ranks that are missing: world_size can be any number the caller gives.
        missing = list(itertools.islice((rank for rank in range(world_size) if rank not in ranks), 20))
        if missing:
            total = world_size - len([rank for rank in ranks if 0 <= rank < world_size])
            failures.append(
                "ranks %s%s never reported metrics (expected %d ranks)"
                % (
                    ranks_text(missing),
                    " ... (%d ranks)" % total if total > len(missing) else "",
                    world_size,
                )
            )
        if result["world_size"] is not None and result["world_size"] != world_size:
            failures.append("the run had world size %s, expected %d" % (result["world_size"], world_size))
    if expect.get("all_ranks_finished", world_size is not None):
        failures.extend(_unfinished_rank_messages(result, kills))
    min_epochs = expect.get("min_epochs")
    if min_epochs:
        short = [s["rank"] for s in result["ranks"] if s["epochs_completed"] < min_epochs]
        if short or not result["ranks"]:
            failures.append(
                "%s completed fewer than %d epoch%s"
                % (
                    ranks_phrase(short) if short else "no rank reported",
                    min_epochs,
                    "s" if min_epochs > 1 else "",
                )
            )
    if expect.get("loss_decreases"):
        trend = result["loss"]
        if trend["first"] is None or len([e for e in result["epochs"] if e["loss"] is not None]) < 2:
            failures.append("loss trend unknown: fewer than two epochs with a loss were reported")
        elif not trend["finite"]:
            failures.append("loss is not finite (NaN or inf) in the epoch records")
        elif not trend["fell"]:
            failures.append(
                "loss did not fall: first epoch %.4f, last epoch %.4f" % (trend["first"], trend["last"])
            )
    if expect.get("checkpoint") and not result["checkpoints"]:
        failures.append("no checkpoint was written (no 'checkpoint' record in the metrics)")
    if expect.get("memlock_unlimited"):
        failures.extend(_memlock_messages(result))
    elif expect.get("memlock_min_bytes"):
        failures.extend(_memlock_messages(result, expect["memlock_min_bytes"]))
    if expect.get("no_memory_leak"):
        tolerance = result.get("memory_leak_tolerance_mib", DEFAULT_LEAK_TOLERANCE_MIB)
        failures.extend(describe_memory_leak(leak, tolerance) for leak in result.get("memory_leaks") or [])
    return failures


def _memlock_messages(result, min_bytes=None):
    """Each rank whose RLIMIT_MEMLOCK is limited (min_bytes None) or below min_bytes, named with
    its limit and the remedy; and the ranks that reported none."""
    memlock = result.get("memlock") or {}
    reporting = set(memlock.get("ranks_reporting") or [])
    silent = [summary["rank"] for summary in result["ranks"] if summary["rank"] not in reporting]
    limits = {summary["rank"]: summary["memlock_bytes"] for summary in result["ranks"]}
    if min_bytes is None:
        short = list(memlock.get("limited_ranks") or [])
        expected = "expected unlimited"
    else:
        short = [rank for rank in memlock.get("limited_ranks") or [] if limits[rank] < min_bytes]
        expected = "expected at least %s" % format_bytes(min_bytes, "Ki")
    messages = []
    if short:
        described = ", ".join("%d (%s)" % (rank, format_bytes(limits[rank], "Ki")) for rank in short[:20])
        more = len(short) - 20
        messages.append(
            "ranks %s%s run with a locked-memory limit (RLIMIT_MEMLOCK), %s: %s"
            % (described, " and %d more" % more if more > 0 else "", expected, MEMLOCK_REMEDY)
        )
    if silent or not result["ranks"]:
        messages.append(
            "ranks %s did not report their locked-memory limit (no memlock_bytes in their run_start "
            "record: a trainer from before that field, or ranks that never started)"
            % (ranks_text(silent[:20]) if silent else "(none reported)")
        )
    return messages


def _unfinished_rank_messages(result, kills=()):
    """What stopped the ranks that did not finish, shortest first at fleet size.

    A killed container (``kills``: those a cluster launcher saw, job_status.container_kills) is
    the first failure: one message per pod, with its node, its ranks, the kill and the last
    memory sample its log holds; a kill no rank's log speaks for gets a message of its own.
    Without one, torchrun's first failure or the earliest error reported is the cause, each
    such rank with its node and last lines. The ranks that never took a step (stuck in
    init_process_group or NCCL's init) are named apart from those the launcher stopped after
    the failure, by rank and node.
    """
    unfinished = [summary for summary in result["ranks"] if summary["status"] != "ok"]
    kill_of, orphans = {}, []
    for kill in kills or ():
        ranks = kill_ranks(result, kill)
        if not ranks:
            orphans.append(kill)
        for rank in ranks:
            kill_of.setdefault(rank, kill)
    messages = ["%s, before any rank in it reported metrics" % describe_kill(kill) for kill in orphans]
    if not unfinished:
        return messages
    killed = [s for s in unfinished if s["rank"] in kill_of]
    for kill in _unique(kill_of[s["rank"]] for s in killed):
        messages.append(describe_pod_kill(kill, [s for s in killed if kill_of[s["rank"]] is kill]))
    culprits = killed
    if not culprits:
        # torchrun names the first failure; without its report, the earliest error reported
        # is the cause (the other ranks' errors are the broken collectives that followed).
        root_ranks = {f.get("rank") for f in result["launcher_failures"] if f.get("root_cause")}
        culprits = [s for s in unfinished if s["rank"] in root_ranks]
        if not culprits:
            errors = sorted(
                (s for s in unfinished if s["status"] == "error"),
                key=lambda s: s["error_time"] if s["error_time"] is not None else float("inf"),
            )
            culprits = errors[:1]
        messages.extend(describe_rank_failure(s, result["launcher_failures"]) for s in culprits)
    rest = [s for s in unfinished if s not in culprits]
    stuck = [s for s in rest if s["status"] == "incomplete" and s["last_step"] is None]
    if stuck:
        messages.append(
            "%s never took a training step (the last record is run_start: stuck in the process "
            "group's or NCCL's init) %s" % (ranks_phrase([s["rank"] for s in stuck]), _where(stuck))
        )
    stopped = [s for s in rest if s not in stuck]
    if stopped:
        after = "after the failure above" if messages else "with no failure of their own in the logs"
        messages.append(
            "%s stopped before finishing (terminated by the launcher %s) %s"
            % (ranks_phrase([s["rank"] for s in stopped]), after, _where(stopped))
        )
    return messages


def _where(summaries):
    """Where the ranks ran: their nodes (their hosts where no node was recorded)."""
    return where_ranks_ran({s["rank"]: s.get("node") or s.get("host") for s in summaries})


def describe_pod_kill(kill, summaries):
    """One message for a killed pod: the kill, its node, its ranks, the last memory sample of
    its first rank and that rank's last lines."""
    first = min(summaries, key=lambda summary: summary["rank"])
    node = first.get("node")
    message = describe_kill(kill)
    if node:
        message = message.replace(": ", " on node %s: " % node, 1)
    message += "; %s stopped" % ranks_phrase([summary["rank"] for summary in summaries])
    sample = killed_sample(first, kill)
    message += "; %s" % (
        "last memory sample (rank %d): %s" % (first["rank"], describe_memory_sample(sample))
        if sample
        else "no memory sample in its log (a trainer that records none, or killed before its first)"
    )
    if first.get("last_lines"):
        message += "\n  last lines of rank %d:\n    " % first["rank"] + "\n    ".join(first["last_lines"])
    return message


def _unique(items):
    seen = []
    for item in items:
        if not any(item is known for known in seen):
            seen.append(item)
    return seen


def kill_ranks(result, kill):
    """The ranks whose records are in the killed pod's log (``<pod>.log``, or
    ``<pod>.previous.log`` for the container before a restart, as the training_job role keeps
    them) or that ran on a host of the pod's name."""
    pod = kill.get("pod")
    if not pod:
        return []
    names = (pod + ".log", pod + ".previous.log")
    return [
        summary["rank"]
        for summary in result["ranks"]
        if summary.get("host") == pod
        or any(os.path.basename(str(source)) in names for source in summary.get("sources") or ())
    ]


def killed_sample(summary, kill=None):
    """The last memory sample the killed rank's log holds: for a pod's kill, the newest one in
    that container's log (the previous log for a container killed before a restart); else the
    rank's newest."""
    by_source = summary.get("last_memory_by_source") or {}
    if kill and kill.get("pod"):
        wanted = kill["pod"] + (".previous.log" if kill.get("previous") else ".log")
        for source, sample in by_source.items():
            if os.path.basename(str(source)) == wanted:
                return sample
    return summary.get("last_memory")


def describe_memory_sample(entry):
    """``RSS 1500Mi (high-water 1600Mi), cgroup working set 3900Mi of its 4096Mi limit, in phase
    checkpoint_write_before (epoch 1, step 16)``"""
    memory = entry.get("memory") or {}
    parts = []
    if _is_byte_count(memory.get("rss_bytes")):
        text = "RSS %s" % format_bytes(memory["rss_bytes"], "Mi")
        if _is_byte_count(memory.get("rss_peak_bytes")) and memory["rss_peak_bytes"] > memory["rss_bytes"]:
            text += " (high-water %s)" % format_bytes(memory["rss_peak_bytes"], "Mi")
        parts.append(text)
    if _is_byte_count(memory.get("cgroup_working_set_bytes")):
        text = "cgroup working set %s" % format_bytes(memory["cgroup_working_set_bytes"], "Mi")
        if _is_byte_count(memory.get("cgroup_limit_bytes")) and memory["cgroup_limit_bytes"]:
            text += " of its %s limit" % format_bytes(memory["cgroup_limit_bytes"], "Mi")
        parts.append(text)
    if _is_byte_count(memory.get("cuda_allocated_bytes")):
        text = "GPU allocated %s" % format_bytes(memory["cuda_allocated_bytes"], "Mi")
        if _is_byte_count(memory.get("cuda_reserved_bytes")):
            text += ", reserved %s" % format_bytes(memory["cuda_reserved_bytes"], "Mi")
        parts.append(text)
    if _is_byte_count(memory.get("device_used_bytes")):
        text = "GPU device used %s" % format_bytes(memory["device_used_bytes"], "Mi")
        if _is_byte_count(memory.get("device_total_bytes")) and memory["device_total_bytes"]:
            text += " of its %s" % format_bytes(memory["device_total_bytes"], "Mi")
        parts.append(text)
    return "%s, in phase %s (epoch %s, step %s)" % (
        ", ".join(parts) or "no figures",
        entry.get("phase"),
        entry.get("epoch"),
        entry.get("step"),
    )


def _signal_name(exitcode):
    """``SIGKILL`` for torchrun's exit code -9 (a worker killed by signal 9); None otherwise."""
    if not isinstance(exitcode, int) or isinstance(exitcode, bool) or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return "signal %d" % -exitcode


def describe_rank_failure(summary, launcher_failures=(), kill=None):
    """One message naming a rank that did not finish, why, and its last lines.

    A rank killed by a signal (torchrun's exit code -N) or in a pod the launcher saw killed
    (``kill``: exit code 137, OOMKilled) is named with its last memory sample and its phase.
    """
    rank = summary["rank"]
    exit_info = next((f for f in launcher_failures if f.get("rank") == rank), None)
    if summary["status"] == "error":
        what = "failed"
    elif exit_info is not None:
        what = "exited"
    else:
        what = "stopped before finishing"
    parts = ["rank %d %s" % (rank, what)]
    if summary.get("node") and summary.get("node") != summary.get("host"):
        parts.append("on node %s (host %s)" % (summary["node"], summary.get("host")))
    elif summary.get("host"):
        parts.append("on host %s" % summary["host"])
    signal_name = None
    if exit_info is not None and "exitcode" in exit_info:
        parts.append("with exit code %s" % exit_info["exitcode"])
        if exit_info.get("root_cause"):
            parts.append("(first failure)")
        signal_name = _signal_name(exit_info["exitcode"])
    message = " ".join(parts)
    if kill is not None:
        message += ": " + describe_kill(kill)
    elif signal_name == "SIGKILL":
        message += ", " + SIGKILL_NOTE
    elif signal_name:
        message += ", killed by %s" % signal_name
    if kill is not None or signal_name:
        sample = killed_sample(summary, kill)
        message += "; %s" % (
            "last memory sample: %s" % describe_memory_sample(sample)
            if sample
            else "no memory sample in its log (a trainer that records none, or killed before its first)"
        )
    if summary.get("error"):
        message += ": %s" % summary["error"]
    if summary.get("last_lines"):
        message += "\n  last lines of rank %d:\n    " % rank + "\n    ".join(summary["last_lines"])
    return message


def _workload(run_start):
    """What makes two runs' per-GPU throughput comparable, in words (None without a run_start
    record): the model, the images each rank trains per optimizer step, the input size, the
    precision and the device type."""
    if not run_start or not isinstance(run_start.get("model"), str):
        return None
    parts = [run_start["model"]]
    batch, accum = run_start.get("batch_size"), run_start.get("grad_accum_steps", 1)
    if _is_positive_int(batch) and _is_positive_int(accum):
        parts.append("%d images x %d" % (batch, accum) if accum > 1 else "%d images" % batch)
    low, high = run_start.get("min_size"), run_start.get("max_size")
    if _is_positive_int(low) and _is_positive_int(high):
        parts.append("%d-%d px" % (low, high))
    amp = run_start.get("amp")
    parts.append("amp %s" % amp if isinstance(amp, str) and amp else "fp32")
    device = run_start.get("device")
    if isinstance(device, str) and device:
        parts.append(device.split(":")[0])
    return ", ".join(parts)


def _is_newer(entry, known):
    """Whether a memory sample ``(time, record, phase, source)`` is newer than the one known:
    by its time, else by order."""
    if known is None or entry[0] is None or known[0] is None:
        return True
    return entry[0] >= known[0]


def _memory_sample(last):
    """The newest memory sample as the result describes it (None when there is none)."""
    if last is None:
        return None
    moment, record, phase, source = last
    sample = record["memory"]
    return {
        "phase": phase,
        "epoch": record.get("epoch"),
        "step": record.get("step"),
        "time": moment,
        "attempt": record.get("attempt"),
        "source": source,
        "memory": {key: sample.get(key) for key in SAMPLE_KEYS},
    }


def parse_training_logs(
    sources,
    tail_lines=DEFAULT_TAIL_LINES,
    leak_tolerance_mib=DEFAULT_LEAK_TOLERANCE_MIB,
    straggler_percent=DEFAULT_STRAGGLER_PERCENT,
    workers=None,
):
    """What the logs say; a fleet's logs are read on ``workers`` cores (log_parallel)."""

    def parse(share):
        parser = TrainingLogParser(
            tail_lines=tail_lines, leak_tolerance_mib=leak_tolerance_mib, straggler_percent=straggler_percent
        )
        return parser.feed_sources(share)

    parser = parse_split(sources, parse, TrainingLogParser.merged, workers)
    return (parser if parser is not None else parse(sources)).result()


def _loads(text):
    """``json.loads(text)``, faster with orjson when it is installed. orjson refuses what json
    reads and the trainer can write: NaN and Infinity (a diverged loss), integers past 64 bits."""
    if _fast_loads is not None:
        try:
            return _fast_loads(text)
        except ValueError:
            pass
    return json.loads(text)


def _pick(record, *keys):
    return {key: record[key] for key in keys if key in record}


def _is_byte_count(value):
    # type(), not isinstance: a bool is an int, and neither parser makes a subclass. Past 2**63
    # is no real count, and would not fit the samples' array.
    return type(value) is int and 0 <= value <= MAX_BYTE_COUNT  # noqa: E721  # pylint: disable=unidiomatic-typecheck


def _is_number(value):
    return type(value) in _NUMBER_TYPES


_NUMBER_TYPES = (int, float)
_INFINITY = float("inf")


def _mean(values):
    return _round(sum(values) / len(values)) if values else None


def _round(value):
    return round(value, 6) if isinstance(value, float) else value

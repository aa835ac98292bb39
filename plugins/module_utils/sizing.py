# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Size a training container's memory and its ``/dev/shm`` in Kubernetes quantities.

Memory follows the usual advice for training jobs: request the median of the observed
usage, limit at the peak plus a margin, and make both equal (Guaranteed QoS, the last to be
evicted) for jobs that must not be disturbed. ``/dev/shm`` is a memory-backed ``emptyDir``
that must hold every batch the DataLoader workers have prepared and not yet handed over,
plus NCCL's shared-memory buffers; when it is too small, workers die with a bus error or
NCCL falls back to slower paths.

Pure functions: the filter plugins call them, the unit tests exercise them directly. Every
error names the argument it is about.
"""

from __future__ import annotations

import statistics
from decimal import Decimal, InvalidOperation

from ansible_collections.gpuops.training.plugins.module_utils.quantities import (
    QuantityError,
    format_bytes,
    parse_quantity,
)

GRANULARITIES = ("Ki", "Mi", "Gi")
DEFAULT_MARGIN_PERCENT = 10
# PyTorch's DataLoader default: each worker keeps this many batches ready.
DEFAULT_PREFETCH_FACTOR = 2
# A rule of thumb for NCCL's shared-memory transport and proxy buffers per GPU (rank) in
# the pod; measure `df /dev/shm` during a run and adjust.
DEFAULT_NCCL_PER_GPU = "1Gi"


class SizingError(ValueError):
    """An input that cannot be sized; the message names the argument."""


def _byte_quantity(value, what, allow_zero=True):
    try:
        number = parse_quantity(value, what)
    except QuantityError as error:
        raise SizingError(str(error)) from error
    if number < 0 or (number == 0 and not allow_zero):
        raise SizingError("%s must be %s, got %r" % (what, "at least 0" if allow_zero else "above 0", value))
    return number


def _count(value, what, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        else:
            raise SizingError("%s must be a whole number of at least %d, got %r" % (what, minimum, value))
    if value < minimum:
        raise SizingError("%s must be at least %d, got %d" % (what, minimum, value))
    return value


def _percent(value, what):
    if isinstance(value, bool):
        raise SizingError("%s must be a number of percent (10 for 10%%), got %r" % (what, value))
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation as error:
        raise SizingError("%s must be a number of percent (10 for 10%%), got %r" % (what, value)) from error
    if not number.is_finite() or number < 0:
        raise SizingError("%s must be a number of percent of at least 0, got %r" % (what, value))
    return number


def _granularity(value):
    if value not in GRANULARITIES:
        raise SizingError("granularity must be one of %s, got %r" % (", ".join(GRANULARITIES), value))
    return value


def memory_sizing(samples, margin_percent=DEFAULT_MARGIN_PERCENT, guaranteed=False, granularity="Mi"):
    """Memory request and limit from observed usage samples.

    The request is the median of ``samples``, the limit their peak plus ``margin_percent``;
    with ``guaranteed`` the request is raised to the limit. Both are rounded up to whole
    ``granularity`` units. Returns ``request``, ``limit``, ``median``, ``peak`` (quantities),
    ``qos`` (``Guaranteed`` when request equals limit, else ``Burstable``; as far as memory
    decides it) and ``resources`` (the container's ``requests``/``limits`` for memory).
    """
    if isinstance(samples, (str, bytes, dict)) or not hasattr(samples, "__iter__"):
        raise SizingError(
            "samples must be a list of memory usage quantities such as ['11Gi', '12.5Gi'], got %r"
            % (samples,)
        )
    samples = list(samples)
    if not samples:
        raise SizingError("samples is empty: give at least one observed memory usage")
    values = [_byte_quantity(sample, "samples[%d]" % index) for index, sample in enumerate(samples)]
    peak = max(values)
    if peak == 0:
        raise SizingError("samples: every sample is 0; give the container's observed memory usage")
    return size_memory(statistics.median(values), peak, margin_percent, guaranteed, granularity)


def size_memory(median, peak, margin_percent=DEFAULT_MARGIN_PERCENT, guaranteed=False, granularity="Mi"):
    """Memory request and limit from a usage's median and peak (bytes or quantities): what
    memory_sizing returns for samples of that median and peak."""
    median = _byte_quantity(median, "median")
    peak = _byte_quantity(peak, "peak", allow_zero=False)
    if median > peak:
        raise SizingError("median (%s) must not be above peak (%s)" % (median, peak))
    margin = _percent(margin_percent, "margin_percent")
    granularity = _granularity(granularity)
    if not isinstance(guaranteed, bool):
        raise SizingError("guaranteed must be true or false, got %r" % (guaranteed,))
    limit = format_bytes(peak * (1 + margin / 100), granularity)
    request = limit if guaranteed else format_bytes(median, granularity)
    return {
        "request": request,
        "limit": limit,
        "median": format_bytes(median, granularity),
        "peak": format_bytes(peak, granularity),
        "qos": "Guaranteed" if parse_quantity(request) == parse_quantity(limit) else "Burstable",
        "resources": {"requests": {"memory": request}, "limits": {"memory": limit}},
    }


def shm_bytes(
    workers,
    batch_size,
    sample_bytes,
    gpus=1,
    prefetch_factor=DEFAULT_PREFETCH_FACTOR,
    nccl_per_gpu=DEFAULT_NCCL_PER_GPU,
    margin_percent=0,
):
    """Bytes ``/dev/shm`` must hold in one pod, before rounding.

    Each of the pod's ``gpus`` ranks runs a DataLoader whose ``workers`` keep
    ``prefetch_factor`` batches of ``batch_size`` samples in shared memory, and NCCL keeps
    ``nccl_per_gpu`` for each rank; ``margin_percent`` is added on top.
    """
    workers = _count(workers, "workers", 0)
    batch_size = _count(batch_size, "batch_size", 1)
    gpus = _count(gpus, "gpus", 1)
    prefetch_factor = _count(prefetch_factor, "prefetch_factor", 1)
    per_sample = _byte_quantity(sample_bytes, "sample_bytes", allow_zero=False)
    nccl = _byte_quantity(nccl_per_gpu, "nccl_per_gpu")
    margin = _percent(margin_percent, "margin_percent")
    total = gpus * (workers * prefetch_factor * batch_size * per_sample + nccl)
    if total == 0:
        raise SizingError(
            "nothing to size: with workers 0 and nccl_per_gpu 0 nothing uses /dev/shm;"
            " leave it at the default"
        )
    return total * (1 + margin / 100)


def shm_size(
    workers,
    batch_size,
    sample_bytes,
    gpus=1,
    prefetch_factor=DEFAULT_PREFETCH_FACTOR,
    nccl_per_gpu=DEFAULT_NCCL_PER_GPU,
    margin_percent=0,
    granularity="Gi",
):
    """The ``sizeLimit`` of the ``/dev/shm`` emptyDir as a quantity, rounded up to whole
    ``granularity`` units ('16Gi'). See shm_bytes for the arguments."""
    granularity = _granularity(granularity)
    total = shm_bytes(workers, batch_size, sample_bytes, gpus, prefetch_factor, nccl_per_gpu, margin_percent)
    return format_bytes(total, granularity)

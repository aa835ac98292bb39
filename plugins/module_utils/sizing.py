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


DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


def node_share(pod_memory, pod_gpus, allocatable, gpu_resource=DEFAULT_GPU_RESOURCE):
    """The pod's share of a node's RAM next to its share of the node's GPUs.

    ``allocatable`` is the node's allocatable resources as the Node object writes them
    (``{'memory': '1056Gi', 'nvidia.com/gpu': '8'}``); ``pod_memory`` the pod's memory
    (a quantity or bytes) and ``pod_gpus`` its GPUs. RAM in proportion to the GPUs is the node's
    memory per GPU times the pod's GPUs: a pod that asks for more leaves GPUs that no other pod
    can get memory for. Returns ``memory_share`` and ``gpu_share`` (fractions), ``fair_memory``
    (the node's memory per GPU times the pod's GPUs, a quantity; None for a pod without GPUs),
    ``pods_per_node`` (how many such pods the node's memory and GPUs hold), ``stranded_gpus``
    (the node's GPUs such pods leave idle for want of its memory), ``strands_gpus`` (the RAM share
    exceeds the GPU share, for a pod with GPUs) and a ``statement``.
    """
    if not isinstance(allocatable, dict):
        raise SizingError(
            "allocatable must be the node's allocatable resources such as {'memory': '1056Gi', "
            "'%s': 8}, got %r" % (gpu_resource, allocatable)
        )
    if not isinstance(gpu_resource, str) or not gpu_resource:
        raise SizingError(
            "gpu_resource must be a resource name such as nvidia.com/gpu, got %r" % (gpu_resource,)
        )
    if allocatable.get("memory") in (None, ""):
        raise SizingError(
            "allocatable has no memory; expected the node's allocatable memory such as '1056Gi'"
        )
    node_memory = _byte_quantity(allocatable["memory"], "allocatable.memory", allow_zero=False)
    node_gpus = _count(_whole(allocatable.get(gpu_resource, 0)), "allocatable[%r]" % gpu_resource, 0)
    memory = _byte_quantity(pod_memory, "pod_memory", allow_zero=False)
    gpus = _count(pod_gpus, "pod_gpus", 0)
    if gpus > node_gpus:
        raise SizingError(
            "pod_gpus (%d) must not be above the node's allocatable %s (%d)" % (gpus, gpu_resource, node_gpus)
        )
    if memory > node_memory:
        raise SizingError(
            "pod_memory (%s) must not be above the node's allocatable memory (%s)"
            % (format_bytes(memory, "Mi"), format_bytes(node_memory, "Mi"))
        )
    memory_share = float(memory / node_memory)
    gpu_share = float(Decimal(gpus) / node_gpus) if node_gpus else 0.0
    result = {
        "node_memory": format_bytes(node_memory, "Mi"),
        "node_gpus": node_gpus,
        "pod_memory": format_bytes(memory, "Mi"),
        "pod_gpus": gpus,
        "gpu_resource": gpu_resource,
        "memory_share": round(memory_share, 4),
        "gpu_share": round(gpu_share, 4),
        "fair_memory": None,
        "pods_per_node": None,
        "stranded_gpus": 0,
        "strands_gpus": False,
    }
    shares = "%.1f %% of the node's memory (%s of %s) and %s" % (
        100 * memory_share,
        result["pod_memory"],
        result["node_memory"],
        "%.1f %% of its GPUs (%d of %d %s)" % (100 * gpu_share, gpus, node_gpus, gpu_resource)
        if node_gpus
        else "none of its GPUs (it has none)",
    )
    if not gpus:
        result["statement"] = "The pod takes %s; it requests no GPU, so its RAM share strands none." % shares
        return result
    fair = node_memory * gpus / node_gpus
    pods = min(int(node_memory // memory), node_gpus // gpus)
    result.update(
        fair_memory=format_bytes(fair, "Mi"),
        pods_per_node=pods,
        # The GPUs that pods of this size leave idle for want of memory.
        stranded_gpus=(node_gpus // gpus - pods) * gpus,
        strands_gpus=memory > fair,
    )
    if result["strands_gpus"]:
        result["statement"] = (
            "The pod takes %s: a larger share of RAM than of GPUs, so %d such pod%s fill the node's memory "
            "and leave %d of its %d GPUs stranded; keep the pod's memory at or below %s (the node's RAM per "
            "GPU times its %d GPU%s)."
            % (
                shares,
                pods,
                "" if pods == 1 else "s",
                result["stranded_gpus"],
                node_gpus,
                result["fair_memory"],
                gpus,
                "" if gpus == 1 else "s",
            )
        )
    else:
        result["statement"] = (
            "The pod takes %s: its RAM share is within its GPU share (at most %s for its %d GPU%s)."
            % (
                shares,
                result["fair_memory"],
                gpus,
                "" if gpus == 1 else "s",
            )
        )
    return result


def _whole(value):
    """A count as the API writes it ('8', 8); other values pass on for _count to name."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value

"""An all_reduce_perf output as nccl-tests prints it, for a chosen peak bus bandwidth.

The isolate tests need many logs whose bandwidth depends on the nodes of each test (a slow node,
a slow link). Their layout is the real one - the header, the ``# Rank`` lines, the column lines
and the size rows of tests/unit/fixtures/nccl/published/gcp-a3mega-allreduce-16rank-table-only.log
(16 ranks on two A3 Mega nodes) - with the bandwidth of each size scaled so that the largest
size's bus bandwidth is the one chosen, algbw and time following from it as nccl-tests computes
them (busbw = algbw x 2(n-1)/n for all_reduce).
"""

from __future__ import annotations

import sys

GPUS_PER_NODE = 8
MIN_BYTES, MAX_BYTES = 8, 8 << 30
# The size at which a run reaches half its peak (the real table reaches half near 64 MiB).
HALF_PEAK_BYTES = 64 << 20


def _shape(size):
    return size / (size + HALF_PEAK_BYTES)


def all_reduce_output(hosts, peak_busbw, wrong=0, gpus_per_node=GPUS_PER_NODE):
    """The output of all_reduce_perf over ``hosts`` (``gpus_per_node`` ranks each) whose 8 GiB
    row reaches ``peak_busbw`` GB/s; ``wrong`` results on that row when above 0."""
    nranks = len(hosts) * gpus_per_node
    factor = 2.0 * (nranks - 1) / nranks if nranks > 1 else 1.0
    lines = [
        "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0" % (MIN_BYTES, MAX_BYTES),
        "#",
        "# Using devices",
    ]
    for rank in range(nranks):
        host, device = hosts[rank // gpus_per_node], rank % gpus_per_node
        lines.append(
            "#  Rank %2d Group  0 Pid %6d on %s device %2d [0000:%02x:00] NVIDIA H100 80GB HBM3"
            % (rank, 6000 + rank, host, device, 4 + 8 * device)
        )
    lines += [
        "#",
        "#%62s%35s" % ("out-of-place", "in-place"),
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
        "   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)"
        "  (GB/s)  (GB/s)",
    ]
    size = MIN_BYTES
    total = 0.0
    rows = 0
    while size <= MAX_BYTES:
        busbw = peak_busbw * _shape(size) / _shape(MAX_BYTES)
        algbw = busbw / factor
        time_us = size / (algbw * 1e3) if algbw else 0.0
        errors = wrong if size == MAX_BYTES else 0
        cells = "%9.1f  %6.2f  %6.2f  %5d" % (time_us, algbw, busbw, errors)
        lines.append("%12d  %12d     float     sum      -1  %s  %s" % (size, size // 4, cells, cells))
        total += busbw
        rows += 1
        size *= 2
    lines += [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : %.4f " % (total / rows),
        "#",
    ]
    return "\n".join(lines) + "\n"


def mpijob_settings(cluster, namespace, runs_dir, **extra):
    """The nccl_tests variables of a run as MPIJobs on the harness's simulated GPU nodes (8 GPUs
    each, the RDMA network), ``extra`` on top."""
    settings = {
        "nccl_tests_hosts": "localhost",
        "nccl_tests_launcher": "mpijob",
        "nccl_tests_kubeconfig": str(cluster.kubeconfig),
        "nccl_tests_namespace": namespace,
        "nccl_tests_image": "registry.example/nccl-tests:2.21",
        "nccl_tests_gpus_per_node": GPUS_PER_NODE,
        "nccl_tests_gpus_per_process": 1,
        "nccl_tests_cpu": "4",
        "nccl_tests_memory": "16Gi",
        "nccl_tests_shm_size": "4Gi",
        "nccl_tests_network": "rdma-net",
        "nccl_tests_runs_dir": str(runs_dir),
        "nccl_tests_poll_interval_s": 1,
        "nccl_tests_timeout_s": 120,
        "ansible_python_interpreter": sys.executable,
    }
    settings.update(extra)
    return settings

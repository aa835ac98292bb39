# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: shm_size
short_description: Size the /dev/shm emptyDir of a training pod from its DataLoader and GPUs
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Returns the C(sizeLimit) of the memory-backed C(emptyDir) mounted at C(/dev/shm), as a Kubernetes
    quantity rounded up to whole O(granularity) units.
  - "Each of the pod's O(gpus) ranks runs a DataLoader whose workers (the input) each keep
    O(prefetch_factor) batches of O(batch_size) samples of O(sample_bytes) in shared memory, and NCCL
    keeps O(nccl_per_gpu) per rank: C(gpus x (workers x prefetch_factor x batch_size x sample_bytes +
    nccl_per_gpu)), plus O(margin_percent)."
  - A C(/dev/shm) that is too small kills DataLoader workers with a bus error or makes NCCL fall back to
    slower paths; the container runtimes' default is 64 MiB. The size counts against the container's
    memory limit, so the limit must cover it.
  - Fails naming the argument, for example C(batch_size must be at least 1, got 0).
options:
  _input:
    description: DataLoader workers per rank (C(num_workers)); V(0) loads in the main process.
    type: int
    required: true
  batch_size:
    description: Samples per batch and rank.
    type: int
    required: true
  sample_bytes:
    description:
      - Bytes of one decoded sample as the workers hand it over, a quantity (V(7500Ki)) or a number;
        an 800x800 RGB float32 image is 3 x 800 x 800 x 4 = 7680000 bytes.
    type: raw
    required: true
  gpus:
    description: GPUs (ranks, C(nproc_per_node)) in the pod.
    type: int
    default: 1
  prefetch_factor:
    description: Batches each worker prepares ahead (PyTorch's default is 2).
    type: int
    default: 2
  nccl_per_gpu:
    description: Shared memory NCCL uses per rank, a quantity; a rule of thumb, measure C(df /dev/shm) in a run.
    type: raw
    default: 1Gi
  margin_percent:
    description: Percent added on top.
    type: float
    default: 0
  granularity:
    description: Unit the size is rounded up to.
    type: str
    choices: [Ki, Mi, Gi]
    default: Gi
"""

EXAMPLES = r"""
- name: Size /dev/shm for 8 GPUs, 8 workers, batches of 8 RetinaNet images of 800x800 (16Gi)
  ansible.builtin.set_fact:
    trainer_shm: "{{ 8 | gpuops.training.shm_size(batch_size=8, sample_bytes=3 * 800 * 800 * 4, gpus=8) }}"

- name: Mount it
  ansible.builtin.debug:
    msg:
      volumes:
        - name: dshm
          emptyDir: {medium: Memory, sizeLimit: "{{ trainer_shm }}"}
"""

RETURN = r"""
_value:
  description: The size as a Kubernetes quantity, such as V(16Gi).
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.sizing import (
    DEFAULT_NCCL_PER_GPU,
    DEFAULT_PREFETCH_FACTOR,
    SizingError,
    shm_size,
)


def shm_size_filter(
    workers,
    batch_size,
    sample_bytes,
    gpus=1,
    prefetch_factor=DEFAULT_PREFETCH_FACTOR,
    nccl_per_gpu=DEFAULT_NCCL_PER_GPU,
    margin_percent=0,
    granularity="Gi",
):
    try:
        return shm_size(
            workers,
            batch_size,
            sample_bytes,
            gpus,
            prefetch_factor,
            nccl_per_gpu,
            margin_percent,
            granularity,
        )
    except SizingError as error:
        raise AnsibleFilterError("shm_size: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"shm_size": shm_size_filter}

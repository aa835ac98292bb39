# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: memory_sizing
short_description: Size a training container's memory request and limit from observed usage
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Takes memory usage samples of a training container (for example C(container_memory_working_set_bytes)
    over earlier runs) and returns its memory request and limit as Kubernetes quantities.
  - The request is the median of the samples, the limit their peak plus O(margin_percent) percent, both
    rounded up to whole O(granularity) units. With O(guaranteed=true) the request is raised to the limit,
    so the container (with equal CPU request and limit) gets the Guaranteed QoS class and is the last to
    be evicted under memory pressure; use it for long jobs that must not be disturbed.
  - A memory-backed C(/dev/shm) (C(emptyDir.medium=Memory)) is charged to the container's memory, so
    samples taken from a running trainer already include it; see the P(gpuops.training.shm_size#filter) filter
    to size it.
  - Fails naming the argument, for example C(samples[2] '12GB' is not a Kubernetes quantity).
options:
  _input:
    description:
      - Observed memory usage, each a Kubernetes quantity (V(11.5Gi), V(12000Mi)) or a number of bytes.
    type: list
    elements: raw
    required: true
  margin_percent:
    description: Percent added to the peak for the limit.
    type: float
    default: 10
  guaranteed:
    description: Make the request equal to the limit (Guaranteed QoS).
    type: bool
    default: false
  granularity:
    description: Unit both values are rounded up to.
    type: str
    choices: [Ki, Mi, Gi]
    default: Mi
"""

EXAMPLES = r"""
- name: Size the trainer's memory from the last runs (request 12Gi, limit 15770Mi)
  ansible.builtin.set_fact:
    trainer_memory: "{{ ['11Gi', '12Gi', '12Gi', '14Gi'] | gpuops.training.memory_sizing(margin_percent=10) }}"

- name: The same, Guaranteed (request = limit = peak + 10 percent)
  ansible.builtin.set_fact:
    trainer_memory: "{{ observed_usage | gpuops.training.memory_sizing(guaranteed=true, granularity='Gi') }}"

- name: Use it in a pod template
  ansible.builtin.debug:
    msg: "{{ trainer_memory.resources }}" # {'requests': {'memory': '16Gi'}, 'limits': {'memory': '16Gi'}}
"""

RETURN = r"""
_value:
  description: The sizing.
  type: dict
  contains:
    request:
      description: Memory request, a quantity such as V(12Gi).
      type: str
    limit:
      description: Memory limit, a quantity.
      type: str
    median:
      description: Median of the samples, rounded up.
      type: str
    peak:
      description: Largest sample, rounded up.
      type: str
    qos:
      description: V(Guaranteed) when request equals limit, else V(Burstable) (as far as memory decides it).
      type: str
    resources:
      description: "The container's C(requests) and C(limits) for memory, as a container spec takes them."
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.sizing import (
    DEFAULT_MARGIN_PERCENT,
    SizingError,
    memory_sizing,
)


def memory_sizing_filter(samples, margin_percent=DEFAULT_MARGIN_PERCENT, guaranteed=False, granularity="Mi"):
    try:
        return memory_sizing(samples, margin_percent, guaranteed, granularity)
    except SizingError as error:
        raise AnsibleFilterError("memory_sizing: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"memory_sizing": memory_sizing_filter}

"""The sizing filters: thin wrappers whose errors say which filter and argument."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.shm_size import FilterModule as ShmFilters
from ansible_collections.gpuops.training.plugins.filter.sizing import FilterModule as SizingFilters

MEMORY_SIZING = SizingFilters().filters()["memory_sizing"]
SHM_SIZE = ShmFilters().filters()["shm_size"]


def test_memory_sizing_filter_defaults_and_guaranteed():
    assert MEMORY_SIZING(["11Gi", "12Gi", "14Gi"])["request"] == "12Gi"
    sizing = MEMORY_SIZING(["11Gi", "12Gi", "14Gi"], margin_percent=10, guaranteed=True, granularity="Gi")
    assert sizing["request"] == sizing["limit"] == "16Gi"
    assert sizing["qos"] == "Guaranteed"


def test_memory_sizing_filter_error_names_the_filter_and_sample():
    with pytest.raises(
        AnsibleFilterError, match=r"memory_sizing: samples\[0\] '12 Gi' is not a Kubernetes quantity"
    ):
        MEMORY_SIZING(["12 Gi"])


def test_shm_size_filter_takes_workers_as_input():
    assert SHM_SIZE(8, batch_size=8, sample_bytes=3 * 800 * 800 * 4, gpus=8) == "16Gi"
    assert SHM_SIZE(4, batch_size=2, sample_bytes="1Mi", nccl_per_gpu="0", granularity="Mi") == "16Mi"


def test_shm_size_filter_error_names_the_filter_and_argument():
    with pytest.raises(AnsibleFilterError, match="shm_size: batch_size must be at least 1, got 0"):
        SHM_SIZE(8, batch_size=0, sample_bytes="1Mi")

"""Memory and /dev/shm sizing: the arithmetic, the rounding, and errors that name the argument."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils.quantities import parse_quantity
from ansible_collections.gpuops.training.plugins.module_utils.sizing import (
    SizingError,
    memory_sizing,
    node_share,
    shm_bytes,
    shm_size,
    size_memory,
)

GI = 2**30
MI = 2**20


def test_request_at_the_median_and_limit_at_the_peak_plus_margin():
    sizing = memory_sizing(["11Gi", "12Gi", "12Gi", "14Gi"], margin_percent=10)
    assert sizing["median"] == "12Gi"
    assert sizing["peak"] == "14Gi"
    assert sizing["request"] == "12Gi"
    # 14 GiB x 1.1 = 15769.6 MiB, rounded up to whole MiB.
    assert sizing["limit"] == "15770Mi"
    assert sizing["qos"] == "Burstable"
    assert sizing["resources"] == {"requests": {"memory": "12Gi"}, "limits": {"memory": "15770Mi"}}


def test_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert memory_sizing(["10Gi", "11Gi", "13Gi", "20Gi"], margin_percent=0)["median"] == "12Gi"


def test_guaranteed_raises_the_request_to_the_limit():
    sizing = memory_sizing(["11Gi", "12Gi", "14Gi"], margin_percent=25, guaranteed=True, granularity="Gi")
    assert sizing["request"] == sizing["limit"] == "18Gi"  # 17.5 GiB rounded up
    assert sizing["median"] == "12Gi"
    assert sizing["qos"] == "Guaranteed"


def test_equal_samples_without_margin_are_guaranteed_by_themselves():
    assert memory_sizing(["8Gi", "8Gi"], margin_percent=0)["qos"] == "Guaranteed"


def test_samples_may_be_bytes_or_any_quantity_form():
    sizing = memory_sizing([12 * GI, "12884901888", "12.5Gi", "12000M"], margin_percent="0")
    assert parse_quantity(sizing["peak"]) == Decimal("12.5") * GI
    assert sizing["limit"] == "12800Mi"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((["12Gi", "12GB"],), r"samples\[1\] '12GB' is not a Kubernetes quantity"),
        ((["12Gi", "-1Gi"],), r"samples\[1\] must be at least 0, got '-1Gi'"),
        (([],), "samples is empty"),
        (("12Gi",), "samples must be a list of memory usage quantities"),
        ((["0", 0],), "every sample is 0"),
        ((["12Gi"], "ten"), "margin_percent must be a number of percent"),
        ((["12Gi"], -5), "margin_percent must be a number of percent of at least 0"),
        ((["12Gi"], 10, "yes"), "guaranteed must be true or false"),
        ((["12Gi"], 10, False, "G"), "granularity must be one of Ki, Mi, Gi"),
    ],
)
def test_memory_sizing_errors_name_the_argument(arguments, message):
    with pytest.raises(SizingError, match=message):
        memory_sizing(*arguments)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=2**42), min_size=1, max_size=30),
    st.integers(min_value=0, max_value=100),
    st.booleans(),
)
def test_limit_covers_the_peak_and_request_covers_the_median(samples, margin, guaranteed):
    sizing = memory_sizing(samples, margin_percent=margin, guaranteed=guaranteed)
    request, limit = parse_quantity(sizing["request"]), parse_quantity(sizing["limit"])
    assert limit >= max(samples) * (1 + Decimal(margin) / 100)
    assert limit - max(samples) * (1 + Decimal(margin) / 100) < MI  # rounded up by less than a unit
    assert request >= parse_quantity(sizing["median"]) or guaranteed
    assert request <= limit
    assert (request == limit) == (sizing["qos"] == "Guaranteed")
    if guaranteed:
        assert request == limit


def test_shm_for_eight_gpus_of_retinanet_800px_batches():
    image = 3 * 800 * 800 * 4  # float32 RGB
    exact = shm_bytes(8, 8, image, gpus=8)
    assert exact == 8 * (8 * 2 * 8 * image + GI)
    assert shm_size(8, 8, image, gpus=8) == "16Gi"  # 15.3 GiB rounded up


def test_shm_without_workers_is_the_nccl_share_and_granularity_applies():
    assert shm_size(0, 32, "1Mi", gpus=4) == "4Gi"
    assert shm_size(2, 4, "3Mi", nccl_per_gpu=0, prefetch_factor=4, granularity="Mi") == "96Mi"
    assert shm_size(2, 4, "3Mi", nccl_per_gpu="0", margin_percent=50, granularity="Mi") == "72Mi"


@pytest.mark.parametrize(
    ("arguments", "keywords", "message"),
    [
        ((8, 0, "1Mi"), {}, "batch_size must be at least 1, got 0"),
        ((-1, 8, "1Mi"), {}, "workers must be at least 0, got -1"),
        ((True, 8, "1Mi"), {}, "workers must be a whole number"),
        ((8, "eight", "1Mi"), {}, "batch_size must be a whole number"),
        ((8, 8, "1MB"), {}, "sample_bytes '1MB' is not a Kubernetes quantity"),
        ((8, 8, 0), {}, "sample_bytes must be above 0"),
        ((8, 8, "1Mi"), {"gpus": 0}, "gpus must be at least 1"),
        ((8, 8, "1Mi"), {"nccl_per_gpu": "1 Gi"}, "nccl_per_gpu '1 Gi' is not a Kubernetes quantity"),
        ((8, 8, "1Mi"), {"granularity": "Ti"}, "granularity must be one of"),
        ((0, 8, "1Mi"), {"nccl_per_gpu": 0}, "nothing to size"),
    ],
)
def test_shm_errors_name_the_argument(arguments, keywords, message):
    with pytest.raises(SizingError, match=message):
        shm_size(*arguments, **keywords)


def test_counts_given_as_digit_strings_are_accepted():
    assert shm_size("8", "8", 3 * 800 * 800 * 4, gpus="8") == "16Gi"


def test_size_memory_from_a_median_and_a_peak_is_memory_sizing_of_such_samples():
    assert size_memory(12 * GI, 14 * GI, margin_percent=10) == memory_sizing(
        ["11Gi", "12Gi", "12Gi", "14Gi"], margin_percent=10
    )
    sizing = size_memory(1200 * MI, "1900Mi", margin_percent=20, guaranteed=True)
    assert (sizing["request"], sizing["limit"], sizing["qos"]) == ("2280Mi", "2280Mi", "Guaranteed")


@pytest.mark.parametrize(
    ("median", "peak", "message"),
    [
        (2 * GI, GI, "median (2147483648) must not be above peak (1073741824)"),
        (0, 0, "peak must be above 0, got 0"),
        ("lots", GI, "median"),
        (GI, -1, "peak must be above 0, got -1"),
    ],
)
def test_size_memory_names_what_is_wrong(median, peak, message):
    with pytest.raises(SizingError, match=re.escape(message)):
        size_memory(median, peak)


# -- the pod's share of a node's RAM against its share of the node's GPUs ----------------------

NODE = {"cpu": "190", "memory": "1056Gi", "nvidia.com/gpu": "8", "pods": "110"}


def test_a_pod_within_its_gpu_share_strands_nothing():
    share = node_share("128Gi", 1, NODE)
    assert (share["memory_share"], share["gpu_share"]) == (0.1212, 0.125)
    assert share["fair_memory"] == "132Gi" and share["pods_per_node"] == 8
    assert share["strands_gpus"] is False and share["stranded_gpus"] == 0
    assert share["statement"] == (
        "The pod takes 12.1 % of the node's memory (128Gi of 1056Gi) and 12.5 % of its GPUs (1 of 8 "
        "nvidia.com/gpu): its RAM share is within its GPU share (at most 132Gi for its 1 GPU)."
    )


def test_a_pod_with_more_ram_than_its_gpu_share_strands_gpus_and_says_how_many():
    share = node_share(264 * GI, 1, {"memory": "1056Gi", "nvidia.com/gpu": 8})
    assert (share["memory_share"], share["gpu_share"]) == (0.25, 0.125)
    assert share["strands_gpus"] is True
    assert share["pods_per_node"] == 4 and share["stranded_gpus"] == 4
    assert share["statement"] == (
        "The pod takes 25.0 % of the node's memory (264Gi of 1056Gi) and 12.5 % of its GPUs (1 of 8 "
        "nvidia.com/gpu): a larger share of RAM than of GPUs, so 4 such pods fill the node's memory and "
        "leave 4 of its 8 GPUs stranded; keep the pod's memory at or below 132Gi (the node's RAM per GPU "
        "times its 1 GPU)."
    )


def test_a_multi_gpu_pod_is_judged_on_its_gpus():
    share = node_share("600Gi", 4, NODE)  # 132Gi per GPU: 528Gi is its share
    assert share["strands_gpus"] is True and share["fair_memory"] == "528Gi"
    assert share["pods_per_node"] == 1 and share["stranded_gpus"] == 4
    assert node_share("528Gi", 4, NODE)["strands_gpus"] is False


def test_a_pod_without_gpus_and_a_node_without_gpus_strand_none():
    share = node_share("16Gi", 0, NODE)
    assert share["gpu_share"] == 0.0 and share["strands_gpus"] is False and share["fair_memory"] is None
    assert share["statement"].endswith("it requests no GPU, so its RAM share strands none.")
    share = node_share("16Gi", 0, {"memory": "64Gi"})
    assert "and none of its GPUs (it has none)" in share["statement"]


def test_another_gpu_resource_name_is_read():
    node = {"memory": "512Gi", "amd.com/gpu": "8"}
    assert node_share("128Gi", 1, node, gpu_resource="amd.com/gpu")["strands_gpus"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("1Gi", 1, "big"), "allocatable must be the node's allocatable resources"),
        (("1Gi", 1, {"nvidia.com/gpu": 8}), "allocatable has no memory"),
        (("1Gi", 1, {"memory": "lots", "nvidia.com/gpu": 8}), "allocatable.memory"),
        (("1Gi", 1, {"memory": "8Gi", "nvidia.com/gpu": "eight"}), "allocatable['nvidia.com/gpu']"),
        (("1Gi", 2, {"memory": "8Gi", "nvidia.com/gpu": 1}), "pod_gpus (2) must not be above"),
        (("16Gi", 1, {"memory": "8Gi", "nvidia.com/gpu": 1}), "pod_memory (16Gi) must not be above"),
        (("0", 1, NODE), "pod_memory must be above 0"),
        (("1Gi", -1, NODE), "pod_gpus must be at least 0"),
    ],
)
def test_node_share_errors_name_the_argument(args, message):
    with pytest.raises(SizingError) as error:
        node_share(*args)
    assert message in str(error.value)

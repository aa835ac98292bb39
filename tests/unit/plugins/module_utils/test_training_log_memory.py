"""Memory in the trainer's metrics: per-rank median and peak, where the peak happened, and leaks.

The fixtures are shaped like the trainer's records (training/README.md, Memory): a ``memory``
sample in every ``step`` record (phase ``train``) and ``memory`` events at start, loader start,
epoch end, around rank 0's checkpoint writes and after the evaluation.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.log_parallel import parse_split
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.training_log import (
    SAMPLE_KEYS,
    SCHEMA,
    TrainingLogParser,
    check_expectations,
    describe_memory_sample,
    epoch_growth_mib,
    memory_leaks,
    parse_training_logs,
)

MiB = 1 << 20
GiB = 1 << 30
STEPS_PER_EPOCH = 4
# A healthy run's sample-to-sample noise, in MiB: what the allocator keeps or gives back.
NOISE_MIB = [0, 3, -2, 5, 1, -4, 2, 6, -3, 0, 4, -1]


def record(event, rank, **fields):
    base = {"schema": SCHEMA, "event": event, "time": 1.0, "rank": rank, "world_size": 2, "host": "node-a"}
    base.update(fields)
    return json.dumps(base)


def sample(rss, cgroup=None, limit=None, cuda=None, rss_peak=None, cuda_peak=None):
    return {
        "rss_bytes": rss,
        "rss_peak_bytes": rss_peak if rss_peak is not None else rss,
        "cgroup_usage_bytes": cgroup + 512 * MiB if cgroup is not None else None,
        "cgroup_working_set_bytes": cgroup,
        "cgroup_limit_bytes": limit,
        "cuda_allocated_bytes": cuda,
        "cuda_reserved_bytes": cuda + 256 * MiB if cuda is not None else None,
        "cuda_max_allocated_bytes": cuda_peak if cuda_peak is not None else cuda,
        "cuda_max_reserved_bytes": (cuda_peak or cuda) + 256 * MiB if cuda is not None else None,
    }


def rank_run(rank, epochs=5, leak_mib=0, gpu_leak_mib=0, base=1200 * MiB, cgroup=None, limit=None, gpu=False):
    """The metrics lines of one rank: steady memory with a few MiB of noise, a checkpoint
    spike on rank 0 at each epoch's end, and LEAK_MIB more host (GPU_LEAK_MIB more GPU)
    memory kept each epoch."""
    lines = [record("run_start", rank, backend="gloo", device="cpu")]
    noise = iter(NOISE_MIB * 100)
    lines.append(
        record("memory", rank, phase="start", epoch=0, step=0, memory=sample(base - 300 * MiB, cgroup, limit))
    )
    step = 0

    def at(epoch, extra_mib=0):
        rss = base + (leak_mib * epoch + next(noise) + extra_mib) * MiB
        cuda = (2 * GiB + (gpu_leak_mib * epoch + next(noise)) * MiB) if gpu else None
        ws = cgroup + (next(noise) + extra_mib) * MiB if cgroup is not None else None
        # The first epoch warms up: its samples sit 40 MiB lower.
        if epoch == 0:
            rss -= 40 * MiB
        return sample(rss, ws, limit, cuda, cuda_peak=cuda + 900 * MiB if gpu else None)

    for epoch in range(epochs):
        lines.append(
            record("memory", rank, phase="loader_start", epoch=epoch, step=step, memory=at(epoch, 60))
        )
        for _step in range(STEPS_PER_EPOCH):
            step += 1
            lines.append(record("step", rank, epoch=epoch, step=step, loss=1.0, memory=at(epoch)))
        lines.append(record("epoch", rank, epoch=epoch, step=step, loss=1.0, images_per_s=2.0))
        lines.append(record("memory", rank, phase="epoch_end", epoch=epoch, step=step, memory=at(epoch)))
        if rank == 0:
            lines.append(
                record(
                    "memory", 0, phase="checkpoint_write_before", epoch=epoch, step=step, memory=at(epoch, 10)
                )
            )
            # The checkpoint write of epoch 2 is the run's spike.
            spike = 700 if epoch == 2 else 20
            lines.append(
                record(
                    "memory",
                    0,
                    phase="checkpoint_write_after",
                    epoch=epoch,
                    step=step,
                    memory=at(epoch, spike),
                )
            )
    lines.append(
        record("memory", rank, phase="eval_after", epoch=epochs - 1, step=step, memory=at(epochs - 1))
    )
    lines.append(record("run_end", rank, status="ok"))
    return lines


def parse(per_rank, **kwargs):
    sources = [
        LogSource("rank%d.log" % rank, text="\n".join(lines) + "\n") for rank, lines in per_rank.items()
    ]
    return parse_training_logs(sources, **kwargs)


def quantity(result, rank, name):
    return result["ranks"][rank]["memory"]["quantities"][name]


def test_each_rank_has_the_median_and_peak_of_its_host_memory_and_where_the_peak_was():
    result = parse({0: rank_run(0), 1: rank_run(1)})
    rss0 = quantity(result, 0, "host_rss")
    # 1 start + 5 epochs x (loader_start, 4 steps, epoch_end, 2 checkpoint samples) + eval_after
    assert rss0["samples"] == result["ranks"][0]["memory"]["samples"] == 1 + 5 * 8 + 1
    assert 1195 * MiB <= rss0["median_bytes"] <= 1205 * MiB
    # Rank 0's spike: the checkpoint write of epoch 2, after its 4 steps.
    assert 1200 * MiB + 690 * MiB < rss0["peak_bytes"] < 1200 * MiB + 710 * MiB
    assert (rss0["peak_phase"], rss0["peak_epoch"], rss0["peak_step"]) == ("checkpoint_write_after", 2, 12)
    rss1 = quantity(result, 1, "host_rss")
    # Rank 1 writes no checkpoint: its peak is a loader start (60 MiB up).
    assert rss1["peak_phase"] == "loader_start"
    assert 1250 * MiB < rss1["peak_bytes"] < 1275 * MiB
    # A CPU run outside a memory cgroup reports neither the cgroup nor CUDA.
    assert set(result["ranks"][1]["memory"]["quantities"]) == {"host_rss"}
    assert result["ranks"][1]["memory"]["cgroup_limit_bytes"] is None


def test_a_step_records_sample_is_phase_train():
    lines = [
        record("step", 0, epoch=0, step=1, memory=sample(100 * MiB)),
        record("step", 0, epoch=0, step=2, memory=sample(300 * MiB)),
        record("memory", 0, phase="epoch_end", epoch=0, step=2, memory=sample(200 * MiB)),
    ]
    rss = quantity(parse({0: lines}), 0, "host_rss")
    assert (rss["peak_bytes"], rss["peak_phase"], rss["peak_epoch"], rss["peak_step"]) == (
        300 * MiB,
        "train",
        0,
        2,
    )
    assert rss["median_bytes"] == 200 * MiB
    assert rss["epoch_min_bytes"] == [{"epoch": 0, "bytes": 100 * MiB}]


def test_the_high_water_mark_catches_a_spike_between_samples_at_the_first_sample_that_shows_it():
    lines = [
        record("step", 0, epoch=0, step=1, memory=sample(100 * MiB)),
        record(
            "memory",
            0,
            phase="checkpoint_write_after",
            epoch=0,
            step=1,
            memory=sample(110 * MiB, rss_peak=900 * MiB),
        ),
        record("step", 0, epoch=1, step=2, memory=sample(105 * MiB, rss_peak=900 * MiB)),
    ]
    rss = quantity(parse({0: lines}), 0, "host_rss")
    assert (rss["peak_bytes"], rss["peak_phase"], rss["peak_step"]) == (
        900 * MiB,
        "checkpoint_write_after",
        1,
    )
    assert rss["median_bytes"] == 105 * MiB  # the median is of the samples, not of the mark


def test_cgroup_and_gpu_quantities_are_summarised_and_the_smallest_limit_kept():
    result = parse({0: rank_run(0, cgroup=6 * GiB, limit=8 * GiB, gpu=True)})
    memory = result["ranks"][0]["memory"]
    assert set(memory["quantities"]) == {
        "host_rss",
        "cgroup_usage",
        "cgroup_working_set",
        "cuda_allocated",
        "cuda_reserved",
    }
    assert memory["cgroup_limit_bytes"] == 8 * GiB
    working_set = memory["quantities"]["cgroup_working_set"]
    assert working_set["peak_phase"] == "checkpoint_write_after" and working_set["peak_epoch"] == 2
    cuda = memory["quantities"]["cuda_allocated"]
    # The peak is the allocator's own (max_memory_allocated), 900 MiB over the samples.
    assert cuda["peak_bytes"] > 2 * GiB + 890 * MiB
    assert 2 * GiB - 5 * MiB <= cuda["median_bytes"] <= 2 * GiB + 6 * MiB


def test_a_healthy_runs_noise_is_not_a_leak():
    result = parse({0: rank_run(0, epochs=8, gpu=True), 1: rank_run(1, epochs=8, gpu=True)})
    for rank in (0, 1):
        for name in ("host_rss", "cuda_allocated"):
            growth = quantity(result, rank, name)["growth_mib_per_epoch"]
            assert abs(growth) < 4, (rank, name, growth)
    assert result["memory_leaks"] == []
    assert result["memory_leak_tolerance_mib"] == 16
    assert check_expectations(result, {"no_memory_leak": True}) == []


def test_a_leaking_rank_is_named_with_host_or_gpu_and_its_rate():
    result = parse(
        {0: rank_run(0, epochs=6), 1: rank_run(1, epochs=6, leak_mib=64, gpu=True, gpu_leak_mib=32)}
    )
    leaks = result["memory_leaks"]
    assert [(leak["rank"], leak["kind"], leak["quantity"]) for leak in leaks] == [
        (1, "host", "host_rss"),
        (1, "gpu", "cuda_allocated"),
    ]
    host, gpu = leaks
    assert 60 < host["rate_mib_per_epoch"] < 68
    assert 28 < gpu["rate_mib_per_epoch"] < 36
    # Fitted from the second epoch (the first warms up) to the last.
    assert host["epochs"] == [1, 5]
    messages = check_expectations(result, {"no_memory_leak": True})
    assert len(messages) == 2
    assert messages[0].startswith(
        "suspected host memory leak on rank 1: its per-epoch minimum resident set (RSS)"
    )
    assert "tolerance 16 MiB per epoch" in messages[0]
    assert messages[1].startswith(
        "suspected GPU memory leak on rank 1: its per-epoch minimum CUDA allocated memory"
    )
    # Without the expectation, a leak is reported but fails nothing.
    assert check_expectations(result, {}) == []


def test_the_tolerance_decides():
    run = {0: rank_run(0, epochs=6, leak_mib=12)}
    assert parse(run)["memory_leaks"] == []
    leaks = parse(run, leak_tolerance_mib=8)["memory_leaks"]
    assert [(leak["rank"], leak["kind"]) for leak in leaks] == [(0, "host")]


def test_a_run_too_short_for_the_fit_reports_no_growth_and_no_leak():
    result = parse({1: rank_run(1, epochs=3, leak_mib=500)})
    assert quantity(result, 0, "host_rss")["growth_mib_per_epoch"] is None
    assert result["memory_leaks"] == []


def test_the_cgroup_is_never_a_leak_of_one_rank():
    # Every rank of a container reports the same cgroup: a leak in it is not one rank's.
    ranks = [{"rank": 0, "memory": {"quantities": {"cgroup_working_set": {"growth_mib_per_epoch": 500.0}}}}]
    assert memory_leaks(ranks, 16) == []


@pytest.mark.parametrize(
    ("minima", "growth"),
    [
        ([(0, 100 * MiB), (1, 500 * MiB), (2, 500 * MiB), (3, 500 * MiB)], 0.0),  # warm-up left out
        ([(0, 0), (1, 10 * MiB), (2, 20 * MiB), (3, 30 * MiB)], 10.0),
        ([(3, 30 * MiB), (0, 0), (2, 20 * MiB), (1, 10 * MiB)], 10.0),  # in any order
        ([(0, 0), (2, 10 * MiB), (4, 20 * MiB), (6, 30 * MiB)], 5.0),  # per epoch, not per point
        ([(0, 0), (1, 50 * MiB), (2, 40 * MiB), (3, 30 * MiB)], -10.0),
        ([(0, 0), (1, 1), (2, 2)], None),  # two epochs after the first: too few
        ([], None),
    ],
)
def test_epoch_growth_is_the_least_squares_slope_after_the_first_epoch(minima, growth):
    assert epoch_growth_mib(minima) == growth


def test_samples_without_memory_or_with_broken_values_are_skipped():
    lines = [
        record("step", 0, epoch=0, step=1, loss=1.0),  # a trainer from before the memory records
        record("step", 0, epoch=0, step=2, memory="n/a"),
        record(
            "memory", 0, phase="start", epoch=0, step=0, memory={"rss_bytes": "12", "rss_peak_bytes": True}
        ),
        record("memory", 0, epoch=0, step=0, memory={"rss_bytes": 5 * MiB, "cgroup_limit_bytes": -1}),
    ]
    memory = parse({0: lines})["ranks"][0]["memory"]
    assert memory["samples"] == 1
    assert memory["cgroup_limit_bytes"] is None
    assert memory["quantities"]["host_rss"]["peak_phase"] == "unknown"  # a memory event without a phase


def test_a_rank_without_memory_records_has_an_empty_summary():
    result = parse({0: [record("run_start", 0), record("run_end", 0, status="ok")]})
    assert result["ranks"][0]["memory"] == {"samples": 0, "cgroup_limit_bytes": None, "quantities": {}}
    assert result["memory_leaks"] == []


def test_the_phases_the_reader_knows_are_the_trainers():
    from ansible_collections.gpuops.training.plugins.module_utils.training_log import (
        MEMORY_PHASES,
        STEP_PHASE,
    )
    from gpuops_trainer.memory import EVENT_PHASES

    assert sorted(MEMORY_PHASES) == sorted(EVENT_PHASES + (STEP_PHASE,))


# -- the GPU device as the driver sees it (tests/unit/fixtures/gpu-memory) ---------------------

GPU_LOGS = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "gpu-memory" / "logs"


def gpu_run(**kwargs):
    return parse_training_logs(
        [LogSource(str(path), path=str(path)) for path in sorted(GPU_LOGS.glob("*.log"))], **kwargs
    )


def test_each_cuda_rank_has_its_device_use_its_peak_and_the_devices_total():
    result = gpu_run()
    assert [rank["rank"] for rank in result["ranks"]] == [0, 1, 2, 3]
    for rank in result["ranks"]:
        memory = rank["memory"]
        assert memory["device_total_bytes"] == 80 * GiB
        device = memory["quantities"]["device_used"]
        assert device["samples"] == memory["samples"] == 1 + 2 * (1 + 3 + 1)
        # The allocator's figures stay as they were, beside the device's.
        assert memory["quantities"]["cuda_reserved"]["peak_bytes"] == 56 * GiB + 512 * MiB
    peaks = [quantity(result, rank, "device_used")["peak_bytes"] for rank in range(4)]
    assert peaks == [59 * GiB + 512 * MiB, 59 * GiB + 512 * MiB, 59 * GiB + 768 * MiB, 77 * GiB + 512 * MiB]
    rank3 = quantity(result, 3, "device_used")
    # The peak is the trainer's high-water estimate, first seen at epoch 1's second step; the
    # median is of the samples the driver gave (reserved 52 GiB + 21 GiB outside the allocator).
    assert (rank3["peak_phase"], rank3["peak_epoch"], rank3["peak_step"]) == ("train", 1, 5)
    assert rank3["median_bytes"] == 73 * GiB
    # The device is shared by every process on it: never judged as this rank's leak.
    assert result["memory_leaks"] == []
    # The newest sample keeps the device's keys, and a killed rank's message would name them.
    last = result["ranks"][3]["last_memory"]["memory"]
    assert (last["device_used_bytes"], last["device_total_bytes"]) == (73 * GiB, 80 * GiB)
    assert last["device_used_peak_bytes"] == 77 * GiB + 512 * MiB
    assert "reserved 52Gi, GPU device used 73Gi of its 80Gi, in phase epoch_end" in describe_memory_sample(
        result["ranks"][3]["last_memory"]
    )


def test_a_cuda_run_read_on_two_cores_has_the_same_device_figures():
    # Each pod's log parsed in a process of its own, the parsers merged: the device's totals and
    # tracks travel with each rank's state.
    sources = [LogSource(str(path), path=str(path)) for path in sorted(GPU_LOGS.glob("*.log"))]

    def parse(share):
        return TrainingLogParser().feed_sources(share)

    merged = parse_split(sources, parse, TrainingLogParser.merged, workers=2, min_bytes=0)
    assert merged is not None  # split in two, not read in this process alone
    split, one = merged.result(), gpu_run()
    for rank in range(4):
        assert split["ranks"][rank]["memory"] == one["ranks"][rank]["memory"]
        assert split["ranks"][rank]["memory"]["device_total_bytes"] == 80 * GiB


def test_a_cpu_run_without_the_device_keys_reads_as_before():
    # A CPU rank's samples have no device keys (an older trainer) or null ones (this trainer):
    # no device quantity, and no device total in its summary.
    lines = rank_run(0)
    with_nulls = [
        line.replace(
            '"cuda_allocated_bytes": null',
            '"device_used_bytes": null, "device_used_peak_bytes": null, "device_total_bytes": null, '
            '"cuda_allocated_bytes": null',
        )
        for line in lines
    ]
    assert sum('"device_total_bytes": null' in line for line in with_nulls) == 1 + 5 * 8 + 1
    older, nulls = parse({0: lines}), parse({0: with_nulls})
    for result in (older, nulls):
        memory = result["ranks"][0]["memory"]
        assert set(memory) == {"samples", "cgroup_limit_bytes", "quantities"}
        assert set(memory["quantities"]) == {"host_rss"}
    assert nulls["ranks"][0]["memory"] == older["ranks"][0]["memory"]
    assert nulls["ranks"][0]["last_memory"]["memory"]["device_total_bytes"] is None


def test_the_smallest_device_total_is_kept_and_broken_totals_are_skipped():
    def gpu_sample(used, total):
        return dict(
            sample(100 * MiB), device_used_bytes=used, device_used_peak_bytes=used, device_total_bytes=total
        )

    lines = [
        record("step", 0, epoch=0, step=1, memory=gpu_sample(10 * GiB, 80 * GiB)),
        record("step", 0, epoch=0, step=2, memory=gpu_sample(11 * GiB, "80Gi")),
        record("step", 0, epoch=0, step=3, memory=gpu_sample(12 * GiB, 0)),
        # A restarted attempt on a smaller GPU.
        record("step", 0, epoch=1, step=4, memory=gpu_sample(13 * GiB, 40 * GiB)),
        record("step", 0, epoch=1, step=5, memory=gpu_sample(True, True)),
    ]
    memory = parse({0: lines})["ranks"][0]["memory"]
    assert memory["device_total_bytes"] == 40 * GiB
    assert memory["quantities"]["device_used"]["samples"] == 4
    assert memory["quantities"]["device_used"]["peak_bytes"] == 13 * GiB


def test_the_sample_keys_the_reader_keeps_are_the_trainers():
    import torch

    from gpuops_trainer.memory import MemorySampler

    assert sorted(SAMPLE_KEYS) == sorted(MemorySampler(torch.device("cpu")).sample())

"""The memory sampler on fake /proc and /sys/fs/cgroup trees, the leak hook, and a short
single-process run's memory records."""

from __future__ import annotations

import pytest
import torch
from conftest import read_records

from gpuops_trainer.errors import ConfigError
from gpuops_trainer.faults import HostMemoryLeak, LeakSpec, parse_leak
from gpuops_trainer.memory import MemorySampler, device_peak_estimate, emit_memory
from gpuops_trainer.train import main

MiB = 1 << 20
STATUS = "Name:\tpython\nVmPeak:\t  900000 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
V2_STAT = "anon 300000000\nfile 200000000\nactive_file 50000000\ninactive_file 150000000\n"
V1_STAT = (
    "cache 200000000\nrss 300000000\ninactive_file 1000\nactive_file 2000\n"
    "total_cache 200000000\ntotal_rss 300000000\ntotal_inactive_file 150000000\n"
)
V1_UNLIMITED = "9223372036854771712\n"
CGROUP_KEYS = {"cgroup_usage_bytes", "cgroup_working_set_bytes", "cgroup_limit_bytes"}
CUDA_KEYS = {
    "cuda_allocated_bytes", "cuda_reserved_bytes", "cuda_max_allocated_bytes",
    "cuda_max_reserved_bytes",
}  # fmt: skip
DEVICE_KEYS = {"device_used_bytes", "device_used_peak_bytes", "device_total_bytes"}
ALL_KEYS = {"rss_bytes", "rss_peak_bytes"} | CGROUP_KEYS | CUDA_KEYS | DEVICE_KEYS


def fake_roots(tmp_path, cgroup: str | None, files: dict[str, str], status: str | None = STATUS):
    """A /proc with self/cgroup (CGROUP) and self/status, and a /sys/fs/cgroup with FILES
    (paths relative to it)."""
    proc, sys_cgroup = tmp_path / "proc", tmp_path / "sys" / "fs" / "cgroup"
    (proc / "self").mkdir(parents=True)
    sys_cgroup.mkdir(parents=True)
    if cgroup is not None:
        (proc / "self" / "cgroup").write_text(cgroup)
    if status is not None:
        (proc / "self" / "status").write_text(status)
    for relative, text in files.items():
        path = sys_cgroup / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {"proc_root": proc, "cgroup_root": sys_cgroup}


def v2_files(directory: str, current="500000000\n", limit="1073741824\n", stat=V2_STAT):
    prefix = f"{directory}/" if directory else ""
    return {
        f"{prefix}memory.current": current,
        f"{prefix}memory.max": limit,
        f"{prefix}memory.stat": stat,
    }


def v1_files(directory: str, usage="500000000\n", limit="1073741824\n", stat=V1_STAT):
    return {
        f"{directory}/memory.usage_in_bytes": usage,
        f"{directory}/memory.limit_in_bytes": limit,
        f"{directory}/memory.stat": stat,
    }


def test_host_rss_and_its_high_water_mark_from_status(tmp_path):
    sample = MemorySampler(**fake_roots(tmp_path, None, {})).sample()
    assert (sample["rss_bytes"], sample["rss_peak_bytes"]) == (100 * MiB, 200 * MiB)


def test_cgroup_v2_usage_limit_and_working_set(tmp_path):
    pod = "kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"
    roots = fake_roots(tmp_path, f"0::/{pod}\n", v2_files(pod))
    sampler = MemorySampler(**roots)
    assert sampler.cgroup.files.version == 2
    assert sampler.cgroup.path == str(roots["cgroup_root"] / pod)
    sample = sampler.sample()
    assert sample["cgroup_usage_bytes"] == 500_000_000
    assert sample["cgroup_limit_bytes"] == 1 << 30
    # Usage less the file cache the kernel can reclaim: what the kubelet calls working set.
    assert sample["cgroup_working_set_bytes"] == 500_000_000 - 150_000_000


def test_cgroup_v2_in_its_own_namespace_reads_the_mount_itself(tmp_path):
    roots = fake_roots(tmp_path, "0::/\n", v2_files(""))
    sampler = MemorySampler(**roots)
    assert sampler.cgroup.path == str(roots["cgroup_root"])
    assert sampler.sample()["cgroup_limit_bytes"] == 1 << 30


def test_a_host_path_missing_from_the_mount_falls_back_to_the_mount(tmp_path):
    # A container without a cgroup namespace: the host's path, only its own cgroup mounted.
    roots = fake_roots(tmp_path, "0::/system.slice/docker-abc.scope\n", v2_files(""))
    assert MemorySampler(**roots).cgroup.path == str(roots["cgroup_root"])


def test_cgroup_v2_without_a_limit_reports_usage_and_no_limit(tmp_path):
    files = {**v2_files("user.slice", limit="max\n"), **v2_files("user.slice/app", limit="max\n")}
    roots = fake_roots(tmp_path, "0::/user.slice/app\n", files)
    sampler = MemorySampler(**roots)
    assert sampler.cgroup.path == str(roots["cgroup_root"] / "user.slice" / "app")
    sample = sampler.sample()
    assert sample["cgroup_limit_bytes"] is None
    assert sample["cgroup_usage_bytes"] == 500_000_000


def test_the_nearest_limited_ancestor_is_the_one_reported(tmp_path):
    files = {
        **v2_files("batch.slice", current="900000000\n", limit="2147483648\n"),
        **v2_files("batch.slice/job.scope", limit="max\n"),
    }
    roots = fake_roots(tmp_path, "0::/batch.slice/job.scope\n", files)
    sample = MemorySampler(**roots).sample()
    assert (sample["cgroup_usage_bytes"], sample["cgroup_limit_bytes"]) == (900_000_000, 2 << 30)


def test_cgroup_v1_memory_line_wins_on_a_hybrid_host(tmp_path):
    cgroup = "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n"
    roots = fake_roots(tmp_path, cgroup, v1_files("memory/docker/abc"))
    sampler = MemorySampler(**roots)
    assert sampler.cgroup.files.version == 1
    sample = sampler.sample()
    assert sample["cgroup_usage_bytes"] == 500_000_000
    assert sample["cgroup_limit_bytes"] == 1 << 30
    # total_inactive_file (the hierarchy's), not the cgroup's own inactive_file.
    assert sample["cgroup_working_set_bytes"] == 500_000_000 - 150_000_000


def test_cgroup_v1_with_joined_controllers_and_no_limit(tmp_path):
    # Its huge "limit" is v1's way of writing none; the hierarchy is mounted as cpu,memory.
    files = {
        **v1_files("cpu,memory", limit=V1_UNLIMITED),
        **v1_files("cpu,memory/batch/job", limit=V1_UNLIMITED),
    }
    roots = fake_roots(tmp_path, "3:cpu,memory:/batch/job\n", files)
    sampler = MemorySampler(**roots)
    assert sampler.cgroup.path == str(roots["cgroup_root"] / "cpu,memory" / "batch" / "job")
    sample = sampler.sample()
    assert sample["cgroup_limit_bytes"] is None
    assert sample["cgroup_usage_bytes"] == 500_000_000


@pytest.mark.parametrize(
    "cgroup",
    [None, "0::/\n", "0::/user.slice\n", "4:memory:/x\n", "garbage\n"],
    ids=["no-proc-file", "v2-root", "v2-no-memory-files", "v1-not-mounted", "unreadable"],
)
def test_not_in_a_memory_cgroup_means_none_never_an_error(tmp_path, cgroup):
    # The v2 root cgroup has no memory files; a v1 line without its mount has nothing to read.
    roots = fake_roots(tmp_path, cgroup, {"user.slice/cgroup.procs": ""})
    sampler = MemorySampler(**roots)
    assert sampler.cgroup is None
    sample = sampler.sample()
    assert all(sample[key] is None for key in CGROUP_KEYS | CUDA_KEYS | DEVICE_KEYS)
    assert sample["rss_bytes"] == 100 * MiB


def test_missing_files_after_the_start_are_none_too(tmp_path):
    roots = fake_roots(tmp_path, "0::/app\n", v2_files("app"), status=None)
    sampler = MemorySampler(**roots)
    (roots["cgroup_root"] / "app" / "memory.stat").unlink()
    (roots["cgroup_root"] / "app" / "memory.max").write_text("garbage\n")
    sample = sampler.sample()
    assert (sample["rss_bytes"], sample["rss_peak_bytes"]) == (None, None)
    assert sample["cgroup_usage_bytes"] == 500_000_000
    assert sample["cgroup_working_set_bytes"] is None and sample["cgroup_limit_bytes"] is None


def test_cuda_figures_come_from_the_allocator_and_reset_per_epoch(tmp_path, monkeypatch):
    stats = {
        "allocated_bytes": {"all": {"current": 3 * MiB, "peak": 7 * MiB}},
        "reserved_bytes": {"all": {"current": 8 * MiB, "peak": 16 * MiB}},
    }
    asked, reset = [], []
    monkeypatch.setattr(
        torch.cuda, "memory_stats_as_nested_dict", lambda device: asked.append(device) or stats
    )
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset.append)
    device = torch.device("cuda", 1)
    used = [900 * MiB]  # the device as the driver sees it: context, NCCL, allocator, others
    sampler = MemorySampler(
        device, **fake_roots(tmp_path, None, {}), device_memory=lambda _d: (used[0], 80 << 30)
    )
    sample = sampler.sample()
    assert [sample[key] for key in sorted(CUDA_KEYS)] == [3 * MiB, 7 * MiB, 16 * MiB, 8 * MiB]
    # The device's peak: what the allocator does not hold now (900 - 8 MiB) plus its reserved
    # peak (16 MiB): the spike between samples that the driver's figure alone would miss.
    assert sample["device_used_peak_bytes"] == 908 * MiB
    sampler.reset_peaks()
    assert asked == reset == [device]
    # On a CPU the allocator is never asked.
    cpu = MemorySampler(torch.device("cpu"), **fake_roots(tmp_path / "cpu", None, {}))
    cpu.reset_peaks()
    assert all(cpu.sample()[key] is None for key in CUDA_KEYS) and asked == [device]
    # The device's peak starts again at the reset, from the samples that follow it.
    stats["reserved_bytes"]["all"]["peak"] = 8 * MiB
    used[0] = 800 * MiB
    assert sampler.sample()["device_used_peak_bytes"] == 800 * MiB


def test_the_devices_used_and_total_memory_come_from_the_reader_given(tmp_path):
    # No GPU here: the allocator has nothing to say (CUDA is not initialised), and the device's
    # figures come from the reader the sampler was given, asked for the rank's own device.
    readings = iter([(30 << 30, 80 << 30), (70 << 30, 80 << 30), (50 << 30, 80 << 30)])
    asked = []

    def reader(device):
        asked.append(device)
        return next(readings)

    device = torch.device("cuda", 3)
    sampler = MemorySampler(device, **fake_roots(tmp_path, None, {}), device_memory=reader)
    samples = [sampler.sample(), sampler.sample(), sampler.sample()]
    assert [s["device_used_bytes"] for s in samples] == [30 << 30, 70 << 30, 50 << 30]
    assert {s["device_total_bytes"] for s in samples} == {80 << 30}
    # Without the allocator's peak, the device's peak is the highest use a sample saw.
    assert [s["device_used_peak_bytes"] for s in samples] == [30 << 30, 70 << 30, 70 << 30]
    assert asked == [device] * 3
    assert all(samples[0][key] is None for key in CUDA_KEYS)
    assert set(samples[0]) == ALL_KEYS
    # On a CPU the reader is never asked, and the device's keys are null.
    cpu_roots = fake_roots(tmp_path / "cpu", None, {})
    cpu = MemorySampler(torch.device("cpu"), **cpu_roots, device_memory=reader)
    assert all(cpu.sample()[key] is None for key in DEVICE_KEYS) and len(asked) == 3


@pytest.mark.parametrize(
    ("used", "reserved", "reserved_peak", "peak"),
    [
        (30, 20, 28, 38),  # the allocator peaked 8 GiB above what it holds now
        (30, 20, 20, 30),  # it holds its peak now: the peak is this sample's use
        (30, None, None, 30),  # no allocator figures: the use itself
        (78, 10, 50, 80),  # an estimate past the device: the device's size
    ],
)
def test_the_device_peak_estimate_adds_the_allocators_peak_and_never_exceeds_the_device(
    used, reserved, reserved_peak, peak
):
    gib = [None if value is None else value << 30 for value in (used, reserved, reserved_peak)]
    assert device_peak_estimate(gib[0], 80 << 30, gib[1], gib[2]) == peak << 30


def test_this_process_on_this_machine():
    sample = MemorySampler(torch.device("cpu")).sample()
    assert sample["rss_bytes"] > 0 and sample["rss_peak_bytes"] >= sample["rss_bytes"]
    assert set(sample) == ALL_KEYS
    assert all(sample[key] is None for key in DEVICE_KEYS)  # a CPU: no device to read


def test_parse_leak():
    assert parse_leak("64") == LeakSpec(mib=64, rank=None)
    assert parse_leak("1@32") == LeakSpec(mib=32, rank=1)
    for bad in ("", "x", "1@", "@3", "-5", "1@2@3", "1.5"):
        with pytest.raises(ConfigError, match="--leak-mib-per-epoch"):
            parse_leak(bad)


def test_the_leak_hook_makes_this_rank_resident_and_no_other():
    sampler = MemorySampler()
    leak = HostMemoryLeak(LeakSpec(mib=32, rank=0), rank=0)
    before = sampler.sample()["rss_bytes"]
    leak.grow()
    grown = sampler.sample()["rss_bytes"] - before
    assert 30 * MiB <= grown <= 40 * MiB, grown / MiB
    other = HostMemoryLeak(LeakSpec(mib=32, rank=0), rank=1)
    other.grow()
    assert other.kept == [] and HostMemoryLeak(None, rank=0).mib == 0


TINY = [
    "--model", "retinanet_resnet18_fpn", "--image-size", "32", "--min-size", "32",
    "--max-size", "32", "--synthetic-images", "4", "--synthetic-val-images", "2",
    "--workers", "0", "--threads", "1", "--batch-size", "2", "--print-freq", "1",
]  # fmt: skip


def test_a_run_records_memory_at_steps_and_around_each_spike(tmp_path, monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    argv = ["--output-dir", str(tmp_path), *TINY, "--epochs", "2", "--eval-every-epochs", "1",
            "--checkpoint-every-steps", "1"]  # fmt: skip
    assert main(argv) == 0
    records = read_records(tmp_path / "metrics" / "rank0.jsonl")
    (start,) = [r for r in records if r["event"] == "run_start"]
    assert "memory_cgroup" in start and start["memory_cgroup_version"] in (None, 1, 2)
    # Epoch e (2 steps): loader start, a mid-epoch checkpoint after step 1, the epoch's end and
    # its checkpoint, then the evaluation.
    per_epoch = [
        "loader_start", "checkpoint_write_before", "checkpoint_write_after", "epoch_end",
        "checkpoint_write_before", "checkpoint_write_after", "eval_after",
    ]  # fmt: skip
    memory = [r for r in records if r["event"] == "memory"]
    assert [r["phase"] for r in memory] == ["start", *per_epoch, *per_epoch]
    ends = [(r["epoch"], r["step"]) for r in memory if r["phase"] == "epoch_end"]
    assert ends == [(0, 2), (1, 4)]
    steps = [r for r in records if r["event"] == "step"]
    assert len(steps) == 4
    for record in [*memory, *steps]:
        assert record["memory"]["rss_bytes"] > 0, record
        assert set(CUDA_KEYS) <= set(record["memory"])
        assert all(record["memory"][key] is None for key in DEVICE_KEYS)  # a CPU run


def test_a_memory_event_at_an_unknown_phase_is_refused():
    known = "start, loader_start, epoch_end, checkpoint_write_before"
    with pytest.raises(ValueError, match=f"memory phase must be one of {known}.*got 'warmup'"):
        emit_memory(None, None, "warmup", epoch=0, step=0)

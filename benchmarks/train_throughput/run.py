# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Training throughput of the gpuops trainer against a torchvision-reference-style loop.

Both loops train the same model (same initial weights), on the same data, batch size and
hardware, in one process: the trainer's ``train_one_epoch`` with its own data loader, and
``reference_train_one_epoch`` below, written the way torchvision's detection reference
(references/detection/engine.py) writes it: per-step ``reduce_dict`` and ``.item()`` for
every loss, a smoothed-value metric logger, ``math.isfinite`` check, zero_grad/backward/
step. The loops measured: the reference in fp32, the reference with its own ``--amp`` (fp16
autocast and a GradScaler, on CUDA, where it acts: the baseline a GPU user compares with), the
trainer with the same fp32 math, and the trainer with the mixed precision it would run with on
the device (``--amp auto``: bf16 autocast where the CPU or GPU has native bf16). Epochs rotate
between the loops (which goes first rotates too) so machine load hits all alike; the first
epoch of each is a warm-up and is not counted. On a CPU with one thread and no loader
workers, rates are measured in process CPU time (wall time is reported too). Prints a JSON
summary.

    .venv/bin/python benchmarks/train_throughput/run.py --rounds 4
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import io
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import defaultdict, deque

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from gpuops_trainer.data import SyntheticDetection, collate_lists
from gpuops_trainer.distributed import DistInfo
from gpuops_trainer.engine import LoopOptions, TrainState, train_one_epoch
from gpuops_trainer.lr import build_lr_scheduler
from gpuops_trainer.memory import MemorySampler
from gpuops_trainer.metrics import MetricsWriter
from gpuops_trainer.models import build_model
from gpuops_trainer.options import AMP_DTYPES, parse_args
from gpuops_trainer.train import build_train_loader

# ---- the baseline: written like torchvision's references/detection (engine.py, utils.py)


class SmoothedValue:
    def __init__(self, window_size=20):
        self.values = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.values.append(value)
        self.count += n
        self.total += value * n

    @property
    def median(self):
        return statistics.median(self.values)

    @property
    def global_avg(self):
        return self.total / self.count


class MetricLogger:
    def __init__(self, sink):
        self.meters = defaultdict(SmoothedValue)
        self.sink = sink

    def update(self, **kwargs):
        for name, value in kwargs.items():
            if isinstance(value, torch.Tensor):
                value = value.item()
            self.meters[name].update(value)

    def log_every(self, iterable, print_freq, header):
        start = end = time.time()
        iter_time, data_time = SmoothedValue(), SmoothedValue()
        for index, obj in enumerate(iterable):
            data_time.update(time.time() - end)
            yield obj
            iter_time.update(time.time() - end)
            if index % print_freq == 0 or index == len(iterable) - 1:
                meters = "  ".join(f"{k}: {v.median:.4f} ({v.global_avg:.4f})" for k, v in
                                   self.meters.items())  # fmt: skip
                print(f"{header} [{index}/{len(iterable)}] {meters} time: {iter_time.median:.4f}"
                      f" data: {data_time.median:.4f}", file=self.sink)  # fmt: skip
            end = time.time()
        print(f"{header} Total time: {time.time() - start:.1f}", file=self.sink)


def reduce_dict(input_dict, average=True):
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return input_dict
    with torch.no_grad():
        names = sorted(input_dict)
        values = torch.stack([input_dict[k] for k in names])
        torch.distributed.all_reduce(values)
        if average:
            values /= torch.distributed.get_world_size()
        return dict(zip(names, values, strict=True))


def reference_train_one_epoch(model, optimizer, data_loader, device, epoch, print_freq, sink, amp=None):
    """``amp``: the reference's --amp, as (autocast dtype, GradScaler) or None for fp32."""
    model.train()
    metric_logger = MetricLogger(sink)
    lr_scheduler = None
    if epoch == 0:
        warmup_iters = min(1000, len(data_loader) - 1)
        lr_scheduler = torch.optim.lr_scheduler.LinearLR(
            optimizer, start_factor=0.001, total_iters=warmup_iters
        )
    for images, targets in metric_logger.log_every(data_loader, print_freq, f"Epoch: [{epoch}]"):
        images = [image.to(device) for image in images]
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        with torch.autocast(device.type, dtype=amp[0] if amp else None, enabled=amp is not None):
            loss_dict = model(images, targets)
            losses = sum(loss for loss in loss_dict.values())
        loss_dict_reduced = reduce_dict(loss_dict)
        losses_reduced = sum(loss for loss in loss_dict_reduced.values())
        loss_value = losses_reduced.item()
        if not math.isfinite(loss_value):
            sys.exit(f"Loss is {loss_value}, stopping training")
        optimizer.zero_grad()
        if amp is not None:
            scaler = amp[1]
            scaler.scale(losses).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            losses.backward()
            optimizer.step()
        if lr_scheduler is not None:
            lr_scheduler.step()
        metric_logger.update(loss=losses_reduced, **loss_dict_reduced)
        metric_logger.update(lr=optimizer.param_groups[0]["lr"])
    return metric_logger.meters["loss"].global_avg


# ---- the measurement


def amp_dtype_for(device):
    """The mixed precision the trainer would be run with on this device, or None."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    # bf16 autocast pays off on CPUs with native bf16 instructions (AVX512-BF16, AMX);
    # elsewhere it is emulated and slower than fp32.
    return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None


def memory_sample_us(sampler, batches=7, samples=200):
    """Median wall time of one memory sample, in microseconds (system calls are most of it)."""
    times = []
    for _batch in range(batches):
        started = time.perf_counter()
        for _sample in range(samples):
            sampler.sample()
        times.append((time.perf_counter() - started) / samples * 1e6)
    return statistics.median(times)


def parse_cli(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="retinanet_resnet18_fpn")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--images", type=int, default=32, help="images per epoch")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4, help="measured epochs of each loop")
    parser.add_argument("--print-freq", type=int, default=20)
    parser.add_argument(
        "--lr",
        type=float,
        default=0.002,
        help="low enough that neither unclipped from-scratch loop diverges (the reference "
        "stops at a NaN loss); throughput does not depend on it",
    )
    parser.add_argument(
        "--clip-grad-norm",
        type=float,
        default=0.0,
        help="the trainer's clipping (the reference does none: 0 compares equal work)",
    )
    parser.add_argument(
        "--amp",
        choices=("auto", "off", *AMP_DTYPES),
        default="auto",
        help="the trainer's mixed precision in the third loop: auto picks bf16 where the device "
        "supports it natively (fp16 on older GPUs), off measures only the two fp32 loops",
    )
    parser.add_argument(
        "--reference-amp",
        choices=("auto", "on", "off"),
        default="auto",
        help="also measure the reference with its own --amp (autocast with a GradScaler): auto on "
        "CUDA only, where the reference's --amp acts (fp16); on also elsewhere, in the trainer's "
        "mixed precision (to try the loop on a CPU)",
    )
    parser.add_argument(
        "--channels-last",
        action="store_true",
        help="also measure the mixed-precision trainer with --channels-last (NHWC weights)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    cli = parse_cli(argv)
    torch.set_num_threads(cli.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size = str(cli.image_size)
    trainer_args = parse_args([
        "--output-dir", os.devnull, "--model", cli.model, "--min-size", size, "--max-size", size,
        "--batch-size", str(cli.batch_size), "--workers", str(cli.workers),
        "--aspect-ratio-group-factor", "-1",
    ])  # fmt: skip
    dataset = SyntheticDetection(cli.images, 6, cli.image_size, seed=0)

    torch.manual_seed(0)
    initial = build_model(cli.model, dataset.num_classes, cli.image_size, cli.image_size)

    # The trainer's own loader (DistributedSampler, resumable batches) and loop options.
    dist_info = DistInfo(0, 0, 1, None, device)
    sampler, _batches, trainer_loader = build_train_loader(dataset, trainer_args, dist_info)
    metrics = MetricsWriter(None, 0, 0, 1, stream=io.StringIO())
    # The trainer samples its memory as it does in a run: at each epoch's first batch and in
    # every step record (--print-freq).
    memory = MemorySampler(device)
    options = LoopOptions(
        num_classes=dataset.num_classes, print_freq=cli.print_freq,
        clip_grad_norm=cli.clip_grad_norm, nonfinite_limit=10, rank=0, attempt=0, memory=memory,
    )  # fmt: skip
    # The reference: RandomSampler + BatchSampler, as its script builds them on one GPU.
    reference_loader = DataLoader(
        dataset,
        batch_sampler=BatchSampler(RandomSampler(dataset), cli.batch_size, drop_last=True),
        num_workers=cli.workers,
        collate_fn=collate_lists,
        pin_memory=device.type == "cuda",
    )
    sink = io.StringIO()

    def fresh_model_and_optimizer():
        # Every measured epoch starts from the same weights and an empty optimizer state:
        # two models trained apart drift into states of different arithmetic cost (tiny
        # values, for one), which measured as 15% either way and swamped any loop overhead.
        model = copy.deepcopy(initial).to(device)
        params = [p for p in model.parameters() if p.requires_grad]
        return model, torch.optim.SGD(params, lr=cli.lr, momentum=0.9, weight_decay=1e-4)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run_trainer(epoch, amp_dtype, channels_last=False):
        model, optimizer = fresh_model_and_optimizer()
        if channels_last:
            model.to(memory_format=torch.channels_last)
        scheduler = build_lr_scheduler(optimizer, len(trainer_loader), 0.001, "constant")
        sampler.set_epoch(epoch)
        result = train_one_epoch(
            model, optimizer, scheduler, trainer_loader, device, TrainState(epoch=epoch),
            metrics, dataclasses.replace(options, amp_dtype=amp_dtype),
            iters_per_epoch=len(trainer_loader),
        )  # fmt: skip
        return result.loss

    def run_reference(epoch, amp_dtype=None):
        del epoch  # the reference's warmup epoch every time, as the trainer's scheduler has one too
        model, optimizer = fresh_model_and_optimizer()
        amp = None
        if amp_dtype is not None:
            # The reference's GradScaler; it only scales for fp16 (bf16 keeps fp32's range).
            amp = (amp_dtype, torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16))
        return reference_train_one_epoch(
            model, optimizer, reference_loader, device, 0, cli.print_freq, sink, amp
        )

    # The loops measured, in one run on one machine: the reference in fp32, the reference with
    # its own --amp (fp16 autocast and a GradScaler; it acts on CUDA only), the trainer with the
    # same fp32 math, and the trainer with the mixed precision it would be run with on this
    # device (bf16 autocast, where supported). The fp32 pair compares the loops; the trainer's
    # best against the reference's AMP is the comparison a GPU user makes.
    loops = {"reference": run_reference, "trainer_fp32": lambda epoch: run_trainer(epoch, None)}
    amp_dtype = amp_dtype_for(device) if cli.amp == "auto" else AMP_DTYPES.get(cli.amp)
    if cli.reference_amp == "on" or (cli.reference_amp == "auto" and device.type == "cuda"):
        reference_dtype = torch.float16 if device.type == "cuda" else (amp_dtype or torch.bfloat16)
        loops["reference_amp"] = lambda epoch: run_reference(epoch, reference_dtype)
    if amp_dtype is not None:
        loops["trainer_amp"] = lambda epoch: run_trainer(epoch, amp_dtype)
        if cli.channels_last:
            loops["trainer_amp_channels_last"] = lambda epoch: run_trainer(epoch, amp_dtype, True)
    wall_rates = {name: [] for name in loops}
    cpu_rates = {name: [] for name in loops}
    losses = {name: [] for name in loops}
    names = list(loops)
    images = cli.images // cli.batch_size * cli.batch_size
    for epoch in range(cli.rounds + 1):
        # Rotate which loop goes first, so none always follows another.
        order = names[epoch % len(names) :] + names[: epoch % len(names)]
        for name in order:
            sync()
            started, cpu_started = time.perf_counter(), time.process_time()
            loss = loops[name](epoch)
            sync()
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            if epoch == 0:
                continue  # warm-up: allocator, oneDNN primitive caches
            wall_rates[name].append(images / wall)
            cpu_rates[name].append(images / cpu)
            losses[name].append(loss)

    # On a CPU with one thread and no loader workers, all the work is this process's: its
    # CPU time leaves out the time other jobs on a shared machine took the core away, which
    # wall time charges to whichever loop happened to run then. On a GPU, or with workers,
    # only wall time counts what the device did.
    cpu_bound = device.type == "cpu" and cli.workers == 0
    rates = cpu_rates if cpu_bound else wall_rates
    medians = {name: statistics.median(values) for name, values in rates.items()}
    wall_medians = {name: statistics.median(values) for name, values in wall_rates.items()}
    best_trainer = max((name for name in medians if name.startswith("trainer")), key=medians.get)
    sample_us = memory_sample_us(memory)
    # One sample per step is the most a run takes (--print-freq 1); its share of a step of the
    # fastest trainer loop is the sampling's whole cost, far below these loops' noise.
    step_us = cli.batch_size / wall_medians[best_trainer] * 1e6
    summary = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "threads": cli.threads,
        "model": cli.model,
        "image_size": cli.image_size,
        "batch_size": cli.batch_size,
        "images_per_epoch": cli.images,
        "workers": cli.workers,
        "rounds": cli.rounds,
        "lr": cli.lr,
        "clip_grad_norm": cli.clip_grad_norm,
        "amp_dtype": str(amp_dtype).removeprefix("torch.") if amp_dtype is not None else None,
        "measured_by": "process CPU time" if cpu_bound else "wall-clock time",
        "images_per_s": {name: round(value, 3) for name, value in medians.items()},
        "images_per_wall_s": {name: round(value, 3) for name, value in wall_medians.items()},
        "mean_epoch_loss": {name: round(statistics.fmean(values), 4) for name, values in losses.items()},
        "trainer": best_trainer,
        "ratio": round(medians[best_trainer] / medians["reference"], 4),
        "ratio_fp32": round(medians["trainer_fp32"] / medians["reference"], 4),
        "ratio_wall": round(wall_medians[best_trainer] / wall_medians["reference"], 4),
        # Against the reference run with its own --amp, where it was measured.
        "ratio_vs_reference_amp": round(medians[best_trainer] / medians["reference_amp"], 4)
        if "reference_amp" in medians
        else None,
        "memory_sample_us": round(sample_us, 1),
        "memory_sample_share_of_step": float(f"{sample_us / step_us:.3g}"),
        "per_round_ratios": {
            name: [round(t / r, 4) for t, r in zip(rates[name], rates["reference"], strict=True)]
            for name in rates
            if name != "reference"
        },
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

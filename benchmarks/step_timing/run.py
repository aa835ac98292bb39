# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the trainer's step timing costs: DDP training with it against the same without it.

Three loops train the same model (same initial weights, same data) under
DistributedDataParallel in one process group: the trainer's ``train_one_epoch`` with its
``StepTimer`` attached (a forward pre-hook, a communication hook wrapping DDP's default
all-reduce, and the marks in the loop: ``timed``), the same loop with no timer on a DDP model
with DDP's built-in all-reduce (``untimed``, the baseline), and the loop with no timer on a DDP
model with DDP's default all-reduce registered as a Python communication hook
(``python_hook``: what a Python hook costs by itself). Epochs rotate between the loops (which
goes first rotates too) and every epoch starts from the initial weights; the first round warms
up and is not counted. Rank 0 prints a JSON summary: the median images/s of each loop over the
rounds, the ratios to the baseline (``ratio``: timed over untimed; 1 is no cost), each round's
ratios, and the direct cost of the marks of one micro-step.

On a CPU the rates are taken from the CPU time of all ranks' processes summed (gloo waits
for its peers blocked, not spinning): the time other jobs on a shared machine hold the cores
is not charged to whichever loop ran then. Wall-clock rates are reported beside them
(``ratio_wall``); on GPUs wall time is the measure.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_timing/run.py --rounds 6

The ranks run as processes of this script (gloo on a CPU, NCCL on GPUs, one per GPU).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import io
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from gpuops_trainer.data import SyntheticDetection
from gpuops_trainer.distributed import DistInfo
from gpuops_trainer.engine import LoopOptions, TrainState, train_one_epoch
from gpuops_trainer.lr import build_lr_scheduler
from gpuops_trainer.metrics import MetricsWriter
from gpuops_trainer.models import build_model
from gpuops_trainer.options import parse_args
from gpuops_trainer.timing import HostClock, StepTimer
from gpuops_trainer.train import build_train_loader


def parse_cli(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="retinanet_resnet18_fpn")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--images", type=int, default=16, help="images per epoch (all ranks)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4, help="measured epochs of each loop")
    parser.add_argument("--print-freq", type=int, default=1, help="1: a record (and a read) every step")
    return parser.parse_args(argv)


def marks_us(repeats=20000):
    """Median wall time of the marks of one micro-step with the host clock, in microseconds."""
    timer = StepTimer(HostClock())
    times = []
    for _batch in range(5):
        started = time.perf_counter()
        for _repeat in range(repeats):
            timer.data_waited(0.0)
            timer.start()
            timer.before_forward()
            timer._forward_synced(None, ())
            timer.bucket_ready()
            timer.after_backward()
            timer.end(optimizer_step=True)
        timer.window(1.0)
        times.append((time.perf_counter() - started) / repeats * 1e6)
    return statistics.median(times)


def rank_main(rank, cli, init_file, queue):
    torch.set_num_threads(cli.threads)
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= cli.world_size
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank,
                            world_size=cli.world_size)  # fmt: skip
    size = str(cli.image_size)
    args = parse_args([
        "--output-dir", os.devnull, "--model", cli.model, "--min-size", size, "--max-size", size,
        "--batch-size", str(cli.batch_size), "--workers", "0", "--aspect-ratio-group-factor", "-1",
    ])  # fmt: skip
    dataset = SyntheticDetection(cli.images, 6, cli.image_size, seed=0)
    dist_info = DistInfo(rank, rank, cli.world_size, backend, device)
    sampler, _batches, loader = build_train_loader(dataset, args, dist_info)
    metrics = MetricsWriter(None, rank, rank, cli.world_size, stream=io.StringIO())
    torch.manual_seed(0)
    initial = build_model(cli.model, dataset.num_classes, cli.image_size, cli.image_size)
    device_ids = [rank] if cuda else None
    timed_model = DistributedDataParallel(copy.deepcopy(initial).to(device), device_ids=device_ids)
    timer = StepTimer.for_device(device)
    timer.attach(timed_model)
    plain_model = DistributedDataParallel(copy.deepcopy(initial).to(device), device_ids=device_ids)
    # DDP's default all-reduce as a Python communication hook, without timing: what the hook
    # itself costs against DDP's built-in one.
    hook_model = DistributedDataParallel(copy.deepcopy(initial).to(device), device_ids=device_ids)
    hook_model.register_comm_hook(None, default_hooks.allreduce_hook)
    state = {key: value.to(device) for key, value in initial.state_dict().items()}
    options = LoopOptions(num_classes=dataset.num_classes, print_freq=cli.print_freq,
                          clip_grad_norm=10.0, nonfinite_limit=10, rank=rank, attempt=0)  # fmt: skip

    def run(model, loop_timer, epoch):
        model.module.load_state_dict(state)  # every epoch from the same weights
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=0.002, momentum=0.9, weight_decay=1e-4)
        scheduler = build_lr_scheduler(optimizer, len(loader), 0.001, "constant")
        sampler.set_epoch(epoch)
        result = train_one_epoch(
            model, optimizer, scheduler, loader, device, TrainState(epoch=epoch), metrics,
            dataclasses.replace(options, timer=loop_timer), iters_per_epoch=len(loader),
        )  # fmt: skip
        return result.loss

    loops = {"untimed": lambda epoch: run(plain_model, None, epoch),
             "python_hook": lambda epoch: run(hook_model, None, epoch),
             "timed": lambda epoch: run(timed_model, timer, epoch)}  # fmt: skip
    names = list(loops)
    rates = {name: [] for name in names}
    losses = {name: [] for name in names}
    images = len(loader) * cli.batch_size * cli.world_size
    wall_rates = {name: [] for name in names}
    for epoch in range(cli.rounds + 1):
        order = names[epoch % len(names) :] + names[: epoch % len(names)]  # rotate the first
        for name in order:
            dist.barrier()
            if cuda:
                torch.cuda.synchronize()
            started, cpu_started = time.perf_counter(), time.process_time()
            loss = loops[name](epoch)
            if cuda:
                torch.cuda.synchronize()
            cpu = torch.tensor([time.process_time() - cpu_started], dtype=torch.float64)
            dist.barrier()
            wall = time.perf_counter() - started
            if not cuda:
                dist.all_reduce(cpu)  # every rank's CPU time, summed
            if epoch:  # the first round warms up
                wall_rates[name].append(images / wall)
                # CPU time: the ranks' work, per image of the epoch; on GPUs, wall time.
                rates[name].append(images * cli.world_size / float(cpu) if not cuda else images / wall)
                losses[name].append(loss)
    if rank == 0:
        medians = {name: statistics.median(values) for name, values in rates.items()}
        wall_medians = {name: statistics.median(values) for name, values in wall_rates.items()}
        step_s = cli.batch_size * cli.world_size / wall_medians["timed"]
        mark_us = marks_us()
        queue.put(
            {
                "device": str(device),
                "backend": backend,
                "world_size": cli.world_size,
                "torch": torch.__version__,
                "threads": cli.threads,
                "model": cli.model,
                "image_size": cli.image_size,
                "batch_size": cli.batch_size,
                "images_per_epoch": images,
                "print_freq": cli.print_freq,
                "rounds": cli.rounds,
                "measured_by": "wall-clock time of rank 0, between barriers"
                if cuda
                else "CPU time of every rank's process, summed (images/s of one rank's CPU)",
                "images_per_s": {name: round(value, 3) for name, value in medians.items()},
                "images_per_wall_s": {name: round(value, 3) for name, value in wall_medians.items()},
                "ratio": round(medians["timed"] / medians["untimed"], 4),
                "ratio_wall": round(wall_medians["timed"] / wall_medians["untimed"], 4),
                "ratio_python_hook": round(medians["python_hook"] / medians["untimed"], 4),
                "per_round_ratios": [
                    round(t / u, 4) for t, u in zip(rates["timed"], rates["untimed"], strict=True)
                ],
                "per_round_ratios_python_hook": [
                    round(h / u, 4) for h, u in zip(rates["python_hook"], rates["untimed"], strict=True)
                ],
                "per_round_ratios_wall": [
                    round(t / u, 4) for t, u in zip(wall_rates["timed"], wall_rates["untimed"], strict=True)
                ],
                "mean_epoch_loss": {
                    name: round(statistics.fmean(values), 4) for name, values in losses.items()
                },
                "marks_us_per_micro_step": round(mark_us, 2),
                "marks_share_of_step": float(f"{mark_us / (step_s * 1e6):.3g}"),
                "load_average": [round(value, 2) for value in os.getloadavg()],
            }
        )
    dist.destroy_process_group()


def main(argv=None) -> int:
    cli = parse_cli(argv)
    with tempfile.TemporaryDirectory(prefix="gpuops-step-timing-") as directory:
        queue = mp.get_context("spawn").SimpleQueue()
        mp.spawn(rank_main, args=(cli, os.path.join(directory, "store"), queue),
                 nprocs=cli.world_size)  # fmt: skip
        summary = queue.get()
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Process-group setup from the torchrun environment, and the backend/device choice."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .errors import ConfigError

BACKENDS = ("auto", "nccl", "gloo")


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    backend: str | None  # None: single process without a process group
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.backend is not None


def env_ranks() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from torchrun's environment; (0, 0, 1) without it."""
    try:
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as exc:
        raise ConfigError(f"RANK/LOCAL_RANK/WORLD_SIZE must be integers: {exc}") from None
    return rank, local_rank, world_size


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def choose_backend(requested: str, cuda_available: bool | None = None) -> str:
    """``auto`` picks nccl on GPU machines and gloo otherwise; nccl without a GPU is an error."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if requested not in BACKENDS:
        raise ConfigError(
            f"--dist-backend: unknown backend {requested!r} (choose from {', '.join(BACKENDS)})"
        )
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    if requested == "nccl" and not cuda_available:
        # init_process_group("nccl") would fail later with a less helpful message.
        raise ConfigError("--dist-backend nccl needs a CUDA device; use gloo or auto on CPU")
    return requested


def choose_device(
    local_rank: int, cuda_available: bool | None = None, device_count: int | None = None
) -> torch.device:
    """``cuda:LOCAL_RANK`` on GPUs: one process per GPU, as NCCL requires."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if not cuda_available:
        return torch.device("cpu")
    if device_count is None:
        device_count = torch.cuda.device_count()
    if local_rank >= device_count:
        # Otherwise CUDA fails with "invalid device ordinal" deep in set_device, or, where
        # ranks share a GPU, NCCL with "Duplicate GPU detected".
        raise ConfigError(
            f"LOCAL_RANK {local_rank} has no GPU of its own: this node shows {device_count} "
            "CUDA device(s) (CUDA_VISIBLE_DEVICES), so start at most that many processes per "
            "node (torchrun --nproc-per-node)"
        )
    return torch.device("cuda", local_rank)


# torch's own defaults are 10 minutes for NCCL and 30 for gloo; launchers pass it explicitly.
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800


def init_distributed(
    requested_backend: str, timeout_s: int = DEFAULT_COLLECTIVE_TIMEOUT_S
) -> DistInfo:
    """Join the process group when launched by torchrun; run alone otherwise.

    ``timeout_s`` bounds how long a collective may block: a rank that never answers fails
    the run (and torchrun restarts it) instead of hanging it.
    """
    rank, local_rank, world_size = env_ranks()
    backend = choose_backend(requested_backend)
    device = choose_device(local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not launched_by_torchrun():
        return DistInfo(rank=0, local_rank=0, world_size=1, backend=None, device=device)
    init_kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(
        backend=backend, timeout=datetime.timedelta(seconds=timeout_s), **init_kwargs
    )
    return DistInfo(rank, local_rank, world_size, backend, device)


def cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def broadcast_from_main(value: object) -> object:
    """Every rank gets rank 0's ``value`` (any picklable object)."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]

import pytest
import torch

from gpuops_trainer.distributed import choose_backend, choose_device, env_ranks, init_distributed
from gpuops_trainer.errors import ConfigError


@pytest.mark.parametrize(
    ("requested", "cuda", "expected"),
    [
        ("auto", True, "nccl"),
        ("auto", False, "gloo"),
        ("gloo", True, "gloo"),
        ("nccl", True, "nccl"),
    ],
)
def test_backend_choice(requested, cuda, expected):
    assert choose_backend(requested, cuda_available=cuda) == expected


def test_nccl_without_gpu_is_a_config_error():
    with pytest.raises(ConfigError, match="--dist-backend"):
        choose_backend("nccl", cuda_available=False)


def test_unknown_backend_names_the_choices():
    with pytest.raises(ConfigError, match="auto, nccl, gloo"):
        choose_backend("mpi", cuda_available=False)


def test_device_follows_local_rank():
    assert choose_device(3, cuda_available=True, device_count=4) == torch.device("cuda", 3)
    assert choose_device(3, cuda_available=False) == torch.device("cpu")


def test_more_processes_than_gpus_is_a_configuration_error():
    with pytest.raises(ConfigError, match=r"LOCAL_RANK 1 has no GPU of its own: this node shows 1"):
        choose_device(1, cuda_available=True, device_count=1)


def test_without_torchrun_it_is_a_single_process(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert env_ranks() == (0, 0, 1)
    info = init_distributed("auto")
    assert (info.rank, info.world_size, info.backend, info.enabled) == (0, 1, None, False)
    assert info.is_main

"""Shared helpers. Tests run real code on CPU with one thread per process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

# Two cores, several processes: more threads only make everything slower.
torch.set_num_threads(1)

PYTHON = sys.executable


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stdout_records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture
def cpu_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env

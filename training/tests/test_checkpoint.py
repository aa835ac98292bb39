import os
import pickle

import pytest
import torch

from gpuops_trainer import checkpoint as ckpt


def _state(epoch: int) -> dict:
    return {
        "model": {"weight": torch.full((2,), float(epoch))},
        "optimizer": {"state": {}, "param_groups": []},
        "lr_scheduler": {"last_epoch": epoch},
        "epoch": epoch,
        "epoch_batches": 10,
        "iters_per_epoch": 10,
        "global_step": 10 * (epoch + 1),
        "rng": ckpt.rng_states(),
        "args": {"model": "retinanet_resnet18_fpn", "lr": 0.01, "backbone_weights": None},
    }


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = ckpt.save_checkpoint(_state(0), tmp_path, keep=3)
    assert path == tmp_path / "checkpoint_step000000010.pt"
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_step000000010.pt"]
    loaded = ckpt.load_checkpoint(path)
    assert loaded["epoch"] == 0 and loaded["global_step"] == 10
    assert torch.equal(loaded["model"]["weight"], torch.zeros(2))


def test_failed_save_keeps_the_previous_file_and_removes_the_temp(tmp_path):
    ckpt.save_checkpoint(_state(1), tmp_path, keep=3)
    bad = _state(1)
    bad["args"] = {"callback": lambda: None}  # lambdas cannot be pickled: torch.save fails
    with pytest.raises((AttributeError, TypeError, RuntimeError, pickle.PicklingError)):
        ckpt.save_checkpoint(bad, tmp_path, keep=3)
    assert os.listdir(tmp_path) == ["checkpoint_step000000020.pt"]
    assert ckpt.load_checkpoint(tmp_path / "checkpoint_step000000020.pt")["epoch"] == 1


def test_keeps_only_the_newest_k(tmp_path):
    for epoch in range(5):
        ckpt.save_checkpoint(_state(epoch), tmp_path, keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "checkpoint_step000000050.pt",
        "checkpoint_step000000040.pt",
    ]


def test_ordering_is_by_step_not_by_name(tmp_path):
    for epoch in (9, 10, 123):
        ckpt.save_checkpoint(_state(epoch), tmp_path, keep=5)
    (tmp_path / ".checkpoint_step999999999.pt.abc.tmp").write_bytes(b"partial")
    (tmp_path / "checkpoint_step0000099999.pt").write_bytes(b"")  # wider number: still parsed
    names = [p.name for p in ckpt.list_checkpoints(tmp_path)]
    assert names[:2] == ["checkpoint_step0000099999.pt", "checkpoint_step000001240.pt"]


def test_newest_corrupt_checkpoint_is_skipped(tmp_path):
    ckpt.save_checkpoint(_state(0), tmp_path, keep=5)
    ckpt.save_checkpoint(_state(1), tmp_path, keep=5)
    newest = tmp_path / ckpt.checkpoint_name(30)
    newest.write_bytes(b"not a checkpoint")
    incomplete = tmp_path / ckpt.checkpoint_name(40)
    torch.save({"model": {}}, incomplete)

    path, state, skipped = ckpt.load_newest(tmp_path)
    assert path == tmp_path / ckpt.checkpoint_name(20)
    assert state["epoch"] == 1
    assert [s.path for s in skipped] == [incomplete, newest]
    assert "missing keys" in skipped[0].reason
    assert "unreadable" in skipped[1].reason


def test_nothing_to_resume(tmp_path):
    assert ckpt.load_newest(tmp_path / "absent") == (None, None, [])


def test_rng_states_round_trip_through_a_weights_only_checkpoint(tmp_path):
    import random

    import numpy as np

    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    path = ckpt.save_checkpoint(_state(0), tmp_path, keep=1)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    ckpt.restore_rng_states(ckpt.load_checkpoint(path)["rng"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected

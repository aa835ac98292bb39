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
        "global_step": 10 * (epoch + 1),
        "args": {"model": "retinanet_resnet18_fpn", "lr": 0.01, "backbone_weights": None},
    }


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = ckpt.save_checkpoint(_state(0), tmp_path, keep=3)
    assert path == tmp_path / "checkpoint_epoch0000.pt"
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_epoch0000.pt"]
    loaded = ckpt.load_checkpoint(path)
    assert loaded["epoch"] == 0 and loaded["global_step"] == 10
    assert torch.equal(loaded["model"]["weight"], torch.zeros(2))


def test_failed_save_keeps_the_previous_file_and_removes_the_temp(tmp_path):
    ckpt.save_checkpoint(_state(1), tmp_path, keep=3)
    bad = _state(1)
    bad["args"] = {"callback": lambda: None}  # lambdas cannot be pickled: torch.save fails
    with pytest.raises((AttributeError, TypeError, RuntimeError, pickle.PicklingError)):
        ckpt.save_checkpoint(bad, tmp_path, keep=3)
    assert os.listdir(tmp_path) == ["checkpoint_epoch0001.pt"]
    assert ckpt.load_checkpoint(tmp_path / "checkpoint_epoch0001.pt")["epoch"] == 1


def test_keeps_only_the_newest_k(tmp_path):
    for epoch in range(5):
        ckpt.save_checkpoint(_state(epoch), tmp_path, keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "checkpoint_epoch0004.pt",
        "checkpoint_epoch0003.pt",
    ]


def test_ordering_is_by_epoch_not_by_name_length(tmp_path):
    for epoch in (9, 10, 123):
        ckpt.save_checkpoint(_state(epoch), tmp_path, keep=5)
    (tmp_path / ".checkpoint_epoch9999.pt.abc.tmp").write_bytes(b"partial")
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)][0] == "checkpoint_epoch0123.pt"


def test_newest_corrupt_checkpoint_is_skipped(tmp_path):
    ckpt.save_checkpoint(_state(0), tmp_path, keep=5)
    ckpt.save_checkpoint(_state(1), tmp_path, keep=5)
    newest = tmp_path / "checkpoint_epoch0002.pt"
    newest.write_bytes(b"not a checkpoint")
    incomplete = tmp_path / "checkpoint_epoch0003.pt"
    torch.save({"model": {}}, incomplete)

    path, state, skipped = ckpt.load_newest(tmp_path)
    assert path == tmp_path / "checkpoint_epoch0001.pt"
    assert state["epoch"] == 1
    assert [s.path for s in skipped] == [incomplete, newest]
    assert "missing keys" in skipped[0].reason
    assert "unreadable" in skipped[1].reason


def test_nothing_to_resume(tmp_path):
    assert ckpt.load_newest(tmp_path / "absent") == (None, None, [])

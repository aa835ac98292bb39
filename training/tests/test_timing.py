"""Step timing: the split of a step into data, compute and collective waits (timing.py).

A fake clock checks the arithmetic; a one-process gloo group checks that DDP's hooks mark
what the split needs on the installed torch. test_torchrun.py has the real two-rank runs.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpuops_trainer.timing import TIMING_KEYS, HostClock, StepTimer


class FakeClock(HostClock):
    """Marks are the readings the test sets."""

    def __init__(self) -> None:
        self.now = 0.0

    def mark(self) -> float:
        return self.now


def micro_step(timer: StepTimer, clock: FakeClock, *, data, before, sync_wait, work, bucket_wait,
               after, last, synced=True, bucket=True):  # fmt: skip
    """One micro-step: DATA waiting for the loader, BEFORE compute until the model call,
    SYNC_WAIT in DDP's forward sync, WORK of forward and backward up to the last bucket,
    BUCKET_WAIT for the all-reduce, AFTER (optimizer step) to the end."""
    timer.data_waited(data)
    timer.start()
    clock.now += before
    timer.before_forward()
    clock.now += sync_wait
    if synced:
        timer._forward_synced(None, ())
    clock.now += work
    if bucket:
        timer.bucket_ready()
    clock.now += bucket_wait
    timer.after_backward()
    clock.now += after
    timer.end(optimizer_step=last)


def test_the_waits_in_ddp_are_collective_and_the_rest_of_the_micro_step_is_compute():
    clock = FakeClock()
    timer = StepTimer(clock)
    for _step in range(2):
        micro_step(timer, clock, data=0.01, before=0.02, sync_wait=0.05, work=0.3, bucket_wait=0.4,
                   after=0.03, last=True)  # fmt: skip
    timing = timer.window(elapsed_s=2.0)
    assert timing == {
        "step_s": 1.0,
        "data_s": 0.01,
        "compute_s": pytest.approx(0.35),
        "collective_s": pytest.approx(0.45),
    }
    # A new window starts empty.
    assert timer.window(elapsed_s=0.0)["compute_s"] == 0


def test_accumulation_micro_steps_add_up_into_their_optimizer_step():
    clock = FakeClock()
    timer = StepTimer(clock)
    # Under no_sync no bucket is all-reduced: only the last micro-step waits for gradients.
    micro_step(timer, clock, data=0.1, before=0, sync_wait=0, work=0.5, bucket_wait=0, after=0,
               last=False, bucket=False)  # fmt: skip
    micro_step(timer, clock, data=0.1, before=0, sync_wait=0, work=0.5, bucket_wait=0.2, after=0.1,
               last=True)  # fmt: skip
    timing = timer.window(elapsed_s=1.6)
    assert timing["step_s"] == 1.6
    assert timing["data_s"] == pytest.approx(0.2)
    assert timing["compute_s"] == pytest.approx(1.1)
    assert timing["collective_s"] == pytest.approx(0.2)


def test_without_ddp_nothing_marks_a_wait():
    clock = FakeClock()
    timer = StepTimer(clock)
    micro_step(timer, clock, data=0, before=0.1, sync_wait=0.2, work=0.3, bucket_wait=0.4, after=0,
               last=True, synced=False, bucket=False)  # fmt: skip
    timing = timer.window(elapsed_s=1.0)
    assert timing["collective_s"] == 0 and timing["compute_s"] == pytest.approx(1.0)


def test_an_evaluation_forward_outside_a_training_step_marks_nothing():
    clock = FakeClock()
    timer = StepTimer(clock)
    timer._forward_synced(None, ())  # the wrapped module run on its own (evaluation)
    micro_step(timer, clock, data=0, before=0, sync_wait=0.5, work=0.5, bucket_wait=0, after=0,
               last=True, synced=False, bucket=False)  # fmt: skip
    assert timer.window(elapsed_s=1.0)["collective_s"] == 0


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def test_ddps_hooks_mark_the_forward_sync_and_the_last_bucket(one_rank_group):
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    ddp = DistributedDataParallel(model)
    timer = StepTimer(HostClock())
    timer.attach(ddp)
    seen = []
    original = timer.end

    def end(optimizer_step):
        seen.append(sorted(timer._micro))  # the marks taken before the end's
        original(optimizer_step)

    timer.end = end
    weight = ddp.module[0].weight.detach().clone()
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _step in range(2):
        timer.start()
        timer.before_forward()
        loss = ddp(torch.randn(4, 8)).square().mean()
        loss.backward()
        timer.after_backward()
        optimizer.step()
        optimizer.zero_grad()
        timer.end(optimizer_step=True)
    marks = ["backward_end", "forward_call", "forward_synced", "last_bucket", "start"]
    assert seen == [marks, marks]
    assert not torch.equal(ddp.module[0].weight, weight)  # the wrapped all-reduce delivered grads
    timing = timer.window(elapsed_s=1.0)
    assert set(timing) == set(TIMING_KEYS) and timing["compute_s"] > 0
    # The wrapped module evaluated on its own marks nothing.
    model.eval()
    with torch.no_grad():
        model(torch.randn(4, 8))
    assert timer._micro is None


def test_attach_wants_a_ddp_model():
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        StepTimer().attach(nn.Linear(2, 2))

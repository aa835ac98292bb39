import pytest
import torch

from gpuops_trainer.lr import build_lr_scheduler, warmup_factor


def test_warmup_factor_is_linear_then_one():
    assert warmup_factor(0, 10, 0.001) == pytest.approx(0.001)
    assert warmup_factor(5, 10, 0.001) == pytest.approx(0.5005)
    assert warmup_factor(10, 10, 0.001) == 1.0
    assert warmup_factor(500, 10, 0.001) == 1.0
    assert warmup_factor(0, 0, 0.001) == 1.0  # no warmup


def _lrs(scheduler, optimizer, steps):
    seen = []
    for _step in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def _build(lr=0.1):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    return optimizer, build_lr_scheduler(optimizer, warmup_iters=4, start_factor=0.1)


def test_scheduler_warms_up_then_stays_constant():
    optimizer, scheduler = _build()
    lrs = _lrs(scheduler, optimizer, 7)
    assert lrs[0] == pytest.approx(0.01)
    assert lrs == sorted(lrs)
    assert lrs[4:] == pytest.approx([0.1, 0.1, 0.1])


def test_resumed_schedule_continues_where_it_stopped():
    optimizer, scheduler = _build()
    uninterrupted = _lrs(scheduler, optimizer, 7)

    optimizer, scheduler = _build()
    _lrs(scheduler, optimizer, 2)  # stop in the middle of warmup
    saved = (optimizer.state_dict(), scheduler.state_dict())
    optimizer, scheduler = _build()
    optimizer.load_state_dict(saved[0])
    scheduler.load_state_dict(saved[1])
    assert _lrs(scheduler, optimizer, 5) == pytest.approx(uninterrupted[2:])

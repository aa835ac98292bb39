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


def test_multistep_follows_the_reference_in_epochs():
    from gpuops_trainer.lr import main_schedule

    schedule = main_schedule("multistep", steps_per_epoch=10, total_epochs=26, milestones=[16, 22])
    assert schedule(159) == 1.0
    assert schedule(160) == pytest.approx(0.1)
    assert schedule(219) == pytest.approx(0.1)
    assert schedule(220) == pytest.approx(0.01)


def test_cosine_starts_after_warmup_and_ends_at_zero():
    from gpuops_trainer.lr import main_schedule

    schedule = main_schedule("cosine", steps_per_epoch=10, total_epochs=3, warmup_iters=10)
    assert schedule(0) == schedule(10) == 1.0
    assert schedule(20) == pytest.approx(0.5)
    assert schedule(30) == pytest.approx(0.0, abs=1e-12)
    values = [schedule(step) for step in range(10, 31)]
    assert values == sorted(values, reverse=True)


def test_warmup_multiplies_the_main_schedule():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_lr_scheduler(
        optimizer, 2, 0.5, "multistep", steps_per_epoch=2, total_epochs=3, milestones=[1],
        gamma=0.1,
    )  # fmt: skip
    assert _lrs(scheduler, optimizer, 5) == pytest.approx([0.5, 0.75, 0.1, 0.1, 0.1])

import pytest

from gpuops_trainer.errors import ConfigError, InjectedFault
from gpuops_trainer.faults import (
    FaultSpec,
    SlowRankSpec,
    maybe_inject,
    parse_fault,
    parse_slow_rank,
)


def test_parse():
    assert parse_fault("1@3") == FaultSpec(rank=1, step=3, mode="exit")
    assert parse_fault("0@10:kill") == FaultSpec(rank=0, step=10, mode="kill")
    for bad in ("1", "a@3", "1@3:boom", "1@-3", ""):
        with pytest.raises(ConfigError, match="--inject-fault"):
            parse_fault(bad)


def test_fires_only_on_its_rank_step_and_first_attempt(capsys):
    spec = parse_fault("1@3")
    maybe_inject(spec, rank=0, global_step=3, attempt=0)
    maybe_inject(spec, rank=1, global_step=2, attempt=0)
    maybe_inject(spec, rank=1, global_step=3, attempt=1)  # a restarted job recovers
    maybe_inject(None, rank=1, global_step=3, attempt=0)
    with pytest.raises(InjectedFault, match="rank 1 at global step 3"):
        maybe_inject(spec, rank=1, global_step=3, attempt=0)
    assert "injected fault" in capsys.readouterr().err


def test_raise_mode_raises_runtime_error():
    with pytest.raises(RuntimeError, match="injected fault"):
        maybe_inject(parse_fault("0@0:raise"), rank=0, global_step=0, attempt=0)


def test_parse_slow_rank():
    spec = parse_slow_rank("1@250")
    assert spec == SlowRankSpec(rank=1, ms=250)
    assert (spec.delay_s(1), spec.delay_s(0)) == (0.25, 0.0)
    for bad in ("1", "@250", "1@", "1@-5", "1@2.5", "a@3", "1@3:kill", ""):
        with pytest.raises(ConfigError, match=r"--slow-rank: expected RANK@MS .*got"):
            parse_slow_rank(bad)

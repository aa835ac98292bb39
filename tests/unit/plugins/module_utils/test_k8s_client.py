"""k8s_client: the poll loop every wait shares, and the checks of its options."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.module_utils import k8s_client


@pytest.fixture
def clock(monkeypatch):
    """A fake clock: sleeping moves it on, and every sleep is recorded."""
    state = {"now": 1000.0, "sleeps": []}

    def sleep(seconds):
        state["sleeps"].append(seconds)
        state["now"] += seconds

    monkeypatch.setattr(k8s_client.time, "monotonic", lambda: state["now"])
    monkeypatch.setattr(k8s_client.time, "sleep", sleep)
    return state


def judge_of(*rounds):
    """A judge that returns the verdicts of each round in turn; the last one repeats."""
    calls = []

    def judge():
        calls.append(len(calls))
        return rounds[min(len(calls), len(rounds)) - 1]

    return judge, calls


PENDING = [{"done": True}, {"done": False}]


def test_it_returns_as_soon_as_every_verdict_is_done(clock):
    judge, calls = judge_of(PENDING, PENDING, [{"done": True}, {"done": True}])
    outcome, verdicts, elapsed = k8s_client.poll(judge, timeout=60, poll_interval=5)
    assert (outcome, verdicts, elapsed) == ("done", [{"done": True}, {"done": True}], 10.0)
    assert len(calls) == 3 and clock["sleeps"] == [5, 5]


def test_a_failed_verdict_ends_the_wait_before_the_deadline(clock):
    judge, calls = judge_of(PENDING, [{"done": False, "failed": True}])
    assert k8s_client.poll(judge, timeout=60, poll_interval=5)[0] == "failed"
    assert len(calls) == 2


def test_the_last_sleep_is_cut_short_so_the_last_read_is_at_the_deadline(clock):
    judge, calls = judge_of(PENDING)
    outcome, verdicts, elapsed = k8s_client.poll(judge, timeout=12, poll_interval=5)
    assert (outcome, verdicts, elapsed) == ("timeout", PENDING, 12.0)
    assert clock["sleeps"] == [5, 5, 2] and len(calls) == 4


def test_a_zero_timeout_reads_once(clock):
    judge, calls = judge_of(PENDING)
    assert k8s_client.poll(judge, timeout=0, poll_interval=5)[0] == "timeout"
    assert len(calls) == 1 and clock["sleeps"] == []


@pytest.mark.parametrize(
    ("params", "at_least_zero", "message"),
    [
        ({"timeout": 10, "poll_interval": 1}, ("timeout",), ""),
        ({"timeout": -1, "poll_interval": 5}, ("timeout",), "timeout must be 0 or more and poll_interval"),
        ({"timeout": 1, "poll_interval": 0}, ("timeout",), "poll_interval at least 1 second"),
        (
            {"timeout": 1, "window": -2, "slow_after": 0, "poll_interval": 5},
            ("timeout", "window", "slow_after"),
            "timeout, window and slow_after must be 0 or more and poll_interval at least 1 second",
        ),
        (
            {"timeout": 10**12, "poll_interval": 5},
            ("timeout",),
            "timeout (1000000000000) must be at most 1000000000 seconds",
        ),
    ],
)
def test_wait_options_out_of_range_are_named(params, at_least_zero, message):
    problem = k8s_client.wait_options_problem(params, at_least_zero)
    assert (message in problem) if message else problem == ""

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


def test_a_window_returns_before_the_deadline_and_its_last_sleep_is_cut_short(clock):
    judge, calls = judge_of(PENDING)
    outcome, verdicts, elapsed = k8s_client.poll(judge, timeout=600, poll_interval=5, window=12)
    assert (outcome, verdicts, elapsed) == ("window", PENDING, 12.0)
    assert clock["sleeps"] == [5, 5, 2] and len(calls) == 4


def test_a_deadline_before_the_end_of_the_window_wins(clock):
    judge, _calls = judge_of(PENDING)
    outcome, _verdicts, elapsed = k8s_client.poll(judge, timeout=7, poll_interval=5, window=30)
    assert (outcome, elapsed) == ("timeout", 7.0) and clock["sleeps"] == [5, 2]


def test_a_wait_started_earlier_counts_from_its_start_on_the_clock_given(clock):
    # An earlier call began 50 s ago on another clock (time.time, say): 10 s are left.
    wall = {"now": 5000.0}

    def wall_clock():
        return wall["now"] + clock["now"] - 1000.0

    judge, calls = judge_of(PENDING)
    outcome, _verdicts, elapsed = k8s_client.poll(
        judge, timeout=60, poll_interval=4, started=wall["now"] - 50, clock=wall_clock
    )
    assert (outcome, elapsed) == ("timeout", 60.0)
    assert clock["sleeps"] == [4, 4, 2] and len(calls) == 4


def test_the_verdicts_can_be_read_by_other_predicates(clock):
    judge, calls = judge_of([{"finished": False}], [{"finished": True, "succeeded": False}])
    outcome, verdicts, _elapsed = k8s_client.poll(
        judge,
        timeout=60,
        poll_interval=5,
        done=lambda verdict: verdict.get("succeeded"),
        failed=lambda verdict: verdict["finished"] and not verdict["succeeded"],
    )
    assert (outcome, verdicts) == ("failed", [{"finished": True, "succeeded": False}])
    assert len(calls) == 2


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

"""k8s_client: the poll loop every wait shares, and the checks of its options."""

from __future__ import annotations

import pathlib

import pytest
import yaml

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


ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "training_job"
# Ansible 2.19 fails with a RecursionError at 246 nested include_tasks of a two-task file
# (measured); the role's own includes and the playbook's add a few levels above the wait.
ANSIBLE_INCLUDE_DEPTH = 240


def windows_until(deadline_s, window, growth, max_windows):
    """How many calls a windowed wait makes before its deadline, when the workload runs on."""
    elapsed, calls = 0.0, 0
    while elapsed < deadline_s:
        calls += 1
        length = 0 if calls > max_windows else k8s_client.growing_window(window, growth, elapsed)
        elapsed = deadline_s if length == 0 else elapsed + length
    return calls


@pytest.mark.parametrize(
    ("window", "growth", "elapsed", "expected"),
    [(30, 0.1, 0, 30), (30, 0.1, 299, 30), (30, 0.1, 3600, 360), (30, 0, 86400, 30), (0, 0.1, 3600, 0)],
)
def test_a_window_grows_to_its_share_of_the_time_since_the_start(window, growth, elapsed, expected):
    assert k8s_client.growing_window(window, growth, elapsed) == expected


def test_the_roles_wait_of_its_default_three_days_stays_far_from_ansibles_include_depth():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    growth, most = role_vars["training_job_wait_window_growth"], role_vars["training_job_wait_max_windows"]
    timeout, interval = defaults["training_job_timeout_s"], defaults["training_job_progress_interval_s"]
    assert (timeout, interval) == (259200, 30)
    calls = windows_until(timeout, interval, growth, most)
    assert calls <= 90, calls
    # Fixed windows, as before: the wait would have needed 8640 nested includes.
    assert windows_until(timeout, interval, 0, 10**6) == 8640
    # Any deadline and a progress line every second: the cap ends it within the depth.
    assert windows_until(10 * 365 * 86400, 1, growth, most) == most + 1 < ANSIBLE_INCLUDE_DEPTH

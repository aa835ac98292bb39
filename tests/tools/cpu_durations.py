"""A pytest plugin: the CPU time each test cost, its own process and every process it reaped.

On 2 cores the suites of `make test` run side by side and compete for the CPU, so a test's
wall-clock time says little about what it costs the run; its CPU time does. Loaded with
`-p cpu_durations` (tests/tools on PYTHONPATH):

    --cpu-durations=N        print the N tests that used the most CPU, with their wall-clock time
    --cpu-durations-log=FILE append one "nodeid<TAB>cpu seconds<TAB>wall seconds" line per test

A daemon a test starts and leaves running (a harness API server) is not counted; a fixture's
cost lands on the first test that uses it, as in pytest's own --durations.
"""

from __future__ import annotations

import resource
import time

import pytest


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def pytest_addoption(parser):
    group = parser.getgroup("cpu durations")
    group.addoption(
        "--cpu-durations", type=int, default=0, metavar="N", help="show the N tests that used the most CPU"
    )
    group.addoption(
        "--cpu-durations-log", default=None, metavar="FILE", help="append each test's CPU and wall seconds"
    )


class CpuDurations:
    def __init__(self, count: int, log: str | None):
        self.count = count
        self.log = log
        self.costs: list[tuple[str, float, float]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        cpu, wall = _cpu_seconds(), time.monotonic()
        yield
        self.costs.append((item.nodeid, _cpu_seconds() - cpu, time.monotonic() - wall))

    def pytest_sessionfinish(self, session):
        if self.log and self.costs:
            with open(self.log, "a", encoding="utf-8") as out:
                out.writelines("%s\t%.2f\t%.2f\n" % cost for cost in self.costs)

    def pytest_terminal_summary(self, terminalreporter):
        if not self.count or not self.costs:
            return
        total = sum(cpu for _nodeid, cpu, _wall in self.costs)
        terminalreporter.write_sep(
            "=",
            "most CPU: %d of %d tests (all: %.0f CPU s)"
            % (min(self.count, len(self.costs)), len(self.costs), total),
        )
        for nodeid, cpu, wall in sorted(self.costs, key=lambda cost: -cost[1])[: self.count]:
            terminalreporter.write_line("%8.1f s cpu %8.1f s wall  %s" % (cpu, wall, nodeid))


def pytest_configure(config):
    count = config.getoption("--cpu-durations")
    log = config.getoption("--cpu-durations-log")
    if count or log:
        config.pluginmanager.register(CpuDurations(count, log), "cpu-durations-reporter")

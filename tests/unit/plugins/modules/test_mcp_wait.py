"""mcp_wait: polls until every pool has rolled out, fails at the deadline with conditions."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils import k8s_client
from ansible_collections.gpuops.training.plugins.modules import mcp_wait

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "mcp"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


class FakeApiException(Exception):
    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@pytest.fixture
def pools_served(monkeypatch):
    """Serve a sequence of pool states per pool name; the last one repeats."""
    served = {}
    reads = []

    def read_pool(_custom_objects, name):
        reads.append(name)
        states = served.get(name)
        if states is None:
            raise FakeApiException(404, "Not Found")
        return states.pop(0) if len(states) > 1 else states[0]

    monkeypatch.setattr(k8s_client, "api_client", lambda kubeconfig, context, pool_size=None: object())
    monkeypatch.setattr(mcp_wait.client, "CustomObjectsApi", lambda api: object())
    monkeypatch.setattr(mcp_wait, "ApiException", FakeApiException)
    monkeypatch.setattr(mcp_wait, "read_pool", read_pool)
    # The shared poll loop sleeps between reads.
    monkeypatch.setattr(k8s_client.time, "sleep", lambda seconds: None)
    return served, reads


def test_waits_through_the_stale_updated_state_until_done(run_module, pools_served):
    served, reads = pools_served
    served["worker"] = [load("just-applied-still-old-render.yaml"), load("updating.yaml"), load("done.yaml")]
    run = run_module(
        mcp_wait.main,
        {
            "pools": ["worker"],
            "machine_configs": ["99-worker-crio-ulimits"],
            "timeout": 60,
            "poll_interval": 1,
        },
    )
    assert run.exit_code == 0, run.result
    assert run.result["changed"] is False
    assert run.result["pools"][0]["done"] is True
    assert reads == ["worker"] * 3


def test_pool_machine_configs_apply_to_their_pool_only(run_module, pools_served):
    served, _reads = pools_served
    served["worker"] = [load("done.yaml")]
    gpu = load("done.yaml")
    gpu["metadata"]["name"] = "gpu"
    served["gpu"] = [gpu]
    run = run_module(
        mcp_wait.main,
        {
            "pools": ["worker", "gpu"],
            "pool_machine_configs": {"worker": ["99-worker-crio-ulimits"]},
            "timeout": 0,
        },
    )
    assert run.exit_code == 0, run.result


def test_timeout_lists_the_conditions(run_module, pools_served):
    served, _reads = pools_served
    served["worker"] = [load("degraded.yaml")]
    run = run_module(
        mcp_wait.main, {"pools": ["worker"], "machine_configs": ["99-worker-crio-ulimits"], "timeout": 0}
    )
    assert run.failed
    assert run.result["msg"].startswith("MachineConfigPool worker did not finish rolling out within 0s: ")
    assert "degradedMachineCount is 1" in run.result["msg"]
    assert "Degraded=True (1 nodes are reporting degraded status on sync" in run.result["msg"]
    assert run.result["pools"][0]["degraded"] is True


def test_previous_rendered_keeps_waiting_on_the_old_render(run_module, pools_served):
    served, _reads = pools_served
    served["worker"] = [load("just-applied-still-old-render.yaml")]
    run = run_module(
        mcp_wait.main,
        {
            "pools": ["worker"],
            "previous_rendered": {"worker": "rendered-worker-0f3a9c1e2b4d5a6978c0d1e2f3a4b5c6"},
            "timeout": 0,
        },
    )
    assert run.failed
    assert "the one from before the change" in run.result["msg"]


def test_missing_pool_fails_at_once(run_module, pools_served):
    run = run_module(mcp_wait.main, {"pools": ["gpu"], "timeout": 600})
    assert run.failed
    assert run.result["msg"] == "MachineConfigPool gpu not found"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"pools": []}, "pools must name at least one MachineConfigPool"),
        (
            {"pools": ["worker"], "poll_interval": 0},
            "timeout must be 0 or more and poll_interval at least 1 second",
        ),
        (
            {"pools": ["worker"], "pool_machine_configs": {"worker": "99-x"}},
            "pool_machine_configs[worker] must be a list",
        ),
    ],
)
def test_bad_arguments(run_module, pools_served, args, message):
    run = run_module(mcp_wait.main, args)
    assert run.failed
    assert run.result["msg"].startswith(message)


def test_check_mode_reads_the_same(run_module, pools_served):
    served, _reads = pools_served
    served["worker"] = [load("done.yaml")]
    run = run_module(mcp_wait.main, {"pools": ["worker"], "timeout": 0}, check_mode=True)
    assert run.exit_code == 0

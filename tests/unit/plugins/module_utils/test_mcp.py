"""The MachineConfigPool rollout predicate on recorded pool states (tests/unit/fixtures/mcp)."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils.mcp import (
    conditions_summary,
    pool_rollout,
    timeout_message,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "mcp"
NEW_MC = "99-worker-crio-ulimits"
OLD_RENDER = "rendered-worker-0f3a9c1e2b4d5a6978c0d1e2f3a4b5c6"
NEW_RENDER = "rendered-worker-7d1e4b2a9c3f5e6d8b0a1c2e3f4d5b6a"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


def test_done_pool_has_rolled_out():
    verdict = pool_rollout(load("done.yaml"), [NEW_MC], previous_rendered=OLD_RENDER)
    assert verdict["done"] is True
    assert verdict["pending"] == []
    assert verdict["degraded"] is False
    assert verdict["conditions"].startswith("RenderDegraded=False, Updated=True (All nodes are updated")


def test_just_applied_pool_is_not_done_although_it_says_updated():
    pool = load("just-applied-still-old-render.yaml")
    # The trap: a wait on the Updated condition alone would pass here.
    assert "Updated=True" in conditions_summary(pool)
    verdict = pool_rollout(pool, [NEW_MC])
    assert verdict["done"] is False
    assert verdict["pending"] == [
        "rendered configuration %r does not include MachineConfig %s yet" % (OLD_RENDER, NEW_MC)
    ]


def test_changed_content_is_caught_by_the_previous_render():
    # Same MachineConfig name, new content: its name is already in source, only the
    # rendered name tells the old render from the new one.
    pool = load("just-applied-still-old-render.yaml")
    for key in ("spec", "status"):
        pool[key]["configuration"]["source"].append({"kind": "MachineConfig", "name": NEW_MC})
    assert pool_rollout(pool, [NEW_MC])["done"] is True
    verdict = pool_rollout(pool, [NEW_MC], previous_rendered=OLD_RENDER)
    assert verdict["done"] is False
    assert verdict["pending"] == [
        "rendered configuration is still %r, the one from before the change" % OLD_RENDER
    ]


def test_updating_pool_lists_every_unmet_check():
    verdict = pool_rollout(load("updating.yaml"), [NEW_MC])
    assert verdict["done"] is False
    assert verdict["degraded"] is False
    assert verdict["pending"] == [
        "nodes run rendered configuration %r, the pool wants %r" % (OLD_RENDER, NEW_RENDER),
        "rendered configuration %r does not include MachineConfig %s yet" % (OLD_RENDER, NEW_MC),
        "updatedMachineCount 1 of machineCount 3",
        "condition Updated is False, want True",
        "condition Updating is True, want False",
    ]


def test_degraded_pool_is_reported_degraded_with_its_message():
    pool = load("degraded.yaml")
    verdict = pool_rollout(pool, [NEW_MC])
    assert verdict["done"] is False
    assert verdict["degraded"] is True
    assert "degradedMachineCount is 1" in verdict["pending"]
    assert "condition Degraded is True, want False" in verdict["pending"]
    assert (
        "Degraded=True (1 nodes are reporting degraded status on sync: "
        'Node worker-1 is reporting: "failed to drain' in verdict["conditions"]
    )


def _break(pool, path, value):
    target = pool
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value


def _set_condition(pool, condition_type, status):
    for condition in pool["status"]["conditions"]:
        if condition["type"] == condition_type:
            condition["status"] = status


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (("status", "observedGeneration"), 3, "observedGeneration 3 has not caught up with generation 4"),
        (("status", "observedGeneration"), KeyError, "observedGeneration None has not caught up"),
        (("status", "configuration", "name"), OLD_RENDER, "nodes run rendered configuration"),
        (("spec", "configuration"), KeyError, "spec.configuration.name is empty"),
        (("status", "updatedMachineCount"), 2, "updatedMachineCount 2 of machineCount 3"),
        (("status", "machineCount"), KeyError, "updatedMachineCount 3 of machineCount None"),
        (("status", "degradedMachineCount"), 1, "degradedMachineCount is 1"),
        (("status", "degradedMachineCount"), KeyError, "degradedMachineCount is None"),
        (("status", "conditions"), [], "condition Updated is missing, want True"),
    ],
)
def test_each_field_alone_keeps_the_pool_pending(path, value, reason):
    pool = copy.deepcopy(load("done.yaml"))
    _break(pool, path, value)
    verdict = pool_rollout(pool, [NEW_MC])
    assert verdict["done"] is False
    assert any(reason in line for line in verdict["pending"]), verdict["pending"]


@pytest.mark.parametrize(
    ("condition_type", "status"), [("Updated", "False"), ("Updating", "True"), ("Degraded", "True")]
)
def test_each_condition_alone_keeps_the_pool_pending(condition_type, status):
    pool = copy.deepcopy(load("done.yaml"))
    _set_condition(pool, condition_type, status)
    verdict = pool_rollout(pool, [NEW_MC])
    assert verdict["pending"] == [
        "condition %s is %s, want %s" % (condition_type, status, "False" if status == "True" else "True")
    ]


def test_removed_machine_config_must_leave_the_render():
    verdict = pool_rollout(load("done.yaml"), removed_machine_configs=[NEW_MC])
    assert verdict["done"] is False
    assert "still includes removed MachineConfig %s" % NEW_MC in verdict["pending"][0]
    assert pool_rollout(load("just-applied-still-old-render.yaml"), removed_machine_configs=[NEW_MC])["done"]


def test_timeout_message_names_each_pending_pool_with_its_conditions():
    verdicts = [pool_rollout(load("done.yaml"), [NEW_MC]), pool_rollout(load("degraded.yaml"), [NEW_MC])]
    verdicts[1]["name"] = "gpu"
    message = timeout_message(verdicts, 600)
    assert message.count("\n") == 0
    assert message.startswith("MachineConfigPool gpu did not finish rolling out within 600s: nodes run")
    assert "conditions: RenderDegraded=False, Updated=False, Updating=True (All nodes are updating" in message


def test_empty_pool_is_pending_not_an_error():
    verdict = pool_rollout({"metadata": {"name": "fresh"}})
    assert verdict["done"] is False
    assert verdict["conditions"] == "no conditions reported"

"""playbooks/provision_nodes.yml refuses bad rolling settings on the controller, before it
touches a node: each fails naming the variable and what was expected."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from playbook_runner import DEV_COLLECTIONS, ansible_playbook  # noqa: E402


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"node_rollout_serial": "abc"}, "node_rollout_serial must be a count of nodes (2), a percentage"),
        ({"node_rollout_serial": "0"}, "node_rollout_serial must be a count of nodes (2), a percentage"),
        ({"node_rollout_serial": "101%"}, "node_rollout_serial must be a count of nodes (2), a percentage"),
        (
            {"node_rollout_serial": [1, "half"]},
            "node_rollout_serial must be a count of nodes (2), a percentage",
        ),
        ({"node_rollout_serial": []}, "node_rollout_serial must be a count of nodes (2), a percentage"),
        (
            {"node_rollout_max_fail_percentage": 150},
            "node_rollout_max_fail_percentage must be a whole percentage",
        ),
        ({"node_rollout_drain_timeout_s": 0}, "node_rollout_drain_timeout_s must be a positive number"),
    ],
)
def test_bad_rolling_settings_fail_before_any_node_is_touched(tmp_path, settings, message):
    # A node nobody can reach: the run must end before it tries.
    inventory = tmp_path / "fleet.json"
    inventory.write_text(
        json.dumps({"crio_nodes": {"hosts": {"unreachable-node": {"ansible_host": "192.0.2.1"}}}})
    )
    run = ansible_playbook(
        "-i", str(inventory), "playbooks/provision_nodes.yml", "--extra-vars", json.dumps(settings),
        collections_path=DEV_COLLECTIONS, timeout=120,
    )  # fmt: skip
    assert run.rc != 0, run
    assert message in " ".join(run.output.split()), run
    assert "unreachable-node" not in run.output, run

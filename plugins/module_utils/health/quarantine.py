# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quarantine the Kubernetes nodes of a health pass: read them, plan within the cap
(fleet.plan_quarantine) and patch each node that changes - its taint and annotations only,
at the resourceVersion read, so a node changed meanwhile is read again, never overwritten.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.training.plugins.module_utils.health import fleet
from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    ApiException,
    client,
    connection_error_message,
)

# A node changed between the read and the patch (a kubelet's status update does not change
# metadata, but another controller's label or taint does) is read again this many times.
ATTEMPTS = 3
MERGE_PATCH = "application/merge-patch+json"


class QuarantineError(Exception):
    """A read or patch the API server refused; the message names the node."""


def _status_message(error):
    try:
        return json.loads(error.body or "{}").get("message") or ""
    except (TypeError, ValueError):
        return ""


def _refused(what, error):
    message = _status_message(error)
    return "cannot %s: %s %s%s" % (what, error.status, error.reason, (": " + message) if message else "")


def _plain(response):
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def read_node(api, name):
    """The node as a dict, or None when there is no such node."""
    try:
        response = client.CoreV1Api(api).read_node(name, _preload_content=False)
    except ApiException as error:
        if error.status == 404:
            return None
        raise QuarantineError(_refused("read node %s" % name, error)) from error
    return _plain(response)


def patch_node(api, name, body):
    """Merge-patch the node; ApiException as the server answers (409 when it changed)."""
    return _plain(
        client.CoreV1Api(api).patch_node(name, body, _content_type=MERGE_PATCH, _preload_content=False)
    )


def _apply(api, row, entry, node_object, classes, run_id):
    """Patch one node for its planned action; the action done (another one when the node
    changed meanwhile and no longer needs it, ``missing`` when it is gone)."""
    action = row["action"]
    for attempt in range(ATTEMPTS):
        body = fleet.node_patch(action, node_object, fleet.fenced_findings(entry, classes), run_id)
        try:
            patch_node(api, row["node"], body)
            return action
        except ApiException as error:
            if error.status == 404:
                return fleet.MISSING
            if error.status != 409 or attempt == ATTEMPTS - 1:
                raise QuarantineError(
                    _refused("patch node %s (%s)" % (row["node"], action), error)
                ) from error
        node_object = read_node(api, row["node"])
        again = fleet.node_action(entry, node_object, classes)
        # The plan's cap stands: a node is only ever quarantined as planned, never beyond it.
        if again not in fleet.CHANGING or (again == fleet.QUARANTINE and action != fleet.QUARANTINE):
            return again
        action = again
    return action


def run_quarantine(params, api, check_mode):
    """Read the nodes of ``params['nodes']``, plan, and patch unless in check mode. The plan
    (fleet.plan_quarantine) with ``changed`` and the node names of each outcome."""
    classes = params["classes"]
    entries = fleet.entries_of(params["nodes"])
    node_objects = {entry["node"]: read_node(api, entry["node"]) for entry in entries}
    plan = fleet.plan_quarantine(entries, node_objects, classes, params["max_percent"], check_mode)
    by_name = {entry["node"]: entry for entry in entries}
    changing = [row for row in plan["nodes"] if row["action"] in fleet.CHANGING]
    if not check_mode:
        done_any = False
        for row in changing:
            done = _apply(
                api, row, by_name[row["node"]], node_objects[row["node"]], classes, params["run_id"]
            )
            if done != row["action"]:
                row["planned"], row["action"] = row["action"], done
            done_any = done_any or done in fleet.CHANGING
        if any("planned" in row for row in plan["nodes"]):
            plan["message"] = fleet.plan_message(plan, classes)
        changed = done_any
    else:
        changed = bool(changing)
    plan.update(changed=changed, check_mode=check_mode)
    for key, actions in (
        ("quarantined", (fleet.QUARANTINE,)),
        ("released", (fleet.RELEASE,)),
        ("still_quarantined", fleet.STAYING),
        ("left", (fleet.LEFT,)),
    ):
        plan[key] = [row["node"] for row in plan["nodes"] if row["action"] in actions]
    return plan


def run_module(module, connect):
    """The node_health_quarantine module: check the arguments, plan, patch (not in check mode), exit."""
    params = module.params
    problem = (
        fleet.classes_problem("classes", params["classes"])
        or fleet.percent_problem("max_percent", params["max_percent"])
        or ("" if params["run_id"].strip() else "run_id must name the health pass, got %r" % params["run_id"])
    )
    if problem:
        module.fail_json(msg=problem)
    try:
        fleet.entries_of(params["nodes"])
    except fleet.HealthFleetError as error:
        module.fail_json(msg=str(error))
    api = connect(module)
    try:
        plan = run_quarantine(params, api, module.check_mode)
    except (QuarantineError, fleet.HealthFleetError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # no answer (connection refused, TLS, DNS)
        module.fail_json(
            msg=connection_error_message(error, api, params["kubeconfig"], "the nodes to quarantine")
        )
    module.exit_json(**plan)

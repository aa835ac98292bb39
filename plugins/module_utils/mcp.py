# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""When has a MachineConfigPool really rolled out a MachineConfig?

Right after a MachineConfig is applied the pool still says Updated=True: the
machine-config operator has not rendered the new configuration yet. A wait on one
condition passes too early. A pool counts as rolled out only when every one of these holds:

- ``status.observedGeneration`` has caught up with ``metadata.generation``;
- the rendered configuration the nodes run (``status.configuration.name``) is the one
  the controller wants (``spec.configuration.name``);
- that rendered configuration lists each expected MachineConfig in
  ``status.configuration.source`` (and none of those being removed);
- when the caller saw another rendered configuration before its change, the pool has
  moved on from it (a changed MachineConfig keeps its name in ``source``; only the
  rendered name, a hash of the merged content, tells the old render from the new);
- ``updatedMachineCount == machineCount`` and ``degradedMachineCount == 0``;
- the conditions Updated=True, Updating=False and Degraded=False.

Pure functions over the pool as a dict (what the API returns): the module polls, the unit
tests feed YAML fixtures.
"""

from __future__ import annotations

EXPECTED_CONDITIONS = (("Updated", "True"), ("Updating", "False"), ("Degraded", "False"))


def _conditions(pool):
    status = pool.get("status") or {}
    return {
        condition.get("type"): condition
        for condition in status.get("conditions") or []
        if isinstance(condition, dict)
    }


def _source_names(configuration):
    return [
        entry.get("name") for entry in (configuration or {}).get("source") or [] if isinstance(entry, dict)
    ]


def conditions_summary(pool):
    """``Type=Status (Reason: message)`` for every condition, in the order the pool lists them."""
    parts = []
    status = pool.get("status") or {}
    for condition in status.get("conditions") or []:
        if not isinstance(condition, dict):
            continue
        text = "%s=%s" % (condition.get("type"), condition.get("status"))
        detail = ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)
        if detail:
            text += " (%s)" % detail
        parts.append(text)
    return ", ".join(parts) if parts else "no conditions reported"


def pool_rollout(pool, machine_configs=(), removed_machine_configs=(), previous_rendered=""):
    """Judge a pool; return a dict with ``done`` and ``pending`` (one reason per unmet check)."""
    metadata = pool.get("metadata") or {}
    spec = pool.get("spec") or {}
    status = pool.get("status") or {}
    wanted = (spec.get("configuration") or {}).get("name") or ""
    current = (status.get("configuration") or {}).get("name") or ""
    sources = _source_names(status.get("configuration"))
    pending = []

    generation = metadata.get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and (observed is None or observed < generation):
        pending.append("observedGeneration %s has not caught up with generation %s" % (observed, generation))
    if not wanted:
        pending.append("spec.configuration.name is empty: no configuration rendered yet")
    elif current != wanted:
        pending.append("nodes run rendered configuration %r, the pool wants %r" % (current or None, wanted))
    if previous_rendered and current == previous_rendered:
        pending.append(
            "rendered configuration is still %r, the one from before the change" % previous_rendered
        )
    missing = [name for name in machine_configs if name not in sources]
    if missing:
        pending.append(
            "rendered configuration %r does not include MachineConfig %s yet"
            % (current or None, ", ".join(missing))
        )
    lingering = [name for name in removed_machine_configs if name in sources]
    if lingering:
        pending.append(
            "rendered configuration %r still includes removed MachineConfig %s"
            % (current or None, ", ".join(lingering))
        )

    machine_count = status.get("machineCount")
    updated_count = status.get("updatedMachineCount")
    degraded_count = status.get("degradedMachineCount")
    if machine_count is None or updated_count != machine_count:
        pending.append("updatedMachineCount %s of machineCount %s" % (updated_count, machine_count))
    if degraded_count != 0:
        pending.append("degradedMachineCount is %s" % degraded_count)

    conditions = _conditions(pool)
    for condition_type, expected in EXPECTED_CONDITIONS:
        actual = (conditions.get(condition_type) or {}).get("status")
        if actual != expected:
            pending.append("condition %s is %s, want %s" % (condition_type, actual or "missing", expected))

    degraded = (conditions.get("Degraded") or {}).get("status") == "True" or bool(degraded_count)
    return {
        "name": metadata.get("name"),
        "done": not pending,
        "degraded": degraded,
        "pending": pending,
        "rendered_configuration": current,
        "wanted_configuration": wanted,
        "source": sources,
        "machine_count": machine_count,
        "updated_machine_count": updated_count,
        "degraded_machine_count": degraded_count,
        "conditions": conditions_summary(pool),
    }


def timeout_message(verdicts, timeout):
    """One message for every pool that did not roll out in time, with its conditions."""
    lines = []
    for verdict in verdicts:
        if verdict["done"]:
            continue
        lines.append(
            "MachineConfigPool %s did not finish rolling out within %ss: %s; conditions: %s"
            % (verdict["name"], timeout, "; ".join(verdict["pending"]), verdict["conditions"])
        )
    return "\n".join(lines)

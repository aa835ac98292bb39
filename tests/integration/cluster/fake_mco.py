"""A stand-in for OpenShift's machine-config operator, for the test harness.

The harness has the MachineConfig and MachineConfigPool CRDs but no operator, so nothing
would ever render a configuration or update a pool. This loop plays the two controllers
the wait depends on, with the same observable order of events as the real ones:

1. render controller: after ``--render-delay`` seconds it notices that the MachineConfigs
   selected by a pool changed, creates ``rendered-<pool>-<hash>`` and points the pool's
   ``spec.configuration`` at it (a spec change: ``metadata.generation`` goes up);
2. node controller: it marks the pool Updating (old ``status.configuration``, no machine
   updated) and after ``--update-delay`` seconds reports the new configuration on every
   machine, Updated=True, with ``observedGeneration`` caught up.

Until step 1 happens the pool still says Updated=True with the old configuration: exactly
the window in which a wait on the Updated condition alone passes too early.

Only pools labelled ``gpuops.test/fake-mco: "true"`` are managed, so tests that set a
pool's status by hand can share the cluster with a running stand-in.
A pool annotated ``gpuops.test/mco-stuck: "true"`` is rendered but never finishes updating;
``gpuops.test/mco-degraded: "<message>"`` makes it Degraded with that message.

Usage: python fake_mco.py --kubeconfig PATH [--pidfile PATH] [--lifetime SECONDS]
It exits after ``--lifetime`` seconds, on SIGTERM, or when its pidfile is removed.
Importable: ``FakeMachineConfigOperator(api_client).step()`` runs one reconcile pass.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

GROUP = "machineconfiguration.openshift.io"
VERSION = "v1"
ROLE_LABEL = "machineconfiguration.openshift.io/role"
STUCK_ANNOTATION = "gpuops.test/mco-stuck"
DEGRADED_ANNOTATION = "gpuops.test/mco-degraded"
MANAGED_LABEL_SELECTOR = "gpuops.test/fake-mco=true"
GENERATED_BY = "machineconfiguration.openshift.io/generated-by-controller-version"


def _now():
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(condition_type, status, reason="", message=""):
    return {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": _now(),
    }


def selected_machine_configs(pool, machine_configs):
    """MachineConfigs the pool's machineConfigSelector picks (matchLabels and In expressions)."""
    selector = (pool.get("spec") or {}).get("machineConfigSelector") or {}
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        match_labels = {ROLE_LABEL: pool["metadata"]["name"]}
    chosen = []
    for machine_config in machine_configs:
        name = machine_config["metadata"]["name"]
        labels = machine_config["metadata"].get("labels") or {}
        if name.startswith("rendered-"):
            continue
        if any(labels.get(key) != value for key, value in match_labels.items()):
            continue
        if any(
            expression.get("operator") == "In"
            and labels.get(expression.get("key")) not in expression["values"]
            for expression in expressions
        ):
            continue
        chosen.append(machine_config)
    return sorted(chosen, key=lambda machine_config: machine_config["metadata"]["name"])


def rendered_name(pool_name, machine_configs):
    """``rendered-<pool>-<hash of the merged specs>``, as the render controller names them."""
    specs = [[mc["metadata"]["name"], mc.get("spec") or {}] for mc in machine_configs]
    digest = hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()[:32]
    return "rendered-%s-%s" % (pool_name, digest)


class FakeMachineConfigOperator:
    def __init__(self, api_client, render_delay=2.0, update_delay=3.0, machine_count=2):
        self.api = client.CustomObjectsApi(api_client)
        self.render_delay = render_delay
        self.update_delay = update_delay
        self.machine_count = machine_count
        # pool name -> (rendered name, monotonic time first seen) before it is rendered
        self._noticed: dict[str, tuple[str, float]] = {}

    def _list(self, plural, label_selector=""):
        return self.api.list_cluster_custom_object(GROUP, VERSION, plural, label_selector=label_selector)[
            "items"
        ]

    def _patch_status(self, name, status):
        self.api.patch_cluster_custom_object_status(
            GROUP, VERSION, "machineconfigpools", name, {"status": status}
        )

    def step(self):
        machine_configs = self._list("machineconfigs")
        for pool in self._list("machineconfigpools", MANAGED_LABEL_SELECTOR):
            self._reconcile(pool, machine_configs)

    def _reconcile(self, pool, machine_configs):
        name = pool["metadata"]["name"]
        annotations = pool["metadata"].get("annotations") or {}
        chosen = selected_machine_configs(pool, machine_configs)
        wanted = rendered_name(name, chosen)
        spec_configuration = (pool.get("spec") or {}).get("configuration") or {}
        status = pool.get("status") or {}
        now = time.monotonic()

        if spec_configuration.get("name") != wanted:
            noticed = self._noticed.get(name)
            if noticed is None or noticed[0] != wanted:
                self._noticed[name] = (wanted, now)
                return
            if now - noticed[1] < self.render_delay:
                return
            self._render(pool, wanted, chosen)
            return

        status_configuration = status.get("configuration") or {}
        if status_configuration.get("name") == wanted and status.get("observedGeneration") == pool[
            "metadata"
        ].get("generation"):
            return
        # A pool rendered before this process started counts as rendered long ago.
        rendered_at = self._noticed.get(name, (wanted, now - self.update_delay))[1]
        degraded_message = annotations.get(DEGRADED_ANNOTATION)
        if degraded_message:
            self._patch_status(name, self._updating_status(pool, degraded_message))
        elif annotations.get(STUCK_ANNOTATION) == "true" or now - rendered_at < self.update_delay:
            self._patch_status(name, self._updating_status(pool))
        else:
            self._patch_status(name, self._done_status(pool))
            self._noticed.pop(name, None)

    def _render(self, pool, wanted, chosen):
        name = pool["metadata"]["name"]
        source = [
            {
                "apiVersion": "%s/%s" % (GROUP, VERSION),
                "kind": "MachineConfig",
                "name": mc["metadata"]["name"],
            }
            for mc in chosen
        ]
        files = [
            entry
            for mc in chosen
            for entry in ((mc.get("spec") or {}).get("config") or {}).get("storage", {}).get("files", [])
        ]
        rendered = {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "MachineConfig",
            # Labelled like the pools it serves so a test can delete both with one selector.
            "metadata": {
                "name": wanted,
                "annotations": {GENERATED_BY: "fake-mco"},
                "labels": {"gpuops.test/fake-mco": "true"},
            },
            "spec": {"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": files}}},
        }
        try:
            self.api.create_cluster_custom_object(GROUP, VERSION, "machineconfigs", rendered)
        except ApiException as error:
            if error.status != 409:
                raise
        self.api.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "machineconfigpools",
            name,
            {"spec": {"configuration": {"name": wanted, "source": source}}},
        )
        self._noticed[name] = (wanted, time.monotonic())

    def _updating_status(self, pool, degraded_message=""):
        old = (pool.get("status") or {}).get("configuration") or {}
        return {
            "observedGeneration": pool["metadata"].get("generation"),
            "configuration": old or None,
            "machineCount": self.machine_count,
            "updatedMachineCount": 0,
            "readyMachineCount": 0,
            "unavailableMachineCount": 1,
            "degradedMachineCount": 1 if degraded_message else 0,
            "conditions": [
                _condition("Updated", "False"),
                _condition(
                    "Updating",
                    "True",
                    "",
                    "All nodes are updating to %s" % pool["spec"]["configuration"]["name"],
                ),
                _condition(
                    "Degraded",
                    "True" if degraded_message else "False",
                    "NodeDegraded" if degraded_message else "",
                    degraded_message,
                ),
            ],
        }

    def _done_status(self, pool):
        configuration = pool["spec"]["configuration"]
        return {
            "observedGeneration": pool["metadata"].get("generation"),
            "configuration": configuration,
            "machineCount": self.machine_count,
            "updatedMachineCount": self.machine_count,
            "readyMachineCount": self.machine_count,
            "unavailableMachineCount": 0,
            "degradedMachineCount": 0,
            "conditions": [
                _condition("Updated", "True", "", "All nodes are updated with %s" % configuration["name"]),
                _condition("Updating", "False"),
                _condition("Degraded", "False"),
            ],
        }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--pidfile")
    parser.add_argument("--lifetime", type=float, default=600)
    parser.add_argument("--render-delay", type=float, default=2.0)
    parser.add_argument("--update-delay", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)

    pidfile = Path(args.pidfile) if args.pidfile else None
    if pidfile:
        pidfile.write_text("%d\n" % os.getpid())
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    operator = FakeMachineConfigOperator(
        config.new_client_from_config(config_file=args.kubeconfig), args.render_delay, args.update_delay
    )
    deadline = time.monotonic() + args.lifetime
    while time.monotonic() < deadline and (pidfile is None or pidfile.exists()):
        try:
            operator.step()
        except ApiException as error:  # a conflict or a deleted pool: the next pass retries
            print("fake-mco: %s %s" % (error.status, error.reason), file=sys.stderr)
        time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())

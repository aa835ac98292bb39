"""A stand-in for the NVIDIA GPU Operator (and OLM's install step), for the test harness.

The harness has the upstream ClusterPolicy CRD, and the gpu_operator role installs the
operator's Deployment (kwok "runs" its pod), but nothing reconciles a ClusterPolicy, so
its status would never say ready. This loop writes the status the way the operator does
(controllers/clusterpolicy_controller.go, internal/conditions):

1. a ClusterPolicy it has not seen, or whose spec changed (``metadata.generation``), is
   set to ``state: notReady`` with Ready=False and Error=True (OperandNotReady:
   "ClusterPolicy is not ready, states not ready: [...]");
2. after ``--ready-delay`` seconds it becomes ``state: ready`` with Ready=True
   (Reconciled) and Error=False;
3. like the operator, only the oldest ClusterPolicy is acted on: any other is set to
   ``state: ignored``.

A ClusterPolicy annotated ``gpuops.test/gpu-operator-stuck: "<states>"`` stays notReady
with ``[<states>]`` as the states not ready.

With ``--olm`` it also plays OLM for Subscriptions (when the OLM CRDs are installed): a
Subscription without ``status.installedCSV`` gets a ClusterServiceVersion
``<package>.v<--csv-version>`` in its namespace, in phase Succeeded, the operator's
Deployment ``gpu-operator`` its install strategy names (kwok runs its pod), and the
Subscription's status points at the ClusterServiceVersion.

Usage: python fake_gpu_operator.py --kubeconfig PATH [--pidfile PATH] [--lifetime SECONDS]
       [--ready-delay SECONDS] [--olm]
It exits after ``--lifetime`` seconds, on SIGTERM, or when its pidfile is removed.
Importable: ``FakeGpuOperator(api_client).step()`` runs one reconcile pass.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "nvidia.com", "v1", "clusterpolicies"
OLM_GROUP, OLM_VERSION = "operators.coreos.com", "v1alpha1"
STUCK_ANNOTATION = "gpuops.test/gpu-operator-stuck"
STATES = ["state-driver", "state-container-toolkit", "state-operator-validation", "state-device-plugin"]


def _now():
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(condition_type, status, reason, message=""):
    return {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": _now(),
    }


def not_ready_status(states, namespace):
    message = "ClusterPolicy is not ready, states not ready: [%s]" % " ".join(states)
    return {
        "state": "notReady",
        "namespace": namespace,
        "conditions": [
            _condition("Ready", "False", "Error"),
            _condition("Error", "True", "OperandNotReady", message),
        ],
    }


def ready_status(namespace):
    return {
        "state": "ready",
        "namespace": namespace,
        "conditions": [
            _condition(
                "Ready",
                "True",
                "Reconciled",
                "ClusterPolicy is ready as all resources have been successfully reconciled",
            ),
            _condition("Error", "False", "Ready"),
        ],
    }


def operator_deployment_spec(version):
    labels = {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator"}
    return {
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "gpu-operator",
                        "image": "nvidia/gpu-operator:v%s" % version,
                        "command": ["gpu-operator"],
                    }
                ]
            },
        },
    }


class FakeGpuOperator:
    def __init__(
        self, api_client, ready_delay=3.0, namespace="gpu-operator", olm=False, csv_version="24.3.0"
    ):
        self.api = client.CustomObjectsApi(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.ready_delay = ready_delay
        self.namespace = namespace
        self.olm = olm
        self.csv_version = csv_version
        # ClusterPolicy name -> (generation, monotonic time it was set notReady)
        self._reconciling: dict[str, tuple[int, float]] = {}
        self._ready_generation: dict[str, int] = {}

    def _patch_status(self, name, status):
        self.api.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, {"status": status})

    def step(self):
        if self.olm:
            self._play_olm()
        policies = self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        policies.sort(key=lambda item: (item["metadata"]["creationTimestamp"], item["metadata"]["name"]))
        for index, policy in enumerate(policies):
            self._reconcile(policy, first=index == 0)

    def _reconcile(self, policy, first):
        name = policy["metadata"]["name"]
        generation = policy["metadata"].get("generation", 1)
        state = (policy.get("status") or {}).get("state")
        if not first:
            if state != "ignored":
                self._patch_status(name, {"state": "ignored", "namespace": self.namespace})
            return
        stuck = (policy["metadata"].get("annotations") or {}).get(STUCK_ANNOTATION)
        if stuck:
            if state != "notReady":
                self._patch_status(name, not_ready_status(stuck.split(), self.namespace))
            return
        if state == "ready" and self._ready_generation.get(name) in (generation, None):
            self._ready_generation[name] = generation
            return
        seen = self._reconciling.get(name)
        if seen is None or seen[0] != generation:
            self._reconciling[name] = (generation, time.monotonic())
            self._patch_status(name, not_ready_status(STATES, self.namespace))
        elif time.monotonic() - seen[1] >= self.ready_delay:
            self._patch_status(name, ready_status(self.namespace))
            self._ready_generation[name] = generation
            del self._reconciling[name]

    def _play_olm(self):
        try:
            subscriptions = self.api.list_cluster_custom_object(OLM_GROUP, OLM_VERSION, "subscriptions")[
                "items"
            ]
        except ApiException as error:
            if error.status == 404:  # OLM CRDs not installed
                return
            raise
        for subscription in subscriptions:
            if (subscription.get("status") or {}).get("installedCSV"):
                continue
            namespace = subscription["metadata"]["namespace"]
            csv_name = "%s.v%s" % (subscription["spec"]["name"], self.csv_version)
            deployment_spec = operator_deployment_spec(self.csv_version)
            csv = {
                "apiVersion": "%s/%s" % (OLM_GROUP, OLM_VERSION),
                "kind": "ClusterServiceVersion",
                "metadata": {"name": csv_name, "namespace": namespace},
                "spec": {
                    "displayName": "NVIDIA GPU Operator (stand-in)",
                    "version": self.csv_version,
                    "install": {
                        "strategy": "deployment",
                        "spec": {"deployments": [{"name": "gpu-operator", "spec": deployment_spec}]},
                    },
                },
            }
            try:
                self.apps.create_namespaced_deployment(
                    namespace,
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": "gpu-operator"},
                        "spec": deployment_spec,
                    },
                )
            except ApiException as error:
                if error.status != 409:
                    raise
            try:
                self.api.create_namespaced_custom_object(
                    OLM_GROUP, OLM_VERSION, namespace, "clusterserviceversions", csv
                )
            except ApiException as error:
                if error.status != 409:
                    raise
            self.api.patch_namespaced_custom_object_status(
                OLM_GROUP,
                OLM_VERSION,
                namespace,
                "clusterserviceversions",
                csv_name,
                {
                    "status": {
                        "phase": "Succeeded",
                        "reason": "InstallSucceeded",
                        "message": "install strategy completed",
                    }
                },
            )
            self.api.patch_namespaced_custom_object_status(
                OLM_GROUP,
                OLM_VERSION,
                namespace,
                "subscriptions",
                subscription["metadata"]["name"],
                {
                    "status": {
                        "installedCSV": csv_name,
                        "currentCSV": csv_name,
                        "state": "AtLatestKnown",
                        "lastUpdated": _now(),
                    }
                },
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description="Set ClusterPolicy status like the GPU Operator does.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--pidfile")
    parser.add_argument("--lifetime", type=float, default=600.0)
    parser.add_argument("--ready-delay", type=float, default=3.0)
    parser.add_argument("--namespace", default="gpu-operator")
    parser.add_argument("--olm", action="store_true")
    args = parser.parse_args(argv)

    pidfile = Path(args.pidfile) if args.pidfile else None
    if pidfile:
        pidfile.write_text("%d\n" % os.getpid())
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(True))
    operator = FakeGpuOperator(
        config.new_client_from_config(config_file=args.kubeconfig),
        ready_delay=args.ready_delay,
        namespace=args.namespace,
        olm=args.olm,
    )
    deadline = time.monotonic() + args.lifetime
    while not stopping and time.monotonic() < deadline:
        if pidfile and not pidfile.exists():
            break
        try:
            operator.step()
        except (ApiException, OSError) as error:
            print("fake_gpu_operator: %s" % error, file=sys.stderr, flush=True)
        time.sleep(0.5)
    if pidfile and pidfile.exists():
        pidfile.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())

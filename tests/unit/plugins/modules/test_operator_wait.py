"""operator_wait: polls CRDs, Deployments, Subscriptions and ClusterPolicies until ready."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils import k8s_client
from ansible_collections.gpuops.training.plugins.modules import operator_wait

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "operators"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


class FakeApiException(Exception):
    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@pytest.fixture
def served(monkeypatch):
    """Serve a sequence of states per object; the last one repeats. Missing ones are 404."""
    states = {}
    reads = []

    def serve(key):
        reads.append(key)
        sequence = states.get(key)
        if sequence is None:
            raise FakeApiException(404, "Not Found")
        if isinstance(sequence, FakeApiException):
            raise sequence
        return sequence.pop(0) if len(sequence) > 1 else sequence[0]

    monkeypatch.setattr(k8s_client, "api_client", lambda kubeconfig, context, pool_size=None: object())
    monkeypatch.setattr(operator_wait, "ApiException", FakeApiException)
    monkeypatch.setattr(operator_wait, "read_crd", lambda api, name: serve(("crd", name)))
    monkeypatch.setattr(
        operator_wait, "read_deployment", lambda api, ns, name: serve(("deployment", ns, name))
    )
    monkeypatch.setattr(operator_wait, "list_pods", lambda api, ns, selector: serve(("pods", ns, selector)))
    monkeypatch.setattr(
        operator_wait, "read_subscription", lambda api, ns, name: serve(("subscription", ns, name))
    )
    monkeypatch.setattr(operator_wait, "read_csv", lambda api, ns, name: serve(("csv", ns, name)))
    monkeypatch.setattr(
        operator_wait, "read_cluster_policy", lambda api, name: serve(("clusterpolicy", name))
    )
    # The shared poll loop sleeps between reads.
    monkeypatch.setattr(k8s_client.time, "sleep", lambda seconds: None)
    return states, reads


SELECTOR = "control-plane=kubeflow-training-operator,app.kubernetes.io/part-of notin (other)"


def test_waits_until_the_crd_and_the_deployment_are_ready(run_module, served):
    states, reads = served
    unready_crd = load("crd-established.yaml")
    del unready_crd["status"]
    states[("crd", "pytorchjobs.kubeflow.org")] = [unready_crd, load("crd-established.yaml")]
    states[("deployment", "kubeflow", "training-operator")] = [
        load("deployment-unschedulable.yaml"),
        load("deployment-available.yaml"),
    ]
    states[("pods", "kubeflow", SELECTOR)] = [[load("pod-unschedulable.yaml")]]
    run = run_module(
        operator_wait.main,
        {"crds": ["pytorchjobs.kubeflow.org"], "deployments": ["kubeflow/training-operator"], "timeout": 60},
    )
    assert run.exit_code == 0, run.result
    assert run.result["changed"] is False
    assert [verdict["done"] for verdict in run.result["resources"]] == [True, True]
    # Pods are listed only while the Deployment is not available.
    assert reads.count(("pods", "kubeflow", SELECTOR)) == 1


def test_timeout_reports_the_unschedulable_pod(run_module, served):
    states, _reads = served
    states[("deployment", "kubeflow", "training-operator")] = [load("deployment-unschedulable.yaml")]
    states[("pods", "kubeflow", SELECTOR)] = [[load("pod-unschedulable.yaml")]]
    run = run_module(operator_wait.main, {"deployments": ["kubeflow/training-operator"], "timeout": 0})
    assert run.failed
    assert run.result["msg"].startswith("Deployment kubeflow/training-operator is not ready after 0s:")
    assert "didn't match Pod's node affinity/selector" in run.result["msg"]
    assert run.result["resources"][0]["pods"][0]["name"] == "training-operator-6f8d7c9b5-x2x7q"


def test_clusterpolicy_timeout_lists_state_and_conditions(run_module, served):
    states, _reads = served
    states[("clusterpolicy", "cluster-policy")] = [load("clusterpolicy-not-ready.yaml")]
    run = run_module(operator_wait.main, {"cluster_policies": ["cluster-policy"], "timeout": 0})
    assert run.failed
    assert run.result["msg"].startswith(
        "ClusterPolicy cluster-policy is not ready after 0s: state is notReady, want ready"
    )
    assert run.result["msg"].endswith(
        "; state: notReady; conditions: Ready=False (Error), "
        "Error=True (OperandNotReady: ClusterPolicy is not "
        "ready, states not ready: [state-driver state-operator-validation])"
    )


def test_clusterpolicy_becomes_ready(run_module, served):
    states, reads = served
    states[("clusterpolicy", "cluster-policy")] = [
        load("clusterpolicy-no-status.yaml"),
        load("clusterpolicy-not-ready.yaml"),
        load("clusterpolicy-ready.yaml"),
    ]
    run = run_module(
        operator_wait.main, {"cluster_policies": ["cluster-policy"], "timeout": 60, "poll_interval": 1}
    )
    assert run.exit_code == 0, run.result
    assert run.result["resources"][0]["state"] == "ready"
    assert reads.count(("clusterpolicy", "cluster-policy")) == 3


def test_ignored_clusterpolicy_fails_without_waiting(run_module, served):
    states, reads = served
    states[("clusterpolicy", "gpu-cluster-policy")] = [load("clusterpolicy-ignored.yaml")]
    run = run_module(operator_wait.main, {"cluster_policies": ["gpu-cluster-policy"], "timeout": 600})
    assert run.failed
    assert run.result["msg"].startswith(
        "ClusterPolicy gpu-cluster-policy will not become ready: state is ignored"
    )
    assert reads == [("clusterpolicy", "gpu-cluster-policy")]


def test_subscription_waits_for_its_csv(run_module, served):
    states, _reads = served
    states[("subscription", "nvidia-gpu-operator", "gpu-operator-certified")] = [
        load("subscription-manual-approval.yaml"),
        load("subscription-installed.yaml"),
    ]
    states[("csv", "nvidia-gpu-operator", "gpu-operator-certified.v24.3.0")] = [
        load("csv-installing.yaml"),
        load("csv-succeeded.yaml"),
    ]
    run = run_module(
        operator_wait.main, {"subscriptions": ["nvidia-gpu-operator/gpu-operator-certified"], "timeout": 60}
    )
    assert run.exit_code == 0, run.result
    assert run.result["resources"][0]["installed_csv"] == "gpu-operator-certified.v24.3.0"


def test_missing_objects_are_pending_not_fatal(run_module, served):
    run = run_module(
        operator_wait.main, {"crds": ["nvidiadrivers.nvidia.com"], "cluster_policies": ["x"], "timeout": 0}
    )
    assert run.failed
    assert run.result["msg"].splitlines() == [
        "CustomResourceDefinition nvidiadrivers.nvidia.com is not ready after 0s: not found; "
        "conditions: no conditions reported",
        "ClusterPolicy x is not ready after 0s: not found: nothing created it, or its CRD is not installed; "
        "conditions: no conditions reported",
    ]


def test_other_api_errors_end_the_wait(run_module, served):
    states, _reads = served
    states[("crd", "pytorchjobs.kubeflow.org")] = FakeApiException(403, "Forbidden")
    run = run_module(operator_wait.main, {"crds": ["pytorchjobs.kubeflow.org"], "timeout": 60})
    assert run.failed
    assert run.result["msg"] == "cannot read the objects to wait for: 403 Forbidden"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "name at least one of crds, deployments, subscriptions or cluster_policies"),
        (
            {"deployments": ["training-operator"]},
            "deployments must be given as namespace/name, got 'training-operator'",
        ),
        ({"subscriptions": ["a/b/c"]}, "subscriptions must be given as namespace/name, got 'a/b/c'"),
        (
            {"crds": ["x"], "poll_interval": 0},
            "timeout must be 0 or more and poll_interval at least 1 second",
        ),
    ],
)
def test_bad_arguments(run_module, served, args, message):
    run = run_module(operator_wait.main, args)
    assert run.failed
    assert run.result["msg"] == message


def test_check_mode_reads_the_same(run_module, served):
    states, _reads = served
    states[("crd", "pytorchjobs.kubeflow.org")] = [load("crd-established.yaml")]
    run = run_module(operator_wait.main, {"crds": ["pytorchjobs.kubeflow.org"]}, check_mode=True)
    assert run.exit_code == 0
    assert run.result["resources"][0]["done"] is True

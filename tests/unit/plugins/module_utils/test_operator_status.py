"""The operator readiness predicates on recorded objects (tests/unit/fixtures/operators)."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils.operator_status import (
    clusterpolicy_ready,
    crd_established,
    deployment_available,
    failure_message,
    label_selector,
    not_found,
    pod_problems,
    reference,
    subscription_installed,
    timeout_message,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "operators"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


def test_established_crd_is_done():
    verdict = crd_established(load("crd-established.yaml"))
    assert verdict["done"] is True
    assert verdict["failed"] is False
    assert verdict["pending"] == []
    assert reference(verdict) == "CustomResourceDefinition pytorchjobs.kubeflow.org"


def test_crd_without_conditions_waits():
    crd = load("crd-established.yaml")
    del crd["status"]
    verdict = crd_established(crd)
    assert verdict["done"] is False
    assert verdict["pending"] == ["condition Established is missing, want True"]
    assert verdict["conditions"] == "no conditions reported"


def test_crd_with_a_name_clash_fails_at_once():
    verdict = crd_established(load("crd-names-conflict.yaml"))
    assert verdict["failed"] is True
    assert verdict["done"] is False
    assert verdict["pending"] == [
        'its names are not accepted (PluralConflict: "trainjobs" is already in use)',
        "condition Established is False, want True (NotAccepted: not all names are accepted)",
    ]


def test_available_deployment_is_done_and_ignores_pods():
    verdict = deployment_available(load("deployment-available.yaml"), [load("pod-unschedulable.yaml")])
    assert verdict["done"] is True
    assert verdict["pods"] == []
    assert reference(verdict) == "Deployment kubeflow/training-operator"
    assert verdict["conditions"].startswith("Available=True (MinimumReplicasAvailable")


def test_unschedulable_pod_is_reported_with_the_schedulers_reason():
    verdict = deployment_available(load("deployment-unschedulable.yaml"), [load("pod-unschedulable.yaml")])
    assert verdict["done"] is False
    assert verdict["available_replicas"] == 0
    assert "0 of 1 replicas available" in verdict["pending"]
    assert verdict["pods"] == [
        {
            "name": "training-operator-6f8d7c9b5-x2x7q",
            "problems": [
                "not scheduled: Unschedulable: 0/2 nodes are available: 2 node(s) didn't match Pod's node "
                "affinity/selector. preemption: 0/2 nodes are available: "
                "2 Preemption is not helpful for scheduling."
            ],
        }
    ]
    assert any(
        line.startswith("pod training-operator-6f8d7c9b5-x2x7q: not scheduled:")
        for line in verdict["pending"]
    )


def test_deployment_without_pods_says_so():
    verdict = deployment_available(load("deployment-unschedulable.yaml"), [])
    assert "no pods exist for it yet" in verdict["pending"]


def test_rollout_in_progress_lists_every_unmet_check():
    verdict = deployment_available(load("deployment-rolling.yaml"))
    assert verdict["done"] is False
    assert verdict["pending"] == [
        "the deployment controller has not observed generation 3 yet (observed 2)",
        "1 old replicas are still terminating",
        "rollout not finished (Progressing: ReplicaSetUpdated: "
        'ReplicaSet "gpu-operator-7b8c" is progressing.)',
    ]


def test_available_but_not_yet_marked_complete_waits_for_the_controllers_last_word():
    deployment = load("deployment-available.yaml")
    deployment["status"]["conditions"][1].update(reason="ReplicaSetUpdated", message="progressing")
    assert deployment_available(deployment)["pending"] == [
        "rollout not finished (Progressing: ReplicaSetUpdated: progressing)"
    ]


def test_replica_failure_and_stalled_progress_are_reported():
    deployment = load("deployment-unschedulable.yaml")
    deployment["status"]["conditions"] = [
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": 'pods "training-operator-6f8d7c9b5-" is forbidden: error looking up service account '
            'kubeflow/training-operator: serviceaccount "training-operator" not found',
        },
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "training-operator-6f8d7c9b5" has timed out progressing.',
        },
    ]
    pending = deployment_available(deployment)["pending"]
    assert any(line.startswith("replica failure: FailedCreate: pods") for line in pending)
    assert (
        "not progressing: ProgressDeadlineExceeded: "
        'ReplicaSet "training-operator-6f8d7c9b5" has timed out progressing.' in pending
    )


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (
            "pod-image-pull-backoff.yaml",
            [
                "container gpu-operator is waiting: ImagePullBackOff: "
                'Back-off pulling image "registry.example/nvidia/gpu-operator:v24.3.0"'
            ],
        ),
        (
            "pod-crash-loop.yaml",
            [
                "container manager is waiting: CrashLoopBackOff: "
                "back-off 1m20s restarting failed container=manager"
            ],
        ),
    ],
)
def test_container_problems(fixture, expected):
    assert pod_problems(load(fixture)) == expected


def test_pod_states_without_a_problem_reason():
    pod = load("pod-unschedulable.yaml")
    pod["status"] = {"phase": "Pending"}
    assert pod_problems(pod) == ["pending, not scheduled yet"]
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    pod["spec"]["nodeName"] = "gpu-node-0"
    assert pod_problems(pod) == ["scheduled to gpu-node-0, starting"]
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
    }
    assert pod_problems(pod) == ["running but not ready (ContainersNotReady)"]
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert pod_problems(pod) == []
    pod["status"] = {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory.",
        "containerStatuses": [
            {"name": "c", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
        ],
    }
    assert pod_problems(pod) == [
        "container c exited with code 137 (OOMKilled)",
        "failed: Evicted: The node was low on resource: memory.",
    ]


def test_label_selector_string():
    assert label_selector(load("deployment-unschedulable.yaml")["spec"]["selector"]) == (
        "control-plane=kubeflow-training-operator,app.kubernetes.io/part-of notin (other)"
    )
    assert (
        label_selector(
            {
                "matchLabels": {"b": "2", "a": "1"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["x", "y"]},
                    {"key": "gpu", "operator": "Exists"},
                    {"key": "spot", "operator": "DoesNotExist"},
                ],
            }
        )
        == "a=1,b=2,tier in (x,y),gpu,!spot"
    )
    assert label_selector(None) == ""


def test_ready_clusterpolicy_is_done():
    verdict = clusterpolicy_ready(load("clusterpolicy-ready.yaml"))
    assert verdict["done"] is True
    assert verdict["state"] == "ready"
    assert verdict["operator_namespace"] == "gpu-operator"
    assert verdict["conditions"] == (
        "Ready=True (Reconciled: ClusterPolicy is ready as all resources have been successfully reconciled), "
        "Error=False (Ready)"
    )


def test_not_ready_clusterpolicy_names_the_operands_not_ready():
    verdict = clusterpolicy_ready(load("clusterpolicy-not-ready.yaml"))
    assert verdict["done"] is False
    assert verdict["failed"] is False
    assert verdict["pending"] == [
        "state is notReady, want ready",
        "ClusterPolicy is not ready, states not ready: [state-driver state-operator-validation]",
    ]


def test_ignored_clusterpolicy_fails_at_once():
    verdict = clusterpolicy_ready(load("clusterpolicy-ignored.yaml"))
    assert verdict["failed"] is True
    assert "another one came first" in verdict["pending"][0]
    assert failure_message([verdict]) == (
        "ClusterPolicy gpu-cluster-policy will not become ready: state is ignored: the GPU Operator acts "
        "on one ClusterPolicy per cluster and another one came first; delete one of them; conditions: "
        "no conditions reported"
    )


def test_clusterpolicy_without_status_asks_whether_the_operator_runs():
    verdict = clusterpolicy_ready(load("clusterpolicy-no-status.yaml"))
    assert verdict["done"] is False
    assert verdict["state"] is None
    assert verdict["pending"] == [
        "no status yet: the GPU Operator has not reconciled it (is the operator running?)"
    ]


def test_subscription_with_a_succeeded_csv_is_done():
    verdict = subscription_installed(load("subscription-installed.yaml"), load("csv-succeeded.yaml"))
    assert verdict["done"] is True
    assert verdict["installed_csv"] == "gpu-operator-certified.v24.3.0"
    assert verdict["state"] == "AtLatestKnown"


def test_subscription_waits_for_its_csv():
    subscription = load("subscription-installed.yaml")
    assert subscription_installed(subscription, None)["pending"] == [
        "ClusterServiceVersion gpu-operator-certified.v24.3.0 not found"
    ]
    assert subscription_installed(subscription, load("csv-installing.yaml"))["pending"] == [
        "ClusterServiceVersion gpu-operator-certified.v24.3.0 is in phase Installing, want Succeeded "
        "(InstallWaiting: installing: waiting for deployment gpu-operator to become ready: "
        'deployment "gpu-operator" '
        "not available: Deployment does not have minimum availability.)"
    ]


def test_manual_approval_is_reported():
    verdict = subscription_installed(load("subscription-manual-approval.yaml"))
    assert verdict["done"] is False
    assert verdict["pending"] == [
        "OLM has not installed a ClusterServiceVersion yet (state UpgradePending)",
        "InstallPlanPending: RequiresApproval",
    ]


def test_timeout_message_has_one_line_per_object_not_ready_with_state_and_conditions():
    verdicts = [
        crd_established(load("crd-established.yaml")),
        deployment_available(load("deployment-unschedulable.yaml"), [load("pod-unschedulable.yaml")]),
        clusterpolicy_ready(load("clusterpolicy-not-ready.yaml")),
        not_found("ClusterPolicy", "other", hint="nothing created it"),
    ]
    lines = timeout_message(verdicts, 30).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(
        "Deployment kubeflow/training-operator is not ready after 30s: 0 of 1 replicas available"
    )
    assert (
        "pod training-operator-6f8d7c9b5-x2x7q: not scheduled: Unschedulable: 0/2 nodes are available"
        in lines[0]
    )
    assert lines[1] == (
        "ClusterPolicy cluster-policy is not ready after 30s: state is notReady, want ready; "
        "ClusterPolicy is not "
        "ready, states not ready: [state-driver state-operator-validation]; state: notReady; conditions: "
        "Ready=False (Error), Error=True (OperandNotReady: ClusterPolicy is not ready, states not ready: "
        "[state-driver state-operator-validation])"
    )
    assert lines[2] == (
        "ClusterPolicy other is not ready after 30s: not found: nothing created it; "
        "conditions: no conditions reported"
    )


def test_verdicts_do_not_change_their_input():
    deployment = load("deployment-unschedulable.yaml")
    before = copy.deepcopy(deployment)
    deployment_available(deployment, [load("pod-unschedulable.yaml")])
    assert deployment == before

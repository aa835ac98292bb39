"""training_operator against the real control plane, with upstream's own install manifests.

The manifests are the Training Operator v1.9.2 and Trainer v2.1.0 kustomizations read from
their Go modules (tests/harness/sources.py), rendered by the role with the harness's
kubectl. Their admission webhooks are narrowed to a label nothing carries: no webhook
server runs here, and the harness is shared with tests that create PyTorchJobs.

kwok plays the kubelets, so the controller Deployments' pods are scheduled on the
simulated GPU nodes and reported Running and Ready; the harness renews the node Leases
(tests/harness/node_leases.py) so the nodes stay Ready. The harness also runs the v1
operator outside the cluster and installed the same CRDs with its own field manager: the
role takes the fields over with server-side apply and must still change nothing on a
second run.
"""

from __future__ import annotations

import json
import re
import secrets

import pytest
import yaml
from sources import render, write_manifests

pytestmark = pytest.mark.slow

V1_CRDS = [
    "jaxjobs.kubeflow.org",
    "mpijobs.kubeflow.org",
    "paddlejobs.kubeflow.org",
    "pytorchjobs.kubeflow.org",
    "tfjobs.kubeflow.org",
    "xgboostjobs.kubeflow.org",
]
V2_CRDS = [
    "trainjobs.trainer.kubeflow.org",
    "trainingruntimes.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org",
    "jobsets.jobset.x-k8s.io",
]
WEBHOOK = "validator.training-operator.kubeflow.org"


def recap(run):
    """The PLAY RECAP counters of localhost."""
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", run.output)
    assert match, run
    return {"ok": int(match[1]), "changed": int(match[2]), "failed": int(match[3])}


def get_json(k8s_cluster, *args):
    return json.loads(k8s_cluster.kubectl("get", *args, "-o", "json").stdout)


def managers(k8s_cluster, crd):
    """The field managers of a CRD."""
    stored = get_json(k8s_cluster, "crd", crd, "--show-managed-fields")
    return {entry["manager"] for entry in stored["metadata"]["managedFields"]}


@pytest.fixture(scope="module")
def manifests(k8s_cluster, tmp_path_factory):
    """The v1 and Trainer v2 kustomizations over the upstream modules."""
    root = tmp_path_factory.mktemp("manifests")
    return {
        "v1": write_manifests(k8s_cluster.harness, "training-operator-v1", root / "v1"),
        "trainer_v2": write_manifests(k8s_cluster.harness, "trainer-v2", root / "v2"),
    }


@pytest.fixture(scope="module")
def pytorchjob_crd(k8s_cluster, manifests):
    """The PyTorchJob CRD exactly as the v1 manifests hold it (the same as the harness's)."""
    crds = [
        item
        for item in render(k8s_cluster.harness, manifests["v1"])
        if item["kind"] == "CustomResourceDefinition"
        and item["metadata"]["name"] == "pytorchjobs.kubeflow.org"
    ]
    assert len(crds) == 1
    return crds[0]


@pytest.fixture(scope="module")
def role_vars(k8s_cluster, manifests):
    def make(flavor="v1", **extra):
        return {
            "training_operator_flavor": flavor,
            "training_operator_manifests": str(manifests[flavor]),
            "training_operator_kustomize_binary": str(k8s_cluster.harness.binary("kubectl")),
            "training_operator_kubeconfig": str(k8s_cluster.kubeconfig),
            "training_operator_wait_timeout": 90,
            "training_operator_wait_poll_interval": 1,
            **extra,
        }

    return make


def snapshot(k8s_cluster):
    """resourceVersion of every object the v1 manifests hold, to prove nothing was written."""
    versions = {}
    for kind, name in [("namespace", "kubeflow"), ("clusterrole", "training-operator")]:
        versions[(kind, name)] = get_json(k8s_cluster, kind, name)["metadata"]["resourceVersion"]
    versions[("vwc", WEBHOOK)] = get_json(k8s_cluster, "validatingwebhookconfiguration", WEBHOOK)["metadata"][
        "resourceVersion"
    ]
    for crd in V1_CRDS:
        versions[("crd", crd)] = get_json(k8s_cluster, "crd", crd)["metadata"]["resourceVersion"]
    for kind in ("deployment", "service", "serviceaccount", "secret"):
        name = "training-operator-webhook-cert" if kind == "secret" else "training-operator"
        versions[(kind, name)] = get_json(k8s_cluster, kind, name, "-n", "kubeflow")["metadata"][
            "resourceVersion"
        ]
    return versions


@pytest.fixture(scope="module")
def installed(k8s_cluster, role_vars, run_role):
    """Start from nothing, show check mode, then converge once; the tests read the result."""
    absent = run_role("training_operator", role_vars(training_operator_state="absent"))
    assert absent.rc == 0, absent
    assert k8s_cluster.kubectl("get", "namespace", "kubeflow", check=False).returncode != 0

    check = run_role("training_operator", role_vars(), "--check", "--diff")
    converge = run_role("training_operator", role_vars())
    return {"check": check, "converge": converge}


def test_check_mode_before_install_reports_and_creates_nothing(installed):
    check = installed["check"]
    assert check.rc == 0, check
    assert recap(check)["changed"] >= 2
    # Objects in the namespace the run would create are listed, not sent.
    assert "- Deployment kubeflow/training-operator" in check.output
    assert "- Namespace kubeflow" in check.output  # the dry-run apply reports it as a change
    # The converge that followed really created the namespace, so check mode had not.
    assert "- Namespace kubeflow" in installed["converge"].output


def test_converge_applies_upstreams_objects_and_waits_for_the_controller(installed, k8s_cluster):
    converge = installed["converge"]
    assert converge.rc == 0, converge
    for crd in V1_CRDS:
        stored = get_json(k8s_cluster, "crd", crd)
        conditions = {item["type"]: item["status"] for item in stored["status"]["conditions"]}
        assert conditions["Established"] == "True", crd
        assert "gpuops-training" in managers(k8s_cluster, crd), crd
    # The harness installed PyTorchJob and MPIJob with its own manager; both now share them.
    assert {"gpuops-harness", "gpuops-training"} <= managers(k8s_cluster, "pytorchjobs.kubeflow.org")

    deployment = get_json(k8s_cluster, "deployment", "training-operator", "-n", "kubeflow")
    assert deployment["status"]["availableReplicas"] == 1
    # Upstream's pinned image path and tag (its registry part is left out of this file).
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(
        "/kubeflow/training-v1/training-operator:v1-3f15cb8"
    )
    # The operator reads its PyTorchJob init container from the role's template: requests equal
    # to limits (upstream's 50m/10Mi against 100m/20Mi would make Workers Burstable).
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "init-container-template", "mountPath": "/etc/config", "readOnly": True} in container[
        "volumeMounts"
    ]
    template = get_json(k8s_cluster, "configmap", "training-operator-init-container", "-n", "kubeflow")
    # Its Go placeholders ({{.MasterAddr}}) read as plain words once their braces are gone.
    text = template["data"]["initContainer.yaml"].replace("{{.", "").replace("}}", "")
    resources = yaml.safe_load(text)[0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "100m", "memory": "20Mi"}
    pods = get_json(k8s_cluster, "pods", "-n", "kubeflow", "-l", "control-plane=kubeflow-training-operator")[
        "items"
    ]
    assert len(pods) == 1
    assert pods[0]["spec"]["nodeName"].startswith("gpu-node-")
    assert pods[0]["status"]["phase"] == "Running"

    namespace = get_json(k8s_cluster, "namespace", "kubeflow")
    assert namespace["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuops-training"

    webhook = get_json(k8s_cluster, "validatingwebhookconfiguration", WEBHOOK)
    assert len(webhook["webhooks"]) == 5
    assert all(hook["failurePolicy"] == "Fail" for hook in webhook["webhooks"])
    assert get_json(k8s_cluster, "clusterrolebinding", "training-operator")["subjects"] == [
        {"kind": "ServiceAccount", "name": "training-operator", "namespace": "kubeflow"}
    ]


def test_second_run_and_check_mode_change_nothing(installed, k8s_cluster, role_vars, run_role):
    assert installed["converge"].rc == 0
    before = snapshot(k8s_cluster)
    again = run_role("training_operator", role_vars())
    assert again.rc == 0, again
    assert recap(again)["changed"] == 0, again
    check = run_role("training_operator", role_vars(), "--check", "--diff")
    assert check.rc == 0, check
    assert recap(check)["changed"] == 0, check
    assert snapshot(k8s_cluster) == before


def test_pytorchjobs_are_admitted_while_the_gated_webhooks_are_installed(
    installed, k8s_cluster, k8s_namespace
):
    """The harness is shared: the upstream webhooks must not reject other tests' jobs."""
    assert installed["converge"].rc == 0
    name = "smoke-" + secrets.token_hex(3)
    k8s_cluster.apply(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": k8s_namespace},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {
                        "replicas": 1,
                        "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}},
                    }
                }
            },
        }
    )
    assert get_json(k8s_cluster, "pytorchjob", name, "-n", k8s_namespace)["metadata"]["name"] == name


def test_unschedulable_controller_times_out_with_the_schedulers_reason(
    installed, pytorchjob_crd, k8s_cluster, k8s_namespace, role_vars, run_role, tmp_path
):
    """A rendered file (not a kustomization) whose controller no node can take."""
    assert installed["converge"].rc == 0
    documents = [
        pytorchjob_crd,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "training-operator", "namespace": k8s_namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "stranded"}},
                "template": {
                    "metadata": {"labels": {"app": "stranded"}},
                    "spec": {
                        "nodeSelector": {"node-role.kubernetes.io/infra": ""},
                        "containers": [
                            {
                                "name": "manager",
                                "image": "kubeflow/training-v1/training-operator:v1-3f15cb8",
                            }
                        ],
                    },
                },
            },
        },
    ]
    manifest = tmp_path / "stranded.yaml"
    manifest.write_text(yaml.safe_dump_all(documents))
    run = run_role(
        "training_operator",
        role_vars(training_operator_manifests=str(manifest), training_operator_wait_timeout=8),
    )
    assert run.rc != 0
    assert (
        "Deployment %s/training-operator is not ready after 8s: 0 of 1 replicas available" % k8s_namespace
        in run.output
    )
    # Every untainted node refuses the pod for its selector (the real node, when an earlier test
    # started it, carries a taint and is refused for that instead).
    nodes = json.loads(k8s_cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    untainted = [node for node in nodes if not node["spec"].get("taints")]
    assert "not scheduled: Unschedulable: 0/%d nodes are available: " % len(nodes) in run.output
    assert "%d node(s) didn't match Pod's node affinity/selector" % len(untainted) in run.output
    assert "conditions: Available=False (MinimumReplicasUnavailable" in run.output


def test_server_rejection_names_the_object(
    installed, pytorchjob_crd, k8s_namespace, role_vars, run_role, tmp_path
):
    assert installed["converge"].rc == 0
    documents = [
        pytorchjob_crd,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "training-operator", "namespace": k8s_namespace},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "training-operator", "namespace": k8s_namespace},
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "manager"}]},
                },
            },
        },
    ]
    manifest = tmp_path / "no-image.yaml"
    manifest.write_text(yaml.safe_dump_all(documents))
    run = run_role("training_operator", role_vars(training_operator_manifests=str(manifest)))
    assert run.rc != 0
    # Three objects and the init container template's ConfigMap the role adds.
    assert "The API server rejected 1 of the 4 objects of %s:" % manifest in " ".join(run.output.split())
    assert (
        '- Deployment %s/training-operator: Deployment.apps "training-operator" is invalid: '
        "spec.template.spec.containers[0].image: Required value" % k8s_namespace
    ) in run.output


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"training_operator_version": "v2.1.0"},
            'training_operator_version must be a release tag of the v1 flavor (such as v1.9.2), got "v2.1.0"',
        ),
        (
            {"training_operator_manifests": "manifests/training-operator.yaml"},
            "training_operator_manifests must be an absolute path to a YAML file or a directory on the "
            'controller, or a kustomize URL: "manifests/training-operator.yaml" is a relative path',
        ),
        (
            {"training_operator_manifests": "/nonexistent/training-operator-v1.9.2.yaml"},
            '"/nonexistent/training-operator-v1.9.2.yaml" does not exist',
        ),
        (
            {"training_operator_wait_poll_interval": 0},
            "training_operator_wait_timeout must be 0 or more and "
            "training_operator_wait_poll_interval at least 1",
        ),
    ],
)
def test_bad_settings_fail_before_any_api_call(role_vars, run_role, tmp_path, variables, message):
    # A kubeconfig that does not exist: any API call would fail with another message.
    run = run_role(
        "training_operator",
        role_vars(training_operator_kubeconfig=str(tmp_path / "absent-kubeconfig"), **variables),
    )
    assert run.rc != 0
    assert message in " ".join(run.output.split()), run
    assert "absent-kubeconfig" not in run.output


def test_the_other_flavors_manifests_fail_before_any_api_call(manifests, role_vars, run_role, tmp_path):
    run = run_role(
        "training_operator",
        role_vars(
            training_operator_manifests=str(manifests["trainer_v2"]),
            training_operator_kubeconfig=str(tmp_path / "absent-kubeconfig"),
        ),
    )
    assert run.rc != 0
    assert "cannot be applied as the v1 flavor:" in run.output
    assert "- the manifests have no CustomResourceDefinition pytorchjobs.kubeflow.org" in run.output
    assert "- the manifests have no Deployment training-operator" in run.output
    assert "absent-kubeconfig" not in run.output


def test_malformed_objects_fail_before_any_api_call(role_vars, run_role, tmp_path):
    manifest = tmp_path / "broken.yaml"
    manifest.write_text("apiVersion: v1\nmetadata: {name: lonely}\n---\n- not\n- a mapping\n")
    run = run_role(
        "training_operator",
        role_vars(
            training_operator_manifests=str(manifest),
            training_operator_kubeconfig=str(tmp_path / "absent-kubeconfig"),
        ),
    )
    assert run.rc != 0
    assert "- object 1 ((no kind) lonely) lacks kind" in run.output
    assert "- object 2 is not a mapping but a list" in run.output


def test_trainer_v2_converges_changes_nothing_twice_and_leaves_its_crds(k8s_cluster, role_vars, run_role):
    variables = role_vars("trainer_v2")
    converge = run_role("training_operator", variables)
    assert converge.rc == 0, converge
    for crd in V2_CRDS:
        conditions = {
            c["type"]: c["status"] for c in get_json(k8s_cluster, "crd", crd)["status"]["conditions"]
        }
        assert conditions["Established"] == "True", crd
    for name in ("kubeflow-trainer-controller-manager", "jobset-controller-manager"):
        deployment = get_json(k8s_cluster, "deployment", name, "-n", "kubeflow-system")
        assert deployment["status"]["availableReplicas"] == 1, name
    trainer = get_json(
        k8s_cluster, "deployment", "kubeflow-trainer-controller-manager", "-n", "kubeflow-system"
    )
    assert trainer["spec"]["template"]["spec"]["containers"][0]["image"].endswith(
        "/kubeflow/trainer/trainer-controller-manager:v2.1.0"
    )

    again = run_role("training_operator", variables)
    assert again.rc == 0, again
    assert recap(again)["changed"] == 0, again

    absent = run_role("training_operator", role_vars("trainer_v2", training_operator_state="absent"))
    assert absent.rc == 0, absent
    assert k8s_cluster.kubectl("get", "namespace", "kubeflow-system", check=False).returncode != 0
    # Deleting a CRD deletes every object of its kind: kept unless asked.
    for crd in V2_CRDS:
        assert k8s_cluster.kubectl("get", "crd", crd, check=False).returncode == 0, crd


def test_absent_removes_the_operator_keeps_the_crds_and_is_idempotent(
    installed, k8s_cluster, role_vars, run_role
):
    assert installed["converge"].rc == 0
    absent = run_role("training_operator", role_vars(training_operator_state="absent"))
    assert absent.rc == 0, absent
    assert recap(absent)["changed"] == 1
    for args in (
        ("namespace", "kubeflow"),
        ("clusterrole", "training-operator"),
        ("validatingwebhookconfiguration", WEBHOOK),
    ):
        assert k8s_cluster.kubectl("get", *args, check=False).returncode != 0, args
    for crd in V1_CRDS:
        assert k8s_cluster.kubectl("get", "crd", crd, check=False).returncode == 0, crd
    # The harness's own operator still works: a PyTorchJob is admitted and reconciled.
    again = run_role("training_operator", role_vars(training_operator_state="absent"))
    assert again.rc == 0, again
    assert recap(again)["changed"] == 0, again

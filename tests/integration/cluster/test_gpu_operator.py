"""gpu_operator against the real control plane with NVIDIA's own chart and CRD.

Helm is built from helm.sh/helm/v3 and the chart is deployments/gpu-operator of the same
github.com/NVIDIA/gpu-operator module whose ClusterPolicy CRD the harness installs
(tests/harness/sources.py), so the ClusterPolicy the chart renders must pass the upstream
schema. kwok runs the operator's pod; nothing reconciles a ClusterPolicy here, so these
tests write its status subresource the way the operator does (Ready/Error conditions,
state notReady then ready). The OLM path uses OLM's CRDs from operator-framework/api,
installed by these tests only, with fake_gpu_operator.py playing OLM's install step.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import subprocess
import threading
import time

import pytest
import urllib3
from fake_gpu_operator import FakeGpuOperator, not_ready_status, ready_status
from kubernetes import client
from kubernetes.client.rest import ApiException
from sources import OLM_CRD_NAMES, build_helm, gpu_operator_chart, olm_crd_files

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "nvidia.com", "v1", "clusterpolicies"
VALUES = {"nfd": {"enabled": False}, "operator": {"defaultRuntime": "containerd"}}


def recap(run):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", run.output)
    assert match, run
    return {"ok": int(match[1]), "changed": int(match[2]), "failed": int(match[3])}


@pytest.fixture(scope="module")
def namespace(k8s_cluster, tmp_path_factory):
    """The release's namespace; the release is uninstalled before the namespace goes, or
    its cluster-scoped objects would be left to block the next install."""
    name = "t-gpu-operator-" + secrets.token_hex(3)
    yield name
    subprocess.run(
        [
            str(build_helm(k8s_cluster.harness.builder)),
            "--kubeconfig",
            str(k8s_cluster.kubeconfig),
            "uninstall",
            "gpu-operator",
            "-n",
            name,
            "--ignore-not-found",
            "--wait",
        ],
        env={"HOME": str(tmp_path_factory.mktemp("helm-uninstall-home")), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=120,
        check=False,
    )
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def helm(k8s_cluster, namespace, tmp_path_factory):
    """Run the harness's helm against the cluster (its own home, so no user state leaks in)."""
    binary = build_helm(k8s_cluster.harness.builder)
    home = tmp_path_factory.mktemp("helm-home")

    def run(*args):
        completed = subprocess.run(
            [str(binary), "--kubeconfig", str(k8s_cluster.kubeconfig), *args],
            capture_output=True,
            text=True,
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
            timeout=120,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        return completed.stdout

    run.binary = binary
    return run


@pytest.fixture(scope="module")
def api(k8s_cluster):
    return client.CustomObjectsApi(k8s_cluster.api_client())


@pytest.fixture(scope="module")
def role_vars(k8s_cluster, namespace, helm):
    chart = gpu_operator_chart(k8s_cluster.harness.builder)

    def make(**extra):
        return {
            "gpu_operator_namespace": namespace,
            "gpu_operator_helm_chart": str(chart),
            "gpu_operator_helm_binary": str(helm.binary),
            "gpu_operator_helm_values": VALUES,
            "gpu_operator_rdma_use_host_mofed": True,
            "gpu_operator_kubeconfig": str(k8s_cluster.kubeconfig),
            "gpu_operator_wait_timeout": 60,
            "gpu_operator_wait_poll_interval": 1,
            **extra,
        }

    return make


def read_policy(api, name):
    try:
        return api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def write_status(api, name, status):
    api.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, {"status": status})


@contextlib.contextmanager
def operator_status(api, name, namespace, ready_after=3.0):
    """Write the ClusterPolicy's status as the operator would: notReady as soon as it
    exists, ready ``ready_after`` seconds later. Yields the times of both writes."""
    times = {}
    stop = threading.Event()

    def play():
        while not stop.is_set() and "ready" not in times:
            try:
                policy = read_policy(api, name)
            except (ApiException, urllib3.exceptions.HTTPError):
                stop.wait(0.2)
                continue
            if policy is not None and "not_ready" not in times:
                write_status(
                    api, name, not_ready_status(["state-driver", "state-operator-validation"], namespace)
                )
                times["not_ready"] = time.monotonic()
            elif "not_ready" in times and time.monotonic() - times["not_ready"] >= ready_after:
                write_status(api, name, ready_status(namespace))
                times["ready"] = time.monotonic()
            stop.wait(0.2)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    try:
        yield times
    finally:
        stop.set()
        thread.join(timeout=10)


@contextlib.contextmanager
def fake_operator(k8s_cluster, namespace):
    """fake_gpu_operator.py's loop (ClusterPolicy status and OLM's install step) in a thread."""
    operator = FakeGpuOperator(k8s_cluster.api_client(), ready_delay=2.0, namespace=namespace, olm=True)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            # A failed pass is retried; the thread must not die while a role waits on it.
            with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
                operator.step()
            stop.wait(0.3)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield operator
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def installed(api, namespace, role_vars, run_role, helm):
    """Check mode on an empty cluster, then converge while the operator status plays out."""
    assert read_policy(api, "cluster-policy") is None, "another test left a ClusterPolicy cluster-policy"
    check = run_role("gpu_operator", role_vars(), "--check", "--diff")
    releases_after_check = json.loads(helm("list", "-n", namespace, "-o", "json"))
    policy_after_check = read_policy(api, "cluster-policy")
    started = time.monotonic()
    with operator_status(api, "cluster-policy", namespace) as times:
        converge = run_role("gpu_operator", role_vars())
    return {
        "check": check,
        "releases_after_check": releases_after_check,
        "policy_after_check": policy_after_check,
        "converge": converge,
        "converge_seconds": time.monotonic() - started,
        "status_times": times,
    }


def test_check_mode_reports_the_install_and_changes_nothing(installed):
    check = installed["check"]
    assert check.rc == 0, check
    assert recap(check)["changed"] == 1
    assert installed["releases_after_check"] == []
    assert installed["policy_after_check"] is None


def test_converge_waits_until_the_clusterpolicy_is_ready(installed):
    converge = installed["converge"]
    assert converge.rc == 0, converge
    times = installed["status_times"]
    # The status said notReady for 3 s before it said ready: the role returned only after.
    assert "ready" in times, times
    assert recap(converge)["changed"] == 1


def test_server_stores_the_release_with_the_values_and_rdma_in_the_clusterpolicy(
    installed, api, helm, namespace, k8s_cluster
):
    assert installed["converge"].rc == 0
    releases = json.loads(helm("list", "-n", namespace, "-o", "json"))
    assert [(item["name"], item["status"], item["revision"]) for item in releases] == [
        ("gpu-operator", "deployed", "1")
    ]
    values = json.loads(helm("get", "values", "gpu-operator", "-n", namespace, "-o", "json"))
    assert values == {**VALUES, "driver": {"rdma": {"enabled": True, "useHostMofed": True}}}

    policy = read_policy(api, "cluster-policy")
    # Stored, so the upstream CRD's schema accepted what the chart rendered from these values.
    assert policy["spec"]["driver"]["rdma"] == {"enabled": True, "useHostMofed": True}
    assert policy["spec"]["operator"]["defaultRuntime"] == "containerd"
    assert policy["status"]["state"] == "ready"

    deployment = json.loads(
        k8s_cluster.kubectl("get", "deployment", "gpu-operator", "-n", namespace, "-o", "json").stdout
    )
    assert deployment["status"]["availableReplicas"] == 1


def test_second_run_and_check_mode_change_nothing(installed, api, helm, namespace, role_vars, run_role):
    assert installed["converge"].rc == 0
    before = read_policy(api, "cluster-policy")["metadata"]["resourceVersion"]
    again = run_role("gpu_operator", role_vars())
    assert again.rc == 0, again
    assert recap(again)["changed"] == 0, again
    check = run_role("gpu_operator", role_vars(), "--check", "--diff")
    assert check.rc == 0, check
    assert recap(check)["changed"] == 0, check
    assert read_policy(api, "cluster-policy")["metadata"]["resourceVersion"] == before
    releases = json.loads(helm("list", "-n", namespace, "-o", "json"))
    assert releases[0]["revision"] == "1"


def test_wait_times_out_reporting_the_state_and_the_operators_conditions(
    installed, api, namespace, role_vars, run_role
):
    assert installed["converge"].rc == 0
    write_status(
        api, "cluster-policy", not_ready_status(["state-driver", "state-mofed-validation"], namespace)
    )
    try:
        run = run_role("gpu_operator", role_vars(gpu_operator_wait_timeout=4))
    finally:
        write_status(api, "cluster-policy", ready_status(namespace))
    assert run.rc != 0
    text = " ".join(run.output.split())
    assert (
        "ClusterPolicy cluster-policy is not ready after 4s: state is notReady, want ready; "
        "ClusterPolicy is not ready, states not ready: [state-driver state-mofed-validation]; "
        "state: notReady; "
        "conditions: Ready=False (Error), Error=True (OperandNotReady: ClusterPolicy is not ready, "
        "states not ready: [state-driver state-mofed-validation])"
    ) in text


def test_changing_rdma_upgrades_the_release_and_the_clusterpolicy(
    installed, api, helm, namespace, role_vars, run_role
):
    assert installed["converge"].rc == 0
    run = run_role("gpu_operator", role_vars(gpu_operator_rdma_use_host_mofed=False))
    assert run.rc == 0, run
    assert recap(run)["changed"] == 1
    assert read_policy(api, "cluster-policy")["spec"]["driver"]["rdma"] == {
        "enabled": True,
        "useHostMofed": False,
    }
    assert json.loads(helm("list", "-n", namespace, "-o", "json"))[0]["revision"] == "2"


def test_helm_rejection_names_the_release_and_the_object(installed, namespace, role_vars, run_role):
    assert installed["converge"].rc == 0
    run = run_role(
        "gpu_operator", role_vars(gpu_operator_helm_values={**VALUES, "driver": {"enabled": "sometimes"}})
    )
    assert run.rc != 0
    text = " ".join(run.output.split())
    assert "Helm release %s/gpu-operator of chart" % namespace in text
    assert 'ClusterPolicy.nvidia.com \\"cluster-policy\\" is invalid' in text or (
        'ClusterPolicy.nvidia.com "cluster-policy" is invalid' in text
    )
    assert "spec.driver.enabled" in text
    # Put the good release back for the tests that follow.
    fixed = run_role("gpu_operator", role_vars())
    assert fixed.rc == 0, fixed


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"gpu_operator_helm_chart": ""},
            "gpu_operator_helm_chart must be an absolute path on the controller",
        ),
        ({"gpu_operator_helm_chart": "charts/gpu-operator"}, '"charts/gpu-operator" (not absolute)'),
        (
            {
                "gpu_operator_helm_chart": "gpu-operator",
                "gpu_operator_helm_repo_url": "https://helm.ngc.nvidia.com/nvidia",
            },
            "gpu_operator_helm_chart_version must pin its version",
        ),
        (
            {"gpu_operator_helm_values": {"driver": {"rdma": {"enabled": True}}}},
            "gpu_operator_helm_values sets driver.rdma; set GPUDirect RDMA with gpu_operator_rdma_enabled",
        ),
        (
            {"gpu_operator_rdma_enabled": False, "gpu_operator_rdma_use_host_mofed": True},
            "gpu_operator_rdma_use_host_mofed is true but gpu_operator_rdma_enabled is false",
        ),
        ({"gpu_operator_namespace": "GPU_Operator"}, "gpu_operator_namespace must be a lower-case DNS label"),
        (
            {
                "gpu_operator_install_method": "olm",
                "gpu_operator_clusterpolicy_spec": {"driver": {"enabled": True}},
            },
            "gpu_operator_clusterpolicy_spec lacks fields the ClusterPolicy CRD requires: daemonsets, dcgm, "
            "dcgmExporter, devicePlugin, gfd, nodeStatusExporter, operator, toolkit, operator.defaultRuntime",
        ),
        ({"gpu_operator_install_method": "kustomize"}, "gpu_operator_install_method"),
    ],
)
def test_bad_settings_fail_before_any_api_call(role_vars, run_role, tmp_path, variables, message):
    run = run_role(
        "gpu_operator", role_vars(gpu_operator_kubeconfig=str(tmp_path / "absent-kubeconfig"), **variables)
    )
    assert run.rc != 0
    assert message in " ".join(run.output.split()), run
    assert "absent-kubeconfig" not in run.output


@pytest.fixture(scope="module")
def olm_crds(k8s_cluster):
    """OLM's CRDs, installed by these tests only and removed at the end."""

    def remove():
        k8s_cluster.kubectl("delete", "crd", *OLM_CRD_NAMES, "--ignore-not-found", "--wait=true", check=False)

    remove()

    def install():
        args = ["apply", "--server-side", "--field-manager=gpuops-test"]
        for path in olm_crd_files(k8s_cluster.harness.builder):
            args += ["-f", str(path)]
        k8s_cluster.kubectl(*args)
        k8s_cluster.harness.wait_crds_established(OLM_CRD_NAMES)

    yield install
    remove()


@pytest.fixture(scope="module")
def olm_namespace(k8s_cluster):
    name = "t-nvidia-gpu-operator-" + secrets.token_hex(3)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def test_olm_without_olm_fails_with_a_clear_message(olm_crds, olm_namespace, role_vars, run_role):
    run = run_role(
        "gpu_operator", role_vars(gpu_operator_install_method="olm", gpu_operator_namespace=olm_namespace)
    )
    assert run.rc != 0
    assert (
        "gpu_operator_install_method is olm, but OLM is not installed on this cluster: "
        "CustomResourceDefinition subscriptions.operators.coreos.com and "
        "operatorgroups.operators.coreos.com not found"
    ) in " ".join(run.output.split())


def test_olm_second_clusterpolicy_is_reported_ignored_at_once(
    installed, olm_crds, olm_namespace, k8s_cluster, api, role_vars, run_role
):
    """The Helm release's cluster-policy came first: the operator ignores any other."""
    assert installed["converge"].rc == 0
    olm_crds()
    with fake_operator(k8s_cluster, olm_namespace):
        run = run_role(
            "gpu_operator",
            role_vars(
                gpu_operator_install_method="olm",
                gpu_operator_namespace=olm_namespace,
                gpu_operator_wait_timeout=120,
            ),
        )
    assert run.rc != 0
    assert "ClusterPolicy gpu-cluster-policy will not become ready: state is ignored" in " ".join(
        run.output.split()
    )
    assert read_policy(api, "gpu-cluster-policy")["status"]["state"] == "ignored"


def test_helm_absent_uninstalls_and_is_idempotent(installed, api, helm, namespace, role_vars, run_role):
    assert installed["converge"].rc == 0
    absent = run_role("gpu_operator", role_vars(gpu_operator_state="absent"))
    assert absent.rc == 0, absent
    assert recap(absent)["changed"] == 1
    assert json.loads(helm("list", "-n", namespace, "-o", "json")) == []
    assert read_policy(api, "cluster-policy") is None
    again = run_role("gpu_operator", role_vars(gpu_operator_state="absent"))
    assert again.rc == 0, again
    assert recap(again)["changed"] == 0


def test_olm_converges_stores_the_subscription_and_the_clusterpolicy_and_is_idempotent(
    olm_crds, olm_namespace, k8s_cluster, api, role_vars, run_role
):
    olm_crds()
    variables = role_vars(gpu_operator_install_method="olm", gpu_operator_namespace=olm_namespace)
    # The earlier test's ignored ClusterPolicy goes first, so this one is the operator's.
    with contextlib.suppress(ApiException):
        api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "gpu-cluster-policy")
    with fake_operator(k8s_cluster, olm_namespace):
        converge = run_role("gpu_operator", variables)
        assert converge.rc == 0, converge
        again = run_role("gpu_operator", variables)
        assert again.rc == 0, again
        assert recap(again)["changed"] == 0, again

    subscription = api.get_namespaced_custom_object(
        "operators.coreos.com", "v1alpha1", olm_namespace, "subscriptions", "gpu-operator-certified"
    )
    assert subscription["spec"] == {
        "name": "gpu-operator-certified",
        "channel": "stable",
        "source": "certified-operators",
        "sourceNamespace": "openshift-marketplace",
        "installPlanApproval": "Automatic",
    }
    group = api.get_namespaced_custom_object(
        "operators.coreos.com", "v1", olm_namespace, "operatorgroups", "nvidia-gpu-operator-group"
    )
    assert group["spec"]["targetNamespaces"] == [olm_namespace]
    policy = read_policy(api, "gpu-cluster-policy")
    assert policy["spec"]["driver"]["rdma"] == {"enabled": True, "useHostMofed": True}
    assert policy["spec"]["operator"]["defaultRuntime"] == "crio"
    assert policy["status"]["state"] == "ready"

    absent = run_role(
        "gpu_operator",
        role_vars(
            gpu_operator_install_method="olm",
            gpu_operator_namespace=olm_namespace,
            gpu_operator_state="absent",
        ),
    )
    assert absent.rc == 0, absent
    assert read_policy(api, "gpu-cluster-policy") is None
    assert k8s_cluster.kubectl("get", "namespace", olm_namespace, check=False).returncode != 0


def test_olm_clusterpolicy_rejection_names_the_object(
    olm_crds, olm_namespace, k8s_cluster, role_vars, run_role
):
    olm_crds()
    spec = {
        "operator": {"defaultRuntime": "crio"},
        "daemonsets": {},
        "dcgm": {"enabled": "sometimes"},
        "dcgmExporter": {},
        "devicePlugin": {},
        "driver": {},
        "gfd": {},
        "nodeStatusExporter": {},
        "toolkit": {},
    }
    with fake_operator(k8s_cluster, olm_namespace):
        run = run_role(
            "gpu_operator",
            role_vars(
                gpu_operator_install_method="olm",
                gpu_operator_namespace=olm_namespace,
                gpu_operator_clusterpolicy_spec=spec,
            ),
        )
    text = " ".join(run.output.split())
    assert run.rc != 0
    assert "ClusterPolicy gpu-cluster-policy was rejected by the API server:" in text
    assert ".spec.dcgm.enabled: expected boolean" in text
    cleanup = run_role(
        "gpu_operator",
        role_vars(
            gpu_operator_install_method="olm",
            gpu_operator_namespace=olm_namespace,
            gpu_operator_state="absent",
        ),
    )
    assert cleanup.rc == 0, cleanup

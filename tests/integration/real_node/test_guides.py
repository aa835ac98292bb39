"""The guides (docs/docsite/rst/guide_kubernetes.rst and guide_openshift.rst), run as a reader
would.

Each test writes its guide's inventory files as the guide shows them and runs the guide's
console commands, in order, from the directory that holds them, against the harness: its API
server and upstream CRDs (OpenShift's MachineConfig and SecurityContextConstraints among
them), its real node for the training pods, NVIDIA's chart rendered by a helm built from
source. Stand-ins play the controllers that cannot run here: the GPU Operator's status and
OpenShift's machine-config operator. The one addition is an extra-variables file, appended to
every command, with what only the test cluster has; it is the real-node inventory's own
settings (inventories/harness-real-node), so nothing here is tuned for this test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import urllib3
import yaml
from cluster_demo import INVENTORY, checkpoint_volume, release_volumes
from kubernetes import client
from kubernetes.client import ApiException
from sources import build_helm, gpu_operator_chart

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "cluster"))

from fake_gpu_operator import FakeGpuOperator  # noqa: E402
from fake_mco import MANAGED_LABEL_SELECTOR, FakeMachineConfigOperator  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.real_node]

GUIDES = REPO_ROOT / "docs" / "docsite" / "rst"
BIN = Path(sys.executable).parent
# The Training Operator's webhook would be served by a simulated pod here, and the harness
# already runs the operator itself (its own test installs upstream's manifests and removes
# them): the guides' provision runs every other role. On OpenShift the GPU Operator comes
# from OLM, whose CRDs would change what the other tests of this cluster see; its own test
# covers that path.
HARNESS_ROLES = {
    "kubernetes": ["gpu_operator", "training_namespace", "secondary_networks"],
    "openshift": ["machineconfig_limits", "training_namespace", "secondary_networks"],
}
INVENTORY_DIRS = {"kubernetes": "my-cluster", "openshift": "my-openshift"}
MCO_GROUP, MCO_VERSION = "machineconfiguration.openshift.io", "v1"


def guide_blocks(text: str) -> tuple[dict[str, str], list[str]]:
    """The guide's files ({caption: YAML text}) and its console commands, in order."""
    files, commands = {}, []
    for match in re.finditer(
        r"^\.\. code-block:: (\w+)\n((?:   :\w+:.*\n)*)\n((?:(?: {4}.*)?\n)+)", text, re.MULTILINE
    ):
        language, options, body = match.groups()
        body = "\n".join(line[4:] for line in body.splitlines()).strip() + "\n"
        caption = re.search(r":caption: (\S+)", options)
        if language == "yaml" and caption:
            files[caption.group(1)] = body
        elif language == "console":
            commands += [line[2:] for line in body.splitlines() if line.startswith("$ ")]
    return files, commands


def guide_text(platform: str) -> str:
    return (GUIDES / f"guide_{platform}.rst").read_text()


@pytest.mark.parametrize("platform", sorted(INVENTORY_DIRS))
def test_each_guide_shows_two_files_and_the_playbooks_in_order(platform):
    files, commands = guide_blocks(guide_text(platform))
    inventory = INVENTORY_DIRS[platform]
    assert sorted(files) == [f"{inventory}/group_vars/all.yml", f"{inventory}/hosts.yml"]
    for text in files.values():
        assert isinstance(yaml.safe_load(text), dict)
    playbooks = [shlex.split(command)[1] for command in commands]
    assert playbooks == [
        "gpuops.training.provision_cluster",
        "gpuops.training.provision_cluster",
        "gpuops.training.train",
    ], commands


def harness_settings(platform: str, namespace: str, runs_dir: Path) -> dict:
    """The real-node inventory's settings for the cluster and the launcher, in this namespace."""
    settings = {}
    for group in ("cluster_controllers", "training_launchers"):
        settings.update(yaml.safe_load((REPO_ROOT / INVENTORY / "group_vars" / f"{group}.yml").read_text()))
    settings.update(
        provision_cluster_roles=HARNESS_ROLES[platform],
        training_namespace_name=namespace,
        training_job_namespace=namespace,
        secondary_networks_namespace=namespace,
        training_job_runs_dir=str(runs_dir),
        # No Multus on the test node: the pods keep their one interface, and no GPU, no IB NIC.
        training_job_network=[],
        training_job_fabric="socket",
    )
    return settings


def run_command(command: str, workdir: Path, extra_vars: Path, env: dict[str, str]):
    """One of the guide's commands as a shell would run it, with the extra-variables file."""
    argv = shlex.split(command)
    assert argv[0] == "ansible-playbook", command
    return subprocess.run(
        [str(BIN / "ansible-playbook"), *argv[1:], "-e", "@" + str(extra_vars)],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1500,
        check=False,
    )


@contextlib.contextmanager
def stand_in(step):
    """Run a stand-in controller's reconcile pass every 0.3 s while the block runs."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
                step()
            stop.wait(0.3)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.fixture
def guide_env(node_inventory_env, tmp_path):
    """A reader's shell: the collection installed, KUBECONFIG set, no project ansible.cfg."""
    env = dict(
        os.environ,
        **node_inventory_env,
        ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"),
        ANSIBLE_NOCOLOR="1",
        HOME=str(tmp_path / "home"),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.pop("ANSIBLE_CONFIG", None)
    return env


def run_guide(platform, settings, env, tmp_path, context=contextlib.nullcontext):
    """Write the guide's files, run its commands with SETTINGS as extra variables; returns the
    inventory directory, the commands and their outputs."""
    files, commands = guide_blocks(guide_text(platform))
    workdir = tmp_path / "guide"
    for caption, text in files.items():
        (workdir / caption).parent.mkdir(parents=True, exist_ok=True)
        (workdir / caption).write_text(text)
    extra_vars = tmp_path / "harness.yml"
    extra_vars.write_text(json.dumps(settings))
    outputs = []
    with context():
        for command in commands:
            result = run_command(command, workdir, extra_vars, env)
            outputs.append(result.stdout)
            assert result.returncode == 0, f"$ {command}\n{result.stdout[-6000:]}"
        # What the guides promise of a second provision: nothing changes.
        again = run_command(commands[1], workdir, extra_vars, env)
    unchanged = re.search(r"localhost\s+: ok=\d+\s+changed=0 ", again.stdout)
    assert again.returncode == 0 and unchanged, again.stdout[-4000:]
    return workdir / INVENTORY_DIRS[platform], outputs


def assert_passed_on_the_real_node(outputs, runs_dir, real_node):
    check, provision, train = outputs
    # Check mode reported changes (and made none: the namespace came with the real run).
    assert re.search(r"localhost\s+: ok=\d+\s+changed=[1-9]", check), check[-3000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=[1-9]", provision), provision[-3000:]
    verdict = re.search(r"Run (\S+): PASSED \((\d+)/(\d+) ranks reported", train)
    assert verdict and verdict.group(2) == verdict.group(3) == "2", train[-4000:]
    summary = json.loads((runs_dir / verdict.group(1) / "summary.json").read_text())
    assert summary["verdict"] == "passed"
    assert {rank["node"] for rank in summary["ranks"]} == {real_node.name}


def delete(k8s_cluster, *objects):
    for kind, name, *namespace in objects:
        where = ["-n", namespace[0]] if namespace else []
        k8s_cluster.kubectl("delete", kind, name, *where, "--wait=false", "--ignore-not-found", check=False)


def test_the_kubernetes_guide_runs_as_written_to_a_passed_run(
    k8s_cluster, real_node, provisioned_node, guide_env, tmp_path
):
    suffix = secrets.token_hex(3)
    namespace, gpu_namespace = f"guide-{suffix}", f"guide-gpu-{suffix}"
    runs_dir = tmp_path / "guide" / "my-cluster" / "runs"
    helm = build_helm(k8s_cluster.harness.builder)
    settings = harness_settings("kubernetes", namespace, runs_dir)
    settings.update(
        gpu_operator_namespace=gpu_namespace,
        gpu_operator_helm_chart=str(gpu_operator_chart(k8s_cluster.harness.builder)),
        gpu_operator_helm_binary=str(helm),
        gpu_operator_wait_timeout=120,
        gpu_operator_wait_poll_interval=1,
    )
    checkpoint_volume(k8s_cluster.harness, namespace)
    operator = FakeGpuOperator(k8s_cluster.api_client(), ready_delay=2.0, namespace=gpu_namespace, olm=False)
    try:
        _inventory, outputs = run_guide(
            "kubernetes", settings, guide_env, tmp_path, lambda: stand_in(operator.step)
        )
        assert_passed_on_the_real_node(outputs, runs_dir, real_node)
    finally:
        uninstall = ["uninstall", "gpu-operator", "-n", gpu_namespace, "--ignore-not-found", "--wait"]
        subprocess.run(
            [str(helm), "--kubeconfig", str(k8s_cluster.kubeconfig), *uninstall],
            env={"HOME": str(tmp_path / "helm-home"), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=120,
            check=False,
        )
        delete(
            k8s_cluster,
            ("clusterpolicy", "gpu-cluster-policy"),
            ("namespace", gpu_namespace),
            ("namespace", namespace),
        )
        release_volumes(k8s_cluster.harness, namespace)


def test_the_openshift_guide_runs_as_written_to_a_passed_run(
    k8s_cluster, real_node, provisioned_node, guide_env, tmp_path
):
    suffix = secrets.token_hex(3)
    namespace, sriov_namespace, pool = f"guide-{suffix}", f"guide-sriov-{suffix}", f"guide-{suffix}"
    runs_dir = tmp_path / "guide" / "my-openshift" / "runs"
    settings = harness_settings("openshift", namespace, runs_dir)
    settings.update(
        machineconfig_limits_pools=[pool],
        machineconfig_limits_wait_timeout=120,
        machineconfig_limits_wait_poll_interval=1,
        secondary_networks_sriov_namespace=sriov_namespace,
    )
    # What OpenShift has before the guide starts: the GPU workers' pool, run by the
    # machine-config operator, and the SR-IOV Network Operator's namespace.
    api = client.CustomObjectsApi(k8s_cluster.api_client())
    managed = dict([MANAGED_LABEL_SELECTOR.split("=")])
    api.create_cluster_custom_object(
        MCO_GROUP,
        MCO_VERSION,
        "machineconfigpools",
        {
            "apiVersion": f"{MCO_GROUP}/{MCO_VERSION}",
            "kind": "MachineConfigPool",
            "metadata": {"name": pool, "labels": managed},
            "spec": {"machineConfigSelector": {"matchLabels": {f"{MCO_GROUP}/role": pool}}},
        },
    )
    k8s_cluster.kubectl("create", "namespace", sriov_namespace)
    checkpoint_volume(k8s_cluster.harness, namespace)
    operator = FakeMachineConfigOperator(k8s_cluster.api_client(), render_delay=1.0, update_delay=2.0)
    try:
        _inventory, outputs = run_guide(
            "openshift", settings, guide_env, tmp_path, lambda: stand_in(operator.step)
        )
        assert_passed_on_the_real_node(outputs, runs_dir, real_node)
        # The pool took the CRI-O drop-in, and the trainer's ServiceAccount alone may use the
        # namespace's SecurityContextConstraints.
        stored = json.loads(k8s_cluster.kubectl("get", "mcp", pool, "-o", "json").stdout)
        assert stored["status"]["configuration"]["name"].startswith(f"rendered-{pool}-")
        listed = k8s_cluster.kubectl("get", "securitycontextconstraints", "-o", "json").stdout
        sccs = json.loads(listed)["items"]
        ours = [scc for scc in sccs if namespace in scc["metadata"]["name"]]
        assert len(ours) == 1 and ours[0]["allowedCapabilities"] == ["IPC_LOCK"], ours
        bindings = json.loads(k8s_cluster.kubectl("get", "rolebinding", "-n", namespace, "-o", "json").stdout)
        subjects = [subject for binding in bindings["items"] for subject in binding.get("subjects") or []]
        assert {(subject["kind"], subject["name"]) for subject in subjects} == {("ServiceAccount", "trainer")}
    finally:
        machine_configs = api.list_cluster_custom_object(MCO_GROUP, MCO_VERSION, "machineconfigs")["items"]
        delete(
            k8s_cluster,
            ("mcp", pool),
            *[
                ("machineconfig", item["metadata"]["name"])
                for item in machine_configs
                if pool in item["metadata"]["name"]
            ],
            ("namespace", sriov_namespace),
            ("namespace", namespace),
        )
        release_volumes(k8s_cluster.harness, namespace)

"""The Kubernetes guide (docs/docsite/rst/guide_kubernetes.rst), run as a reader would.

The test writes the guide's inventory files as the guide shows them and runs the guide's
console commands, in order, from the directory that holds them, against the harness: its API
server and upstream CRDs, its real node for the training pods, NVIDIA's chart rendered by a
helm built from source (a stand-in operator plays the GPU Operator's status, since no
driver can run here). The one addition is an extra-variables file, appended to every
command, with what only the test cluster has; it is the real-node inventory's own settings
(inventories/harness-real-node), so nothing here is tuned for this test.
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
from cluster_demo import INVENTORY, checkpoint_volume
from kubernetes.client import ApiException
from sources import build_helm, gpu_operator_chart

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "cluster"))

from fake_gpu_operator import FakeGpuOperator  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.real_node]

GUIDE = REPO_ROOT / "docs" / "docsite" / "rst" / "guide_kubernetes.rst"
BIN = Path(sys.executable).parent
# The Training Operator's webhook would be served by a simulated pod here, and the harness
# already runs the operator itself (its own test installs upstream's manifests and removes
# them): the guide's provision runs every other role.
HARNESS_ROLES = ["gpu_operator", "training_namespace", "secondary_networks"]


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


def test_the_guide_shows_two_files_and_the_playbooks_in_order():
    files, commands = guide_blocks(GUIDE.read_text())
    assert sorted(files) == ["my-cluster/group_vars/all.yml", "my-cluster/hosts.yml"]
    for text in files.values():
        assert isinstance(yaml.safe_load(text), dict)
    playbooks = [shlex.split(command)[1] for command in commands]
    assert playbooks == [
        "gpuops.training.provision_cluster",
        "gpuops.training.provision_cluster",
        "gpuops.training.train",
    ], commands


def harness_settings(namespace: str, runs_dir: Path, chart: Path, helm: Path, gpu_namespace: str) -> dict:
    """The real-node inventory's settings for the cluster and the launcher, in this namespace."""
    settings = {}
    for group in ("cluster_controllers", "training_launchers"):
        settings.update(yaml.safe_load((REPO_ROOT / INVENTORY / "group_vars" / f"{group}.yml").read_text()))
    settings.update(
        provision_cluster_roles=HARNESS_ROLES,
        training_namespace_name=namespace,
        training_job_namespace=namespace,
        secondary_networks_namespace=namespace,
        training_job_runs_dir=str(runs_dir),
        # No Multus on the test node: the pods keep their one interface, and no GPU, no IB NIC.
        training_job_network=[],
        training_job_fabric="socket",
        gpu_operator_namespace=gpu_namespace,
        gpu_operator_helm_chart=str(chart),
        gpu_operator_helm_binary=str(helm),
        gpu_operator_wait_timeout=120,
        gpu_operator_wait_poll_interval=1,
    )
    return settings


@contextlib.contextmanager
def gpu_operator_status(k8s_cluster, namespace):
    """The GPU Operator's status writes (its ClusterPolicy ready a moment after it exists)."""
    operator = FakeGpuOperator(k8s_cluster.api_client(), ready_delay=2.0, namespace=namespace, olm=False)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
                operator.step()
            stop.wait(0.3)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


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


def test_the_kubernetes_guide_runs_as_written_to_a_passed_run(
    k8s_cluster, real_node, provisioned_node, node_inventory_env, tmp_path
):
    files, commands = guide_blocks(GUIDE.read_text())
    workdir = tmp_path / "guide"
    for caption, text in files.items():
        (workdir / caption).parent.mkdir(parents=True, exist_ok=True)
        (workdir / caption).write_text(text)
    suffix = secrets.token_hex(3)
    namespace, gpu_namespace = f"guide-{suffix}", f"guide-gpu-{suffix}"
    runs_dir = workdir / "my-cluster" / "runs"
    helm = build_helm(k8s_cluster.harness.builder)
    extra_vars = tmp_path / "harness.yml"
    chart = gpu_operator_chart(k8s_cluster.harness.builder)
    extra_vars.write_text(json.dumps(harness_settings(namespace, runs_dir, chart, helm, gpu_namespace)))
    checkpoint_volume(k8s_cluster.harness, namespace)
    env = dict(
        os.environ,
        **node_inventory_env,
        ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"),
        ANSIBLE_NOCOLOR="1",
        HOME=str(tmp_path / "home"),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.pop("ANSIBLE_CONFIG", None)
    outputs = []
    try:
        with gpu_operator_status(k8s_cluster, gpu_namespace):
            for command in commands:
                result = run_command(command, workdir, extra_vars, env)
                outputs.append(result.stdout)
                assert result.returncode == 0, f"$ {command}\n{result.stdout[-6000:]}"
        check, provision, train = outputs
        # Check mode reported the changes and made none: the namespace came with the real run.
        assert re.search(r"localhost\s+: ok=\d+\s+changed=[1-9]", check), check[-3000:]
        assert re.search(r"localhost\s+: ok=\d+\s+changed=[1-9]", provision), provision[-3000:]
        verdict = re.search(r"Run (\S+): PASSED \((\d+)/(\d+) ranks reported", train)
        assert verdict and verdict.group(2) == verdict.group(3) == "2", train[-4000:]
        summary = json.loads((runs_dir / verdict.group(1) / "summary.json").read_text())
        assert summary["verdict"] == "passed"
        assert {rank["node"] for rank in summary["ranks"]} == {real_node.name}
        # What the guide promises of a second provision: nothing changes.
        again = run_command(commands[1], workdir, extra_vars, env)
        unchanged = re.search(r"localhost\s+: ok=\d+\s+changed=0 ", again.stdout)
        assert again.returncode == 0 and unchanged, again.stdout[-4000:]
    finally:
        uninstall = ["uninstall", "gpu-operator", "-n", gpu_namespace, "--ignore-not-found", "--wait"]
        subprocess.run(
            [str(helm), "--kubeconfig", str(k8s_cluster.kubeconfig), *uninstall],
            env={"HOME": str(tmp_path / "helm-home"), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=120,
            check=False,
        )
        leftovers = [
            ("clusterpolicy", "gpu-cluster-policy"),
            ("namespace", gpu_namespace),
            ("namespace", namespace),
            ("persistentvolume", f"{namespace}-checkpoints"),
        ]
        for kind, name in leftovers:
            k8s_cluster.kubectl("delete", kind, name, "--wait=false", "--ignore-not-found", check=False)

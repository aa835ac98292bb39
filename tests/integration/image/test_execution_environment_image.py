"""execution-environment.yml, built for real and run the way AWX runs a job template.

tests/podman/execution_environment.py builds the project's definition with ``ansible-builder
build --container-runtime podman`` on a local Debian base (no registry, no Galaxy: the
collection's own tarball and the collections the ``ansible`` package bundles are installed
from local copies; Python packages come from PyPI, the bindep packages from the Debian
mirror). The image must carry what the roles call, and ansible-runner inside it must run
provision_cluster.yml in check mode against the test control plane, from a private data
directory as AWX hands one to its execution environments. Image and base are cached by a
digest of their inputs: a warm run builds nothing.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import subprocess
import sys

import pytest
import yaml
from kubernetes import client
from packaging.requirements import Requirement

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "podman"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))

import execution_environment  # noqa: E402
from k8s_harness import KUBERNETES_VERSION  # noqa: E402
from pytest_plugin import k8s_cluster  # noqa: E402
from sources import HELM_VERSION  # noqa: E402

__all__ = ["k8s_cluster"]

pytestmark = pytest.mark.slow
# The user the image runs as (ansible-builder's final stage); AWX runs it the same way.
EE_UID = 1000
# Where AWX mounts the private data directory, and the image's working directory.
RUNNER_DIR = "/runner"


@pytest.fixture(scope="module")
def ee_image():
    try:
        return execution_environment.build()
    except execution_environment.ExecutionEnvironmentError as error:
        pytest.fail(str(error))


def podman_run(image, *command, options=(), timeout=600):
    return subprocess.run(
        ["podman", "run", "--rm", *options, image, *command],
        env=execution_environment.podman_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def in_image(image, script):
    result = podman_run(image, "bash", "-c", script)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_image_carries_the_collections_the_tools_and_the_python_packages_the_roles_use(ee_image):
    installed = json.loads(in_image(ee_image, "ansible-galaxy collection list --format json"))
    versions = {name: entry["version"] for path in installed.values() for name, entry in path.items()}
    galaxy = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())
    assert versions.get("gpuops.training") == galaxy["version"], versions
    for name, directory in execution_environment.bundled_collections().items():
        manifest = json.loads((directory / "MANIFEST.json").read_text())
        assert versions.get(name) == manifest["collection_info"]["version"], (name, versions)

    kubectl = json.loads(in_image(ee_image, "kubectl version --client --output=json"))
    assert kubectl["clientVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert in_image(ee_image, "helm version --short").startswith(HELM_VERSION)
    # The bindep file's [platform:dpkg] entry, installed by the scripts through apt.
    assert "OpenSSH" in in_image(ee_image, "ssh -V 2>&1")

    requirements = [
        Requirement(line).name
        for line in (REPO_ROOT / "meta" / "ee-requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    script = (
        "import importlib.metadata as m, importlib.util as u, json, sys; "
        "print(json.dumps({'versions': {n: m.version(n) for n in sys.argv[1:]}, "
        "'torch': u.find_spec('torch') is not None}))"
    )
    found = json.loads(in_image(ee_image, "python3 -c %s %s" % (json.dumps(script), " ".join(requirements))))
    assert set(found["versions"]) == set(requirements)
    # The trainer runs in its own image: the execution environment stays small.
    assert found["torch"] is False
    assert in_image(ee_image, "id -u").strip() == str(EE_UID)


def private_data_dir(root, cluster, variables):
    """A private data directory as AWX writes one: inventory, extra variables, the command
    line of a check-mode job, and a project whose playbook is the collection's."""
    for directory in ("inventory", "env", "project"):
        (root / directory).mkdir(parents=True)
    inventory = {
        "all": {
            "children": {
                "cluster_controllers": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": "/usr/bin/python3",
                        }
                    }
                }
            }
        }
    }  # fmt: skip
    (root / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (root / "kubeconfig").write_text(cluster.kubeconfig.read_text())
    kubeconfig = f"{RUNNER_DIR}/kubeconfig"
    settings = {
        "training_namespace_kubeconfig": kubeconfig,
        "secondary_networks_kubeconfig": kubeconfig,
        **variables,
    }
    (root / "env" / "extravars").write_text(yaml.safe_dump(settings))
    (root / "env" / "cmdline").write_text("--check")
    playbook = [
        {
            "name": "Provision the cluster",
            "ansible.builtin.import_playbook": "gpuops.training.provision_cluster",
        }
    ]
    (root / "project" / "provision_cluster.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    # The image's user writes the job's artifacts here.
    for path in [root, *root.rglob("*")]:
        if os.geteuid() == 0:
            os.chown(path, EE_UID, 0)
        else:
            path.chmod(0o777 if path.is_dir() else 0o666)
    return root


def test_provision_cluster_runs_in_check_mode_from_inside_the_image_against_the_cluster(
    ee_image, k8s_cluster, tmp_path
):
    namespace = "ee-" + secrets.token_hex(3)
    variables = {
        "provision_cluster_roles": ["training_namespace", "secondary_networks"],
        "training_namespace_name": namespace,
        "training_namespace_priority_class": namespace,
        "training_namespace_dataset_pvc": False,
        "training_namespace_checkpoint_pvc": False,
        "secondary_networks_namespace": namespace,
        "secondary_networks_attachments": [
            {
                "name": "rdma-net",
                "type": "macvlan",
                "master": "eth1",
                "ipam": {"type": "whereabouts", "subnet": "192.168.100.0/24"},
            },
        ],  # fmt: skip
    }
    root = private_data_dir(tmp_path / "job", k8s_cluster, variables)
    # The API server listens on 127.0.0.1: the job shares the host's network.
    result = podman_run(
        ee_image,
        "ansible-runner",
        "run",
        RUNNER_DIR,
        "--playbook",
        "provision_cluster.yml",
        "--ident",
        "check",
        options=["--network", "host", "--volume", f"{root}:{RUNNER_DIR}"],
    )
    output = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    artifacts = root / "artifacts" / "check"
    assert result.returncode == 0, output[-4000:]
    assert (artifacts / "status").read_text() == "successful", output[-4000:]
    # The play's recap, as AWX reads it: ansible-runner's job events.
    events = [json.loads(path.read_text()) for path in (artifacts / "job_events").glob("*.json")]
    (stats,) = [event["event_data"] for event in events if event["event"] == "playbook_on_stats"]
    assert stats["ok"].get("localhost", 0) > 0 and not stats["failures"] and not stats["dark"], stats
    # Check mode saw what it would create: the namespace, its quota and priority class, and the
    # attachment that waits for the namespace...
    assert stats["changed"].get("localhost", 0) > 0, output[-4000:]
    assert f"NetworkAttachmentDefinition {namespace}/rdma-net" in output
    # ...and created none of it.
    with pytest.raises(client.ApiException) as missing:
        client.CoreV1Api(k8s_cluster.api_client()).read_namespace(namespace)
    assert missing.value.status == 404

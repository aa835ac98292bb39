"""No secret reaches a log: the playbooks run at -vvv with unique secrets and their whole output
(stdout and stderr) is searched for them.

What carries secrets in this collection: the extra environment variables of a run
(``training_job_env``, ``nccl_tests_env``: API keys and tokens such as WANDB_API_KEY or
HF_TOKEN), the kubeconfig the Kubernetes tasks read (a bearer token in it), and the image pull
Secrets the roles read to check that they exist (registry credentials, searched for as written
and as the API returns them, base64-encoded). No module
option takes a token, a password or a kubeconfig's content (``kubeconfig`` is a path);
test_module_options_that_could_carry_secrets_are_no_log keeps it that way.

Each playbook goes as far as it can without a cluster: the Kubernetes launchers against a
kubeconfig whose server refuses connections (the objects, environment included, are rendered
and handed to the apply task before it fails), the Run:ai launcher with its CLI missing and
with a CLI that refuses the submission, the local and SSH launchers with a stand-in for the
Python interpreter (torchrun is started with the environment, then verification fails), and
nccl-tests with stand-in binaries and as an MPIJob. One run goes to the real Kubernetes test
harness, where the pods are created and run through kwok.

The playbooks run from the installed collection (`make collection`).
"""

from __future__ import annotations

import base64
import importlib
import json
import pathlib
import re
import sys
import uuid

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "harness"))

from figures import TALLY  # noqa: E402
from playbook_runner import REPO_ROOT, ansible_playbook  # noqa: E402
from pytest_plugin import k8s_cluster  # noqa: E402

__all__ = ["k8s_cluster"]

COLLECTIONS = REPO_ROOT / ".collections"
PYTHON = sys.executable
# One value per run of the suite, so an old log can never make a test pass or fail.
ENV_SECRET = "s3cr3t-env-%s" % uuid.uuid4().hex
TOKEN_SECRET = "s3cr3t-token-%s" % uuid.uuid4().hex
NCCL_SECRET = "s3cr3t-nccl-%s" % uuid.uuid4().hex
PULL_SECRET = "s3cr3t-pull-%s" % uuid.uuid4().hex
# An image pull Secret's content, and that content as a Secret read returns it.
PULL_CONFIG = json.dumps({"auths": {"registry.example": {"username": "robot", "password": PULL_SECRET}}})
PULL_CONFIG_B64 = base64.b64encode(PULL_CONFIG.encode()).decode()
SECRETS = (ENV_SECRET, TOKEN_SECRET, NCCL_SECRET, PULL_SECRET, PULL_CONFIG_B64)
# Option names that say the value is a credential.
SECRET_NAMES = ("token", "password", "passwd", "secret", "api_key", "apikey", "headers", "credential")


@pytest.fixture(scope="module")
def installed():
    if not (COLLECTIONS / "ansible_collections" / "gpuops" / "training" / "MANIFEST.json").exists():
        pytest.fail("the collection is not installed into .collections: run `make collection` first")
    return COLLECTIONS


@pytest.fixture
def unreachable_kubeconfig(tmp_path, monkeypatch):
    """A kubeconfig with a bearer token whose server refuses connections; also the default."""
    path = tmp_path / "unreachable.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": TOKEN_SECRET}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    path.chmod(0o600)
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", str(path))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def stand_in(tmp_path, name, script="exit 0"):
    """An executable that does what ``script`` says and nothing with its arguments."""
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n%s\n" % script)
    path.chmod(0o755)
    return path


def run_vvv(playbook, inventory, variables, tmp_path, *options, timeout=600):
    """ansible-playbook -vvv with the variables as an extra-vars file; the whole output."""
    variables_file = tmp_path / "vars.json"
    variables_file.write_text(json.dumps(dict(variables, ansible_python_interpreter=PYTHON)))
    run = ansible_playbook(
        "-vvv",
        "-i",
        inventory,
        "-e",
        "@%s" % variables_file,
        *options,
        playbook,
        collections_path=COLLECTIONS,
        timeout=timeout,
    )
    return run


def assert_no_secret(run, *must_have_run):
    """No secret in the output; and the tasks that carried them did run (named in the output)."""
    for task in must_have_run:
        assert task in run.output, "the task %r did not run: %r" % (task, run)
    TALLY["playbook runs searched for secrets"] += 1
    TALLY["secret searches"] += len(SECRETS)
    TALLY["secrets leaked"] += sum(secret in run.output for secret in SECRETS)
    for secret in SECRETS:
        if secret in run.output:
            lines = [line[:300] for line in run.output.splitlines() if secret in line]
            pytest.fail("a secret reached the output in %d lines, first: %s" % (len(lines), lines[:3]))


def assert_no_secret_in_shared_files(root):
    """No file under ``root`` that the group or others may read holds a secret (run.json,
    manifests.yaml, launcher logs); and the run did write files there."""
    files = [path for path in pathlib.Path(root).rglob("*") if path.is_file()]
    assert files, "the run wrote nothing under %s" % root
    readable = [path for path in files if path.stat().st_mode & 0o044]
    TALLY["shared run files searched"] += len(readable)
    leaked = [str(path) for path in readable for secret in SECRETS if secret.encode() in path.read_bytes()]
    TALLY["secrets leaked"] += len(leaked)
    assert leaked == [], "readable by others and holding a secret: %s" % leaked


def cluster_vars(tmp_path, launcher, kubeconfig, **extra):
    settings = {
        "training_job_launcher": launcher,
        "training_job_name": "nosecret",
        "training_job_run_id": "nosecret-%s" % uuid.uuid4().hex[:8],
        "training_job_runs_dir": str(tmp_path / "runs"),
        "training_job_kubeconfig": str(kubeconfig),
        "training_job_image": "registry.example/gpuops-trainer:test",
        "training_job_gpus_per_node": 0,
        "training_job_cpu": "1",
        "training_job_memory": "8Gi",
        "training_job_timeout_s": 60,
        "training_job_env": {"WANDB_API_KEY": ENV_SECRET, "NCCL_DEBUG_SUBSYS": "INIT"},
    }
    settings.update(extra)
    return settings


def test_module_options_that_could_carry_secrets_are_no_log():
    """Every module option named like a credential is no_log, and none takes kubeconfig content."""
    offenders = []
    for path in sorted((REPO_ROOT / "plugins" / "modules").glob("*.py")):
        module = importlib.import_module("ansible_collections.gpuops.training.plugins.modules." + path.stem)
        options = yaml.safe_load(module.DOCUMENTATION).get("options") or {}
        source = path.read_text()
        for name, option in options.items():
            if any(word in name.lower() for word in SECRET_NAMES) and "no_log" not in source:
                offenders.append("%s.%s" % (path.stem, name))
            if name == "kubeconfig" and option.get("type") != "path":
                offenders.append("%s.kubeconfig takes content, not a path" % path.stem)
    assert offenders == []


@pytest.mark.parametrize("launcher", ["pytorchjob", "indexed_job", "trainjob"])
def test_kubernetes_launchers_against_an_unreachable_server(
    installed, tmp_path, unreachable_kubeconfig, launcher
):
    run = run_vvv(
        "playbooks/train.yml",
        "inventories/local",
        cluster_vars(tmp_path, launcher, unreachable_kubeconfig),
        tmp_path,
    )
    assert run.rc != 0, run
    assert_no_secret(run, "TASK [gpuops.training.training_job : Apply", "Connection refused")
    assert_no_secret_in_shared_files(tmp_path / "runs")


def test_runai_without_its_cli(installed, tmp_path, unreachable_kubeconfig):
    run = run_vvv(
        "playbooks/train.yml",
        "inventories/local",
        cluster_vars(
            tmp_path, "runai", unreachable_kubeconfig, training_job_runai_cli=str(tmp_path / "no-runai")
        ),
        tmp_path,
    )
    assert run.rc != 0, run
    # The command to submit by hand is shown, with the variable's name and without its value.
    assert_no_secret(run, "runai training pytorch submit", "WANDB_API_KEY")


def test_runai_refusing_the_submission(installed, tmp_path, unreachable_kubeconfig):
    runai = stand_in(tmp_path, "runai", "echo 'denied: not logged in' >&2; exit 1")
    run = run_vvv(
        "playbooks/train.yml",
        "inventories/local",
        cluster_vars(tmp_path, "runai", unreachable_kubeconfig, training_job_runai_cli=str(runai)),
        tmp_path,
    )
    assert run.rc != 0, run
    assert_no_secret(run, "TASK [gpuops.training.training_job : Submit the run", "denied: not logged in")
    assert_no_secret_in_shared_files(tmp_path / "runs")


def local_vars(tmp_path, launcher, **extra):
    settings = {
        "training_job_launcher": launcher,
        "training_job_runs_dir": str(tmp_path / "runs"),
        "training_job_run_id": "nosecret-%s" % uuid.uuid4().hex[:8],
        "training_job_python": str(stand_in(tmp_path, "python-stand-in")),
        "training_job_timeout_s": 60,
        "training_job_env": {"WANDB_API_KEY": ENV_SECRET, "NCCL_DEBUG_SUBSYS": "INIT"},
    }
    settings.update(extra)
    return settings


def test_local_launcher(installed, tmp_path):
    seen = tmp_path / "seen"
    seen.mkdir()
    # The stand-in records what the rank got in its environment, and the command lines of
    # itself and of its parent (`timeout`), which any user of the node can read with `ps`.
    recorder = stand_in(
        tmp_path,
        "python-recorder",
        'printf %%s "$WANDB_API_KEY" > %(seen)s/env\n'
        "tr '\\0' ' ' < /proc/$$/cmdline > %(seen)s/cmdline\n"
        "tr '\\0' ' ' < /proc/$PPID/cmdline >> %(seen)s/cmdline\n"
        'ls -A "$PWD" > %(seen)s/run-dir' % {"seen": seen},
    )
    variables = local_vars(tmp_path, "local", training_job_python=str(recorder))
    run = run_vvv("playbooks/train.yml", "inventories/local", variables, tmp_path)
    assert run.rc != 0, run  # the stand-in trains nothing, so verification fails
    assert_no_secret(run, "TASK [gpuops.training.training_job : Run torchrun", "AnsiballZ_command.py")
    assert (seen / "env").read_text() == ENV_SECRET  # the rank did get the value
    assert "timeout" in (seen / "cmdline").read_text()
    assert ENV_SECRET not in (seen / "cmdline").read_text()
    # The environment file is read and removed before torchrun starts.
    assert ".rank-environment" not in (seen / "run-dir").read_text().split()
    assert not list((tmp_path / "runs").rglob(".rank-environment"))
    assert_no_secret_in_shared_files(tmp_path / "runs")


def test_ssh_launcher(installed, tmp_path):
    run = run_vvv(
        "playbooks/train.yml",
        "inventories/local",
        local_vars(tmp_path, "ssh", training_job_ssh_hosts=["localhost"], training_job_poll_interval_s=1),
        tmp_path,
    )
    assert run.rc != 0, run
    assert_no_secret(run, "TASK [gpuops.training.training_job : Start torchrun on every node")


def nccl_vars(tmp_path, launcher, **extra):
    binaries = tmp_path / "nccl-tests"
    binaries.mkdir()
    for collective in ("all_reduce", "all_gather"):
        (binaries / ("%s_perf" % collective)).write_text("#!/bin/sh\necho '# nccl-tests stand-in'\n")
        (binaries / ("%s_perf" % collective)).chmod(0o755)
    settings = {
        "nccl_tests_hosts": "localhost",
        "nccl_tests_launcher": launcher,
        "nccl_tests_binaries_dir": str(binaries),
        "nccl_tests_collectives": ["all_reduce"],
        "nccl_tests_runs_dir": str(tmp_path / "runs"),
        "nccl_tests_gpus_per_node": 1,
        "nccl_tests_gpus_per_process": 1,
        "nccl_tests_timeout_s": 60,
        "nccl_tests_env": {"NCCL_IB_HCA": "mlx5", "HF_TOKEN": NCCL_SECRET},
    }
    settings.update(extra)
    return settings


def test_nccl_tests_local(installed, tmp_path):
    run = run_vvv(
        "playbooks/nccl_tests.yml",
        "localhost,",
        nccl_vars(tmp_path, "local"),
        tmp_path,
        "-c",
        "local",
    )
    assert_no_secret(run, "all_reduce_perf")


def test_nccl_tests_mpijob_against_an_unreachable_server(installed, tmp_path, unreachable_kubeconfig):
    run = run_vvv(
        "playbooks/nccl_tests.yml",
        "localhost,",
        nccl_vars(
            tmp_path,
            "mpijob",
            nccl_tests_image="registry.example/nccl-tests:test",
            nccl_tests_kubeconfig=str(unreachable_kubeconfig),
            nccl_tests_cpu="1",
            nccl_tests_memory="8Gi",
            nccl_tests_shm_size="1Gi",
            nccl_tests_fabric="socket",
        ),
        tmp_path,
        "-c",
        "local",
    )
    assert run.rc != 0, run
    assert_no_secret(run, "Connection refused")


def test_cluster_roles_do_not_show_the_kubeconfig_token(installed, tmp_path, unreachable_kubeconfig):
    """The training_namespace role (as provision_cluster.yml runs it) against the token's server."""
    playbook = tmp_path / "namespace.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "A training namespace",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "roles": [{"role": "gpuops.training.training_namespace"}],
                }
            ]
        )
    )
    run = run_vvv(
        str(playbook),
        "localhost,",
        {"training_namespace_kubeconfig": str(unreachable_kubeconfig)},
        tmp_path,
    )
    assert run.rc != 0, run
    assert_no_secret(run, "Connection refused")


def create_pull_secret(k8s_cluster, namespace, name="regcred"):
    k8s_cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": PULL_CONFIG_B64},
        }
    )


def test_a_run_on_the_real_harness(installed, tmp_path, k8s_cluster):
    """pytorchjob against the harness: the objects are applied and the pods run through kwok;
    the role reads the pods' image pull Secret to check it exists, and the pods carry it."""
    namespace = "ns-%s" % uuid.uuid4().hex[:6]
    k8s_cluster.kubectl("create", "namespace", namespace)
    k8s_cluster.kubectl("wait", "--for=create", "--timeout=30s", "-n", namespace, "serviceaccount/default")
    create_pull_secret(k8s_cluster, namespace)
    try:
        run = run_vvv(
            "playbooks/train.yml",
            "inventories/local",
            cluster_vars(
                tmp_path,
                "pytorchjob",
                k8s_cluster.kubeconfig,
                training_job_namespace=namespace,
                training_job_checkpoint_pvc="",
                training_job_timeout_s=120,
                training_job_progress_interval_s=5,
                training_job_poll_interval_s=1,
                training_job_pod_annotations={"gpuops.test/run-duration": "1s"},
                training_job_image_pull_secrets=["regcred"],
            ),
            tmp_path,
        )
        stored = json.loads(k8s_cluster.kubectl("get", "pytorchjobs", "-n", namespace, "-o", "json").stdout)[
            "items"
        ]
        pods = json.loads(k8s_cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    finally:
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    # The run reached the server with the secret in its environment (where it belongs) ...
    assert stored and ENV_SECRET in json.dumps(stored), run
    # ... and the run itself went its way without printing it.
    assert_no_secret(
        run,
        "TASK [gpuops.training.training_job : Read the image pull Secrets",
        "TASK [gpuops.training.training_job : Apply",
        "Watch the workload",
        "Stream every pod's log",
    )
    assert_no_secret_in_shared_files(tmp_path / "runs")
    # kwok serves these pods no log: verification stops naming each pod whose log was refused.
    refused = r"the log of pod \S+-worker-0 on \S+ could not be read \(the API server answered 400"
    assert re.search(refused, run.output), run
    # The PyTorchJob's pods name the Secret (and hold nothing of it).
    assert pods, run
    for pod in pods:
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}], pod["metadata"]["name"]


def test_the_roles_that_read_pull_secrets_do_not_show_them(installed, tmp_path, k8s_cluster):
    """training_namespace puts the Secret on the ServiceAccount after reading it; nccl_tests
    reads it and a missing one, and stops naming the missing one."""
    namespace = "ns-%s" % uuid.uuid4().hex[:6]
    k8s_cluster.kubectl("create", "namespace", namespace)
    create_pull_secret(k8s_cluster, namespace)
    playbook = tmp_path / "namespace.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "A training namespace",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "roles": [{"role": "gpuops.training.training_namespace"}],
                }
            ]
        )
    )
    try:
        run = run_vvv(
            str(playbook),
            "localhost,",
            {
                "training_namespace_kubeconfig": str(k8s_cluster.kubeconfig),
                "training_namespace_name": namespace,
                "training_namespace_priority_class": "",
                "training_namespace_image_pull_secrets": ["regcred"],
            },
            tmp_path,
        )
        assert run.rc == 0, run
        assert_no_secret(run, "TASK [gpuops.training.training_namespace : Read the image pull Secrets")
        account = json.loads(
            k8s_cluster.kubectl("get", "sa", "trainer", "-n", namespace, "-o", "json").stdout
        )
        assert account["imagePullSecrets"] == [{"name": "regcred"}]

        nccl = run_vvv(
            "playbooks/nccl_tests.yml",
            "localhost,",
            nccl_vars(
                tmp_path,
                "mpijob",
                nccl_tests_image="registry.example/nccl-tests:test",
                nccl_tests_kubeconfig=str(k8s_cluster.kubeconfig),
                nccl_tests_namespace=namespace,
                nccl_tests_cpu="1",
                nccl_tests_memory="8Gi",
                nccl_tests_shm_size="1Gi",
                nccl_tests_fabric="socket",
                nccl_tests_image_pull_secrets=["regcred", "missing"],
            ),
            tmp_path,
            "-c",
            "local",
        )
        assert nccl.rc != 0, nccl
        assert "Secret missing, named in nccl_tests_image_pull_secrets, does not exist in namespace %s" % (
            namespace
        ) in " ".join(nccl.output.split()), nccl
        assert_no_secret(nccl, "TASK [gpuops.training.nccl_tests : Read the image pull Secrets")
        assert k8s_cluster.kubectl("get", "mpijobs", "-n", namespace, "-o", "name").stdout == ""
    finally:
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        k8s_cluster.kubectl(
            "delete",
            "securitycontextconstraints.security.openshift.io",
            "gpuops-training-" + namespace,
            "--ignore-not-found",
            check=False,
        )

"""roles/trainer_image run by ansible-playbook on this machine: it builds training/Containerfile
with containers.podman and pushes it to a real registry on 127.0.0.1 (TLS, htpasswd).

The build gets the local base and the offline pip settings of tests/podman/trainer_image.py
through the role's own variables (trainer_image_base, trainer_image_build_args,
trainer_image_build_volumes), as a user passes their CUDA PyTorch base and their index.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import uuid

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "podman"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

import trainer_image  # noqa: E402
from figures import TALLY  # noqa: E402
from playbook_runner import run_role_locally  # noqa: E402
from registry import Registry  # noqa: E402

# One name per test session, so that no earlier run's image decides a result.
SESSION = uuid.uuid4().hex[:8]
USERNAME = "trainer-ci"
PASSWORD = "s3cr3t-registry-%s" % uuid.uuid4().hex


@pytest.fixture(scope="module")
def build_variables():
    """The role's variables that build on the local base, offline."""
    inputs = trainer_image.build_inputs()
    arguments = dict(inputs["build_args"])
    return {
        "trainer_image_base": arguments.pop("BASE_IMAGE"),
        "trainer_image_build_args": arguments,
        "trainer_image_build_volumes": inputs["volumes"],
        "trainer_image_pull_policy": "never",
    }


@pytest.fixture(autouse=True)
def podman_settings(monkeypatch):
    monkeypatch.setenv("CONTAINERS_CONF", str(trainer_image.CONTAINERS_CONF))


def podman(*args):
    return subprocess.run(
        ["podman", *args], env=trainer_image.podman_environment(), capture_output=True, text=True, check=False
    )


def remove_image(name):
    podman("rmi", "--force", name)


def recap(output):
    found = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", output)
    assert found, output[-3000:]
    return {"ok": int(found.group(1)), "changed": int(found.group(2)), "failed": int(found.group(3))}


def image_ref(output):
    found = re.search(r"Use it with training_job_image=(\S+)", output)
    assert found, output[-3000:]
    return found.group(1)


def assert_no_secret(output):
    TALLY["playbook runs searched for secrets"] += 1
    TALLY["secret searches"] += 2
    encoded = base64.b64encode(("%s:%s" % (USERNAME, PASSWORD)).encode()).decode()
    for secret in (PASSWORD, encoded):
        if secret in output:
            TALLY["secrets leaked"] += 1
        assert secret not in output, "the registry password (or its auth entry) is in the output"


def leftover_auth_dirs():
    return sorted(pathlib.Path(tempfile.gettempdir()).glob("*-gpuops-trainer-image"))


def test_bad_settings_fail_in_the_first_task_before_anything_changes(build_variables):
    name = "gpuops-trainer-bad-%s" % SESSION
    bad = {
        "trainer_image_base": "",
        "trainer_image_name": name,
        "trainer_image_tag": "-v1",
        "trainer_image_push": True,
        "trainer_image_username": USERNAME,
        "trainer_image_uid": 0,
        "trainer_image_build_args": {"BASE_IMAGE": "other", "PIP INDEX": "x"},
        "trainer_image_build_volumes": ["relative:/wheels"],
    }
    run = run_role_locally("trainer_image", {**build_variables, **bad})
    assert run.rc == 2, run
    assert recap(run.output) == {"ok": 1, "changed": 0, "failed": 1}  # the argument spec, then this check
    for named in (
        "trainer_image_base must name the base image",
        "trainer_image_tag must be up to 128",
        "got -v1",
        "trainer_image_push is true but trainer_image_registry is empty",
        "trainer_image_username and trainer_image_password must be given together",
        "trainer_image_uid must be a user id above 0 (the trainer never runs as root), got 0",
        "trainer_image_build_args may not set BASE_IMAGE",
        'got the names ["PIP INDEX"]',
        'trainer_image_build_volumes entries must be /host/path:/container/path[:options], got ["relative',
    ):
        assert named in run.output, named
    assert podman("image", "exists", "localhost/%s:-v1" % name).returncode != 0

    # A type the argument spec refuses, and a context without a Containerfile.
    run = run_role_locally("trainer_image", {**build_variables, "trainer_image_uid": "root"})
    assert run.rc == 2 and "trainer_image_uid" in run.output, run
    run = run_role_locally(
        "trainer_image",
        {**build_variables, "trainer_image_name": name, "trainer_image_context": str(REPO_ROOT)},
    )
    assert run.rc == 2, run
    assert "%s has no Containerfile" % REPO_ROOT in run.output
    assert recap(run.output)["changed"] == 0


def test_check_mode_reports_the_build_and_the_build_sets_the_fact(build_variables):
    name = "gpuops-trainer-role-%s" % SESSION
    local = "localhost/%s:0.1.0" % name
    variables = {**build_variables, "trainer_image_name": name}
    try:
        run = run_role_locally("trainer_image", variables, "--check")
        assert run.rc == 0, run
        assert recap(run.output)["changed"] == 1, run  # the build it would make
        assert podman("image", "exists", local).returncode != 0

        run = run_role_locally("trainer_image", variables)
        assert run.rc == 0, run
        assert recap(run.output)["changed"] == 1
        assert image_ref(run.output) == local
        config = json.loads(podman("image", "inspect", local).stdout)[0]["Config"]
        assert config["User"] == "1000:1000"
        assert config["Entrypoint"] == ["python3", "-m", "gpuops_trainer.launch"]
        # A second run changing nothing: the push test's second run (build and push) shows it.
    finally:
        remove_image(local)


def test_the_push_with_credentials_sets_the_digest_and_a_second_run_changes_nothing(
    build_variables, tmp_path
):
    with Registry(tmp_path / "registry", USERNAME, PASSWORD) as registry:
        destination = "%s/ml" % registry.address
        local = "%s/gpuops-trainer:0.1.0" % destination
        variables = {
            **build_variables,
            "trainer_image_registry": destination,
            "trainer_image_push": True,
            "trainer_image_username": USERNAME,
            "trainer_image_password": PASSWORD,
            "trainer_image_ca_cert_dir": str(registry.cert_dir),
        }
        try:
            run = run_role_locally("trainer_image", variables, "-vvv")
            assert_no_secret(run.output)
            assert run.rc == 0, run
            assert recap(run.output)["changed"] == 2  # the build and the push
            ref = image_ref(run.output)
            assert re.fullmatch(re.escape(destination) + r"/gpuops-trainer@sha256:[0-9a-f]{64}", ref), ref

            # The registry serves that digest, and its image is the one built here.
            auth = tmp_path / "auth.json"
            entry = base64.b64encode(("%s:%s" % (USERNAME, PASSWORD)).encode()).decode()
            auth.write_text(json.dumps({"auths": {destination: {"auth": entry}}}))
            inspect = ["skopeo", "inspect", "--authfile", str(auth), "--cert-dir", str(registry.cert_dir)]
            manifest = subprocess.run(
                [*inspect, "--raw", "docker://" + ref], capture_output=True, text=True, check=True
            )
            local_id = json.loads(podman("image", "inspect", local).stdout)[0]["Id"]
            assert json.loads(manifest.stdout)["config"]["digest"] == "sha256:" + local_id

            run = run_role_locally("trainer_image", variables, "-vvv")
            assert_no_secret(run.output)
            assert run.rc == 0 and recap(run.output)["changed"] == 0, run
            assert image_ref(run.output) == ref
            assert "the registry already held it" in run.output
            run = run_role_locally("trainer_image", variables, "--check")
            assert run.rc == 0 and recap(run.output)["changed"] == 0, run

            # Wrong credentials stop the role at the registry's answer, before the build.
            wrong = {**variables, "trainer_image_password": PASSWORD[::-1], "trainer_image_tag": "wrong"}
            run = run_role_locally("trainer_image", wrong, "-vvv")
            assert PASSWORD[::-1] not in run.output
            assert run.rc == 2, run
            assert "unauthorized" in run.output.lower()
            assert recap(run.output)["changed"] == 0
            assert podman("image", "exists", "%s/gpuops-trainer:wrong" % destination).returncode != 0
        finally:
            remove_image(local)
    assert not leftover_auth_dirs(), "the role left its credentials behind"

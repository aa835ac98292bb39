"""training/Containerfile, built and run with podman on this machine.

The image is built from the Containerfile itself, offline, on the local base of
tests/podman/trainer_image.py: a Debian root filesystem whose Python and torch come from this
machine, mounted read-only, and nothing else of the venv, so pip in the build must install what
training/pyproject.toml declares beyond torch (pycocotools). It then runs as its own non-root
user: the pod of a PyTorchJob rendered by the collection (its command, environment, security
context and host name), and the image run directly with torchrun's arguments.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "podman"))

import trainer_image  # noqa: E402

from ansible_collections.gpuops.training.plugins.module_utils import training_workload  # noqa: E402

RUN_ID = "image-test"
PODMAN = ["podman"]
# A small CPU run that still trains and writes a checkpoint (as tests/integration/launch's).
TRAINER_ARGS = [
    "--model=retinanet_resnet18_fpn",
    "--dataset=synthetic",
    "--synthetic-images=8",
    "--synthetic-classes=3",
    "--image-size=64",
    "--min-size=64",
    "--max-size=64",
    "--epochs=1",
    "--batch-size=2",
    "--workers=0",
    "--dist-backend=gloo",
    "--print-freq=1",
    "--threads=1",
    "--no-eval-at-end",
]


@pytest.fixture(scope="module")
def image():
    """training/Containerfile built on the local base (cached layers: seconds when unchanged)."""
    return trainer_image.build_trainer_image()


def podman(*args, timeout=600):
    return subprocess.run(
        [*PODMAN, *args],
        env=trainer_image.podman_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def writable_by_the_image_user(path):
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, trainer_image.TRAINER_UID, trainer_image.TRAINER_GID)
    else:
        path.chmod(0o777)
    return path


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_image_runs_as_a_non_root_user_with_the_launcher_as_its_entry_point(image):
    inspected = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    assert inspected["User"] == "1000:1000"
    assert inspected["Entrypoint"] == ["python3", "-m", "gpuops_trainer.launch"]
    assert inspected["WorkingDir"] == "/workspace"
    assert not [env for env in inspected["Env"] if env.startswith(("PIP_INDEX_URL", "PIP_FIND_LINKS"))]

    # Run with no arguments: the default command is torchrun's help, through the launcher.
    helped = podman("run", "--rm", "--network", "none", *trainer_image.run_arguments(), image)
    assert helped.returncode == 0, helped.stderr
    assert "--nproc-per-node" in helped.stdout


def test_the_evaluation_module_imports_with_pycocotools_the_image_installed_itself(image):
    probe = (
        "import json, os, gpuops_trainer, gpuops_trainer.evaluate, pycocotools, torch;"
        "print(json.dumps([os.getuid(), os.getgid(), os.getcwd(), gpuops_trainer.__file__,"
        " pycocotools.__file__, torch.__file__]))"
    )
    result = podman(
        "run",
        "--rm",
        "--network",
        "none",
        *trainer_image.run_arguments(),
        "--entrypoint",
        "python3",
        image,
        "-c",
        probe,
    )
    assert result.returncode == 0, result.stderr
    uid, gid, cwd, trainer, pycocotools, torch = json.loads(result.stdout)
    assert (uid, gid, cwd) == (1000, 1000, "/workspace")
    site = "/opt/venv/lib/python%d.%d/site-packages/" % sys.version_info[:2]
    # Installed by the Containerfile's pip, from what pyproject.toml declares ...
    assert trainer.startswith(site) and pycocotools.startswith(site)
    # ... on the base's torch, which is not installed again.
    assert torch.startswith("/opt/host-torch/")


def test_a_pytorchjob_pod_trains_in_the_image_as_its_user(image, tmp_path):
    """The collection's own PyTorchJob worker, run as its pod would: command, environment,
    capabilities, host name (the rendezvous endpoint), /checkpoints mounted."""
    settings = {
        "launcher": "pytorchjob",
        "name": "imgtest",
        "run_id": RUN_ID,
        "image": image,
        "nnodes": 1,
        "nproc_per_node": 2,
        "gpus_per_node": 0,
        "cpu": "2",
        "memory": "4Gi",
        "backend": "gloo",
        "workers": 0,
        "threads_per_process": 1,
        # The run of TRAINER_ARGS, as training_job's settings.
        "model": "retinanet_resnet18_fpn",
        "dataset": "synthetic",
        "synthetic_images": 8,
        "synthetic_classes": 3,
        "image_size": 64,
        "min_size": 64,
        "max_size": 64,
        "epochs": 1,
        "batch_size": 2,
        "print_freq": 1,
        "extra_args": ["--no-eval-at-end"],
    }
    (job,), _command = training_workload.pytorchjob(settings)
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    endpoint = next(arg for arg in container["command"] if arg.startswith("--rdzv-endpoint="))
    host = endpoint.split("=", 1)[1].rsplit(":", 1)[0]
    capabilities = container["securityContext"]["capabilities"]
    assert container["command"][:3] == ["python3", "-m", "gpuops_trainer.launch"]
    assert set(TRAINER_ARGS) <= set(container["command"]), container["command"]

    checkpoints = writable_by_the_image_user(tmp_path / "checkpoints")
    options = ["--rm", "--hostname", host, "--volume", "%s:/checkpoints" % checkpoints]
    options += ["--security-opt", "no-new-privileges"]
    options += ["--cap-drop", ",".join(capabilities["drop"]), "--cap-add", ",".join(capabilities["add"])]
    for variable in container["env"]:
        # What the downward API would fill in (the node's name) has no value under podman.
        if "value" in variable:
            options += ["--env", "%s=%s" % (variable["name"], variable["value"])]
    result = podman(
        "run",
        *options,
        *trainer_image.run_arguments(),
        "--entrypoint",
        container["command"][0],
        image,
        *container["command"][1:],
    )
    assert result.returncode == 0, result.stderr[-4000:]

    run = checkpoints / RUN_ID
    for rank in (0, 1):
        events = records(run / "metrics" / ("rank%d.jsonl" % rank))
        start = next(event for event in events if event["event"] == "run_start")
        assert (start["world_size"], start["backend"], start["uid"]) == (2, "gloo", 1000)
        assert events[-1]["event"] == "run_end" and events[-1]["status"] == "ok", events[-1]
    # Every rank's records on stdout too, as kubectl logs shows them.
    ends = [json.loads(line) for line in result.stdout.splitlines() if '"event":"run_end"' in line]
    assert sorted(end["rank"] for end in ends) == [0, 1]
    saved = [event for event in records(run / "metrics" / "rank0.jsonl") if event["event"] == "checkpoint"]
    assert saved, "rank 0 wrote no checkpoint"
    checkpoint = run / "checkpoints" / pathlib.PurePosixPath(saved[-1]["path"]).name
    assert checkpoint.stat().st_size == saved[-1]["bytes"]
    assert checkpoint.stat().st_uid == trainer_image.TRAINER_UID


def test_run_directly_it_takes_torchruns_arguments_and_exits_with_the_trainers_code(image, tmp_path):
    # COCO without its annotation files is a data error: exit 3, permanent, from the rank
    # through the launcher to the container, where restart policies read it.
    output = writable_by_the_image_user(tmp_path / "output")
    result = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--volume",
        "%s:/output" % output,
        *trainer_image.run_arguments(),
        image,
        "--standalone",
        "--nproc-per-node=1",
        "-m",
        "gpuops_trainer.train",
        "--output-dir=/output/run",
        "--dataset=coco",
        "--data-path=/workspace/no-such-dataset",
        "--threads=1",
    )
    assert result.returncode == 3, result.stderr[-4000:]
    assert "/workspace/no-such-dataset" in result.stderr


def test_a_module_pyproject_toml_does_not_declare_fails_the_build(tmp_path):
    # The defect this image had: pyproject.toml without pycocotools. The build's import check
    # stops it, naming the module, instead of every rank of every run.
    context = tmp_path / "training"
    shutil.copytree(
        trainer_image.TRAINING_DIR, context, ignore=shutil.ignore_patterns("tests", "__pycache__")
    )
    pyproject = context / "pyproject.toml"
    pyproject.write_text(re.sub(r',\s*"pycocotools"', "", pyproject.read_text()))
    assert "pycocotools" not in re.search(r"dependencies = \[.*\]", pyproject.read_text()).group(0)
    with pytest.raises(trainer_image.TrainerImageError) as failed:
        trainer_image.build_trainer_image(image="localhost/gpuops-trainer:undeclared-test", context=context)
    assert "No module named 'pycocotools'" in str(failed.value)


def test_the_image_builds_into_another_containers_storage(tmp_path):
    # As the real node's CRI-O reads it: podman --root/--runroot (the base's root filesystem is
    # copied over from podman's own storage, not bootstrapped again).
    runroot = tempfile.mkdtemp(prefix="gpuops-runroot-", dir="/tmp")  # podman: at most 50 characters
    storage = trainer_image.Storage(str(tmp_path / "root"), runroot)
    name = "localhost/gpuops-trainer:other-storage-test"
    try:
        assert trainer_image.build_trainer_image(storage, image=name) == name
        assert trainer_image.image_exists(name, storage)
        assert not trainer_image.image_exists(name)  # not in podman's own storage
        listed = subprocess.run(
            [*storage.podman(), "images", "--format", "{{.Repository}}"],
            env=trainer_image.podman_environment(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert {"localhost/gpuops-trainer-rootfs", "localhost/gpuops-trainer-base"} <= set(listed)
    finally:
        subprocess.run(
            [*storage.podman(), "rmi", "--all", "--force"],
            env=trainer_image.podman_environment(),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(runroot, ignore_errors=True)

"""playbooks/train.yml with the runai launcher: the command is built from the same settings as
the Kubernetes launchers; without the CLI the play stops showing it, with a CLI on the PATH
(here a stand-in that records its arguments) the command runs."""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest

PLAYBOOK = "playbooks/train.yml"
INVENTORY = "inventories/local"
IMAGE = "registry.example/gpuops-trainer:test"

FAKE_RUNAI = """#!{python}
import json, os, sys
with open(os.environ["FAKE_RUNAI_RECORD"], "w") as record:
    json.dump(sys.argv[1:], record)
if os.environ.get("FAKE_RUNAI_FAIL"):
    sys.stderr.write("project vision not found\\n")
    sys.exit(1)
print("The job '%s' has been submitted successfully" % sys.argv[4])
"""


def runai_vars(runs_dir, **extra):
    settings = {
        "training_job_launcher": "runai",
        "training_job_name": "rn",
        "training_job_runs_dir": str(runs_dir),
        "training_job_image": IMAGE,
        "training_job_nnodes": 2,
        "training_job_nproc_per_node": 1,
        "training_job_gpus_per_node": 1,
        "training_job_backend": "auto",
        "training_job_cpu": "4",
        "training_job_memory": "16Gi",
        "training_job_fabric": "ib",
        "training_job_network": "rdma-net",
        "training_job_run_as_user": 2000,
        "training_job_run_as_group": 2000,
        "training_job_runai_project": "vision",
    }
    settings.update(extra)
    return settings


@pytest.fixture
def fake_runai(tmp_path, monkeypatch):
    """A `runai` on the PATH that records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "runai"
    script.write_text(FAKE_RUNAI.format(python=sys.executable))
    script.chmod(0o755)
    record = tmp_path / "argv.json"
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ.get("PATH", "")))
    monkeypatch.setenv("FAKE_RUNAI_RECORD", str(record))
    return record


def test_without_the_cli_the_play_stops_showing_the_command(run_playbook, tmp_path, monkeypatch):
    # Whatever this machine has, the PATH the play sees has no runai.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    run = run_playbook(PLAYBOOK, INVENTORY, runai_vars(tmp_path / "runs"))
    assert run.rc != 0, run
    output = " ".join(run.output.split())
    assert "The runai CLI (runai) is not on the PATH of localhost, so nothing was submitted" in output
    assert "or submit the run yourself with: runai training pytorch submit rn-" in output
    assert "--image registry.example/gpuops-trainer:test --workers 1" in output
    assert "--command -- python3 -m gpuops_trainer.launch --nnodes=2" in output
    assert not (tmp_path / "runs").exists()


def test_with_the_cli_on_the_path_the_command_runs(run_playbook, tmp_path, fake_runai):
    run = run_playbook(PLAYBOOK, INVENTORY, runai_vars(tmp_path / "runs"))
    assert run.rc == 0, run
    argv = json.loads(fake_runai.read_text())
    assert argv[:3] == ["training", "pytorch", "submit"] and argv[3].startswith("rn-")
    separator = argv.index("--")
    flags = argv[4:separator]
    pairs = list(zip(flags, flags[1:], strict=False))
    for pair in [
        ("--project", "vision"),
        ("--image", IMAGE),
        ("--workers", "1"),
        ("--gpu-devices-request", "1"),
        ("--cpu-core-request", "4"),
        ("--cpu-core-limit", "4"),
        ("--cpu-memory-request", "16Gi"),
        ("--cpu-memory-limit", "16Gi"),
        ("--annotation", "k8s.v1.cni.cncf.io/networks=rdma-net"),
        ("--extended-resource", "rdma/rdma_shared_device_a=1"),
        ("--run-as-uid", "2000"),
        ("--run-as-gid", "2000"),
        ("--environment-variable", "NCCL_IB_HCA=mlx5"),
        ("--environment-variable", "NCCL_IB_DISABLE=0"),
        ("--environment-variable", "NCCL_SOCKET_IFNAME=net1"),
        ("--existing-pvc", "claimname=checkpoints,path=/checkpoints"),
    ]:
        assert pair in pairs, pair
    assert "--large-shm" in flags and flags[-1] == "--command"
    run_dir = next(path for path in (tmp_path / "runs").iterdir() if path.is_dir() and path.name != "history")
    command = argv[separator + 1 :]
    assert command[:4] == ["python3", "-m", "gpuops_trainer.launch", "--nnodes=2"]
    assert "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)" in command
    # The trainer's arguments come from trainer_args.j2, with the checkpoints on the PVC.
    assert "--output-dir=/checkpoints/%s" % run_dir.name in command
    assert "--model=retinanet_resnet18_fpn" in command and "--sync-bn" in command
    settings = json.loads((run_dir / "run.json").read_text())
    assert settings["launcher"] == "runai" and settings["command"][1:] == argv
    assert "has been submitted successfully" in (run_dir / "launcher.log").read_text()
    output = " ".join(run.output.split())
    assert "Submitted %s to Run:ai" % argv[3] in output
    assert "runai training pytorch describe %s" % argv[3] in output


def test_a_refused_submission_fails_with_the_clis_message(run_playbook, tmp_path, fake_runai, monkeypatch):
    monkeypatch.setenv("FAKE_RUNAI_FAIL", "1")
    run = run_playbook(PLAYBOOK, INVENTORY, runai_vars(tmp_path / "runs"))
    assert run.rc != 0, run
    assert "runai training pytorch submit exited with code 1: project vision not found" in " ".join(
        run.output.split()
    )
    assert pathlib.Path(fake_runai).is_file()

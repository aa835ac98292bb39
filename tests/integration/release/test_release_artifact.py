"""The release artifact works on its own: install the tarball `make release` builds into a
clean collections path, then run a playbook from it by its FQCN, from a directory outside
the repository, with no project ansible.cfg and the trainer imported from the collection.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent

pytestmark = pytest.mark.slow


def galaxy_version():
    return yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"]


@pytest.fixture(scope="module")
def empty_config(tmp_path_factory):
    """An ansible.cfg with nothing in it, so nothing comes from the repository's."""
    path = tmp_path_factory.mktemp("config") / "ansible.cfg"
    path.write_text("[defaults]\n")
    return str(path)


@pytest.fixture(scope="module")
def installed(tmp_path_factory, empty_config):
    """The tarball of this tree, built the way `make release` builds it, installed afresh."""
    tarball = REPO_ROOT / "dist" / ("gpuops-training-%s.tar.gz" % galaxy_version())
    build = subprocess.run(
        ["make", "--no-print-directory", "release"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert tarball.is_file()
    collections = tmp_path_factory.mktemp("collections")
    install = subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--force",
            "--no-deps",
            "-p",
            str(collections),
            str(tarball),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, ANSIBLE_CONFIG=empty_config),
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return collections / "ansible_collections" / "gpuops" / "training"


def test_the_artifact_holds_what_a_user_runs_and_none_of_the_build_state(installed):
    manifest = json.loads((installed / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == galaxy_version()
    for wanted in ("playbooks/train.yml", "roles/training_job/meta/argument_specs.yml",
                   "plugins/modules/nccl_log_info.py", "training/src/gpuops_trainer/train.py"):  # fmt: skip
        assert (installed / wanted).is_file(), wanted
    # The trainer_image role builds from the collection's own training/ by default.
    for wanted in ("Containerfile", ".containerignore", "pyproject.toml", "README.md", "src/gpuops_trainer"):
        assert (installed / "training" / wanted).exists(), wanted
    for unwanted in (".venv", ".build", ".harness", "runs", "dist"):
        assert not (installed / unwanted).exists(), unwanted


def test_a_playbook_runs_from_the_installed_artifact_by_its_fqcn(installed, empty_config, tmp_path):
    runs = tmp_path / "runs"
    settings = {
        "training_job_runs_dir": str(runs),
        "training_job_synthetic_images": 16,
        "training_job_epochs": 3,
    }
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=empty_config,
        ANSIBLE_COLLECTIONS_PATH=str(installed.parents[2]),
        ANSIBLE_NOCOLOR="1",
        PYTHONPATH=str(installed / "training" / "src"),  # the trainer shipped in the artifact
        PATH="%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")),
    )
    result = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "gpuops.training.train",
            "-i",
            str(installed / "inventories" / "local"),
            "--extra-vars",
            json.dumps(settings),
        ],  # fmt: skip
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "PASSED (2/2 ranks reported" in result.stdout
    (run_dir,) = [path for path in runs.iterdir() if path.is_dir() and path.name != "history"]
    settings_used = json.loads((run_dir / "run.json").read_text())
    assert settings_used["epochs"] == 3
    assert (run_dir / "report.html").is_file()

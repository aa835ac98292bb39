"""playbooks/stage_dataset.yml on the harness's real node: a Job of the trainer image copies a
generated COCO-layout dataset, served over HTTP from this machine on the node's bridge or read
from a node folder, into a hostPath-backed dataset PVC; the files and checksums on the volume
are checked, a second run copies nothing, a partial file left by an interrupted copy is
resumed with a Range request, a damaged file is redone, a checksum mismatch fails naming the
file; train.yml's layout check passes and two pods train on the staged files, and it fails
naming the missing paths, before any rank starts, for a dataset that lacks them.

S3 is not staged here: moto, the S3 server the tests would run, cannot be installed beside the
project's pins (botocore needs python-dateutil < 3, constraints.txt pins 4.0.0); the stager's
S3 requests are unit-tested in training/tests/test_stage.py."""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import json
import secrets
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from cluster_demo import INVENTORY, checkpoint_volume, release_volumes

pytestmark = [pytest.mark.slow, pytest.mark.real_node]

DATASET_CLAIM = "dataset"
REPO_ROOT = Path(__file__).resolve().parents[3]


def write_source(root: Path) -> dict[str, str]:
    """A small COCO-layout dataset (the trainer tests' generator) and its SHA256SUMS."""
    path = REPO_ROOT / "training" / "tests" / "conftest.py"
    spec = importlib.util.spec_from_file_location("trainer_test_data", path)
    trainer_test_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer_test_data)
    trainer_test_data.write_coco(root, "train", 8)
    trainer_test_data.write_coco(root, "val", 2, seed=5)
    sums = {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }
    (root / "SHA256SUMS").write_text("".join(f"{digest}  {path}\n" for path, digest in sums.items()))
    return sums


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A folder over HTTP that honours ``Range: bytes=N-``, recording each request."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Range")))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        wanted = self.headers.get("Range")
        if wanted:
            start = int(wanted.removeprefix("bytes=").rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            data = data[start:]
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def source(k8s_cluster):
    """The dataset's folder, where the node's pods (a non-root uid) can read it: pytest's
    temporary folders are private to root."""
    volumes = k8s_cluster.harness.state_dir / "real-node" / "volumes"
    volumes.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="coco-source-", dir=volumes))
    sums = write_source(root)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield root, sums
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def http_source(source, real_node, node_inventory_env):
    """The source folder served on the node's bridge address, where its pods reach it."""
    root, _sums = source
    address = node_inventory_env["GPUOPS_REAL_NODE_IP"]

    def handler(*args, **kwargs):
        return RangeHandler(*args, directory=str(root), **kwargs)

    server = http.server.ThreadingHTTPServer((address, 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://{address}:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def staging_namespace(k8s_cluster, real_node, run_playbook, node_inventory_env):
    """A namespace by provision_cluster.yml with its dataset PVC (and checkpoints) bound to
    hostPath volumes on this machine; returns the name and the dataset volume's folder."""
    namespace = "ds-%s" % secrets.token_hex(3)
    checkpoint_volume(k8s_cluster.harness, namespace)
    volume = checkpoint_volume(k8s_cluster.harness, namespace, claim=DATASET_CLAIM)
    run = run_playbook(
        "playbooks/provision_cluster.yml",
        INVENTORY,
        {
            "training_namespace_name": namespace,
            "training_namespace_dataset_pvc": True,
            "training_namespace_dataset_pvc_size": "1Gi",
        },
        extra_env=node_inventory_env,
    )
    assert run.rc == 0, run.output[-4000:]
    yield namespace, volume
    k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    release_volumes(k8s_cluster.harness, namespace)


def train_on_staged(run_playbook, env, namespace, runs_dir, dataset_path, timeout, **settings):
    """train.yml on COCO files in the namespace's dataset PVC (the inventory turns
    training_namespace's dataset PVC off, for synthetic data: the claim is named here)."""
    return run_playbook(
        "playbooks/train.yml",
        INVENTORY,
        {
            "training_job_namespace": namespace,
            "training_job_runs_dir": str(runs_dir),
            "training_job_dataset": "coco",
            "training_job_dataset_path": dataset_path,
            "training_job_dataset_pvc": DATASET_CLAIM,
            **settings,
        },
        timeout=timeout,
        extra_env=env,
    )


def stage(run_playbook, env, namespace, **settings):
    """stage_dataset.yml with the trainer image of the tests (its host-Python volumes) on the
    real node."""
    variables = {
        "dataset_staging_namespace": namespace,
        "dataset_staging_image": env["GPUOPS_TRAINER_IMAGE"],
        "dataset_staging_volumes": json.loads(env["GPUOPS_TRAINER_VOLUMES"]),
        "dataset_staging_volume_mounts": json.loads(env["GPUOPS_TRAINER_VOLUME_MOUNTS"]),
        "dataset_staging_node_selector": {"gpuops.training/real-node": "true"},
        "dataset_staging_tolerations": [
            {"key": "gpuops.training/real-node", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ],  # fmt: skip
        "dataset_staging_cpu": "500m",
        "dataset_staging_memory": "512Mi",
        "dataset_staging_poll_interval_s": 2,
        "dataset_staging_backoff_limit": 1,
        **settings,
    }
    return run_playbook("playbooks/stage_dataset.yml", INVENTORY, variables, timeout=600, extra_env=env)


def flat(run) -> str:
    """The output with the callback's line wrapping undone."""
    return " ".join(run.output.split())


def recap(run) -> str:
    return next(line for line in run.output.splitlines() if line.startswith("localhost "))


def staged_sums(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".gpuops-stage" not in path.relative_to(root).parts
    }


def test_http_staging_is_checksummed_idempotent_and_resumes(
    run_playbook, node_inventory_env, staging_namespace, source, http_source
):
    namespace, volume = staging_namespace
    root, sums = source
    server, url = http_source
    settings = {
        "dataset_staging_url": url,
        "dataset_staging_subdir": "coco",
        "dataset_staging_dataset": "coco",
    }
    first = stage(run_playbook, node_inventory_env, namespace, **settings)
    assert first.rc == 0, first.output[-4000:]
    staged = volume / "coco"
    assert staged_sums(staged) == sums
    kept = (staged / ".gpuops-stage" / "SHA256SUMS").read_text().splitlines()
    assert sorted(kept) == sorted(f"{digest}  {path}" for path, digest in sums.items())
    assert f"{len(sums)} file(s) copied" in flat(first) and " changed=1 " in recap(first)

    second = stage(run_playbook, node_inventory_env, namespace, **settings)
    assert second.rc == 0, second.output[-4000:]
    assert f"0 file(s) copied (0 bytes, 0 resumed, 0 redone), {len(sums)} already there" in flat(second)
    assert " changed=0 " in recap(second), recap(second)

    # What an interrupted copy leaves (a partial file under .gpuops-stage), and a finished
    # file damaged afterwards: the first is resumed with a Range request, the second redone.
    images = sorted(path for path in sums if path.startswith("train2017/"))
    resumed, damaged = images[0], images[1]
    (staged / resumed).unlink()
    partial = staged / ".gpuops-stage" / "partial" / resumed
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes((root / resumed).read_bytes()[:1000])
    partial.chmod(0o666)
    (staged / damaged).write_bytes(b"damaged")
    server.requests.clear()
    third = stage(run_playbook, node_inventory_env, namespace, **settings)
    assert third.rc == 0, third.output[-4000:]
    assert "2 file(s) copied" in flat(third) and "1 resumed, 0 redone" in flat(third), third
    assert (f"/{resumed}", "bytes=1000-") in server.requests
    assert staged_sums(staged) == sums

    # A source file that no longer matches its manifest: the Job fails at once (exit 3),
    # naming the file; nothing of it is put in place.
    (staged / damaged).unlink()
    original = (root / damaged).read_bytes()
    (root / damaged).write_bytes(original[:-10] + b"0123456789")
    try:
        failed = stage(run_playbook, node_inventory_env, namespace, **settings)
    finally:
        (root / damaged).write_bytes(original)
    assert failed.rc != 0, failed
    assert f"{damaged}: sha256 mismatch: the source's manifest says {sums[damaged]}" in flat(failed)
    assert not (staged / damaged).exists()


def test_two_pods_train_on_the_staged_dataset_after_its_layout_check(
    run_playbook, node_inventory_env, staging_namespace, source, http_source, tmp_path
):
    """After test_http_staging_...: staging again puts back the file its mismatch left out;
    then the dataset PVC mounted by train.yml, the layout check passes in the run's image, and
    both ranks train on the staged COCO files."""
    namespace, volume = staging_namespace
    root, sums = source
    _server, url = http_source
    again = stage(
        run_playbook, node_inventory_env, namespace,
        dataset_staging_url=url, dataset_staging_subdir="coco", dataset_staging_dataset="coco",
    )  # fmt: skip
    assert again.rc == 0, again.output[-4000:]
    assert "1 file(s) copied (" in flat(again) and staged_sums(volume / "coco") == sums
    runs_dir = tmp_path / "runs"
    run = train_on_staged(
        run_playbook, node_inventory_env, namespace, runs_dir, "/data/coco", timeout=900,
        training_job_epochs=2,
        # This module does not provision the node's CRI-O limits (test_train_on_real_node
        # does): the locked-memory check is not what it tests.
        training_verify_memlock_unlimited=False, training_verify_memlock_min_bytes=0,
    )  # fmt: skip
    assert "Every dataset path the trainer opens is there" in run.output, run.output[-4000:]
    assert run.rc == 0, run.output[-4000:]
    (run_dir,) = [path for path in runs_dir.iterdir() if path.is_dir() and path.name != "history"]
    logs = "".join(path.read_text() for path in (run_dir / "logs").glob("*.log"))
    assert '"dataset":"coco"' in logs and "/data/coco/annotations/instances_train2017.json" in logs


def test_a_node_folder_is_staged_read_only(run_playbook, node_inventory_env, staging_namespace, source):
    namespace, volume = staging_namespace
    root, sums = source
    settings = {
        "dataset_staging_source": "path",
        "dataset_staging_node_path": str(root),
        "dataset_staging_subdir": "from-node",
        "dataset_staging_include": ["annotations", "val2017"],
    }
    run = stage(run_playbook, node_inventory_env, namespace, **settings)
    assert run.rc == 0, run.output[-4000:]
    wanted = {path: digest for path, digest in sums.items() if not path.startswith("train2017/")}
    assert staged_sums(volume / "from-node") == wanted
    again = stage(run_playbook, node_inventory_env, namespace, **settings)
    assert again.rc == 0, again.output[-4000:]
    assert " changed=0 " in recap(again), recap(again)


def test_a_pvc_source_is_staged_read_only_from_its_folder(
    k8s_cluster, run_playbook, node_inventory_env, staging_namespace, source
):
    """The alternative to a node folder where hostPath is refused: the files on a claim (here a
    PersistentVolume over a folder of this machine), staged from a folder in it."""
    namespace, volume = staging_namespace
    root, sums = source
    folder = checkpoint_volume(k8s_cluster.harness, namespace, claim="coco-source")
    shutil.copytree(root, folder / "datasets" / "coco", dirs_exist_ok=True)
    k8s_cluster.harness.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "coco-source", "namespace": namespace},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ]
    )
    settings = {
        "dataset_staging_source": "pvc",
        "dataset_staging_source_pvc": "coco-source",
        "dataset_staging_source_pvc_subdir": "datasets/coco",
        "dataset_staging_subdir": "from-pvc",
        "dataset_staging_dataset": "coco",
    }
    run = stage(run_playbook, node_inventory_env, namespace, **settings)
    assert run.rc == 0, run.output[-4000:]
    assert staged_sums(volume / "from-pvc") == sums
    # The source folder is as it was: the stager's state went to the destination only.
    assert staged_sums(folder / "datasets" / "coco") == staged_sums(root)
    assert not list(folder.rglob(".gpuops-stage"))


def test_bad_settings_fail_before_anything_is_created(run_playbook, node_inventory_env, staging_namespace):
    namespace, _volume = staging_namespace
    run = stage(
        run_playbook,
        node_inventory_env,
        namespace,
        dataset_staging_source="s3",
        dataset_staging_s3_endpoint="ftp://nowhere",
        dataset_staging_s3_bucket="datasets",
        dataset_staging_s3_secret="Not_A_Name",
        dataset_staging_pvc="missing-claim",
    )
    assert run.rc != 0
    assert 'dataset_staging_s3_endpoint must be an http:// or https:// URL, got "ftp://nowhere"' in flat(run)
    assert "dataset_staging_s3_secret must name an existing Secret" in flat(run)
    assert "Start the staging Job" not in flat(run)
    missing = stage(run_playbook, node_inventory_env, namespace, dataset_staging_url="http://127.0.0.1/",
                    dataset_staging_pvc="missing-claim")  # fmt: skip
    assert missing.rc != 0
    assert f"dataset_staging_pvc: no PersistentVolumeClaim missing-claim in namespace {namespace}" in flat(
        missing
    )


def test_the_layout_check_names_the_missing_path_before_a_launch(
    run_playbook, node_inventory_env, staging_namespace, source, tmp_path
):
    namespace, volume = staging_namespace
    (volume / "partial-coco" / "annotations").mkdir(parents=True, exist_ok=True)
    (volume / "partial-coco" / "annotations" / "instances_train2017.json").write_text("{}")
    runs_dir = tmp_path / "runs"
    run = train_on_staged(
        run_playbook, node_inventory_env, namespace, runs_dir, "/data/partial-coco", timeout=600
    )
    assert run.rc != 0, run
    assert "lacks what the trainer opens" in flat(run), run
    assert "train: image folder not found: /data/partial-coco/train2017 (expected a directory)" in flat(run)
    assert "val: annotation file not found: /data/partial-coco/annotations/instances_val2017.json" in flat(
        run
    )
    # Nothing of the run was created.
    assert "Apply in one call" not in flat(run)

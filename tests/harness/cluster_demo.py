"""`make cluster-demo`: the embedded training job on real pods, configured by the collection.

Brings the harness up with its real node (kubelet + CRI-O), builds the trainer image from
training/Containerfile into the node's image store, then runs the collection's playbooks
against inventories/harness-real-node as a user would: provision_nodes.yml (the CRI-O limits
drop-in, proven on a fresh container, and preflight), provision_cluster.yml (the training
namespace: quota, LimitRange, PVC, ServiceAccount) and train.yml (a two-pod PyTorchJob through
the Training Operator, verified from every rank's log). It ends with the verdict and the
report's path, and brings everything down (GPUOPS_HARNESS_KEEP=1 leaves it up).

The same steps are the real-node tests' fixtures (tests/integration/real_node), so the demo
and the tests cannot drift apart.

    python tests/harness/cluster_demo.py        # what `make cluster-demo` runs
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
REPO_ROOT = HARNESS_DIR.parents[1]
sys.path.insert(0, str(HARNESS_DIR))
sys.path.insert(0, str(REPO_ROOT / "tests" / "podman"))

import trainer_image  # noqa: E402
from k8s_harness import Harness, HarnessError, log  # noqa: E402

INVENTORY = "inventories/harness-real-node"
# The claim training_namespace creates and training_job mounts (their defaults).
CHECKPOINT_CLAIM = "checkpoints"


def build_trainer_image(harness: Harness) -> str:
    """training/Containerfile built on the local test base, into the store the node's CRI-O reads."""
    runtime = harness.real_node.runtime
    storage = trainer_image.Storage(root=str(runtime.storage_root), runroot=str(runtime.storage_runroot))
    return trainer_image.build_trainer_image(storage=storage)


def host_volumes() -> tuple[list[dict], list[dict]]:
    """The test image borrows this machine's Python and torch (tests/podman/trainer_image.py):
    hostPath volumes for training_job_volumes and their read-only mounts."""
    volumes, mounts = [], []
    for index, mount in enumerate(trainer_image.runtime_mounts()):
        name = f"host-python-{index}"
        volumes.append({"name": name, "hostPath": {"path": mount.host_path, "type": mount.kind}})
        mounts.append({"name": name, "mountPath": mount.container_path, "readOnly": True})
    return volumes, mounts


def inventory_environment(harness: Harness, image: str) -> dict[str, str]:
    """What inventories/harness-real-node reads from the environment."""
    volumes, mounts = host_volumes()
    return {
        **harness.real_node.environment(),
        "KUBECONFIG": str(harness.kubeconfig),
        "GPUOPS_TRAINER_IMAGE": image,
        "GPUOPS_TRAINER_VOLUMES": json.dumps(volumes),
        "GPUOPS_TRAINER_VOLUME_MOUNTS": json.dumps(mounts),
    }


def checkpoint_volume(
    harness: Harness, namespace: str, size: str = "1Gi", claim: str = CHECKPOINT_CLAIM
) -> Path:
    """A hostPath PersistentVolume reserved for <namespace>/<claim> (the checkpoints by
    default; the harness has no provisioner). The trainer runs as a non-root uid and hostPath
    ignores fsGroup, so the directory is world-writable with the sticky bit, like /tmp."""
    leaf = namespace if claim == CHECKPOINT_CLAIM else f"{namespace}-{claim}"
    directory = harness.state_dir / "real-node" / "volumes" / leaf
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    harness.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": f"{namespace}-{claim}",
                    "labels": {"gpuops.test/namespace": namespace},
                },
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "hostPath": {"path": str(directory), "type": "Directory"},
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            }
        ]
    )
    return directory


def release_volumes(harness: Harness, namespace: str) -> None:
    """Delete the namespace's hostPath volumes (by their test label) and their folders: a
    run's checkpoints are hundreds of MiB, and a disk filling up makes the node's kubelet
    collect unused images, the trainer's among them, between two tests."""
    harness.kubectl(
        "delete", "persistentvolume", "-l", f"gpuops.test/namespace={namespace}", "--wait=false", check=False
    )
    volumes = harness.state_dir / "real-node" / "volumes"
    for directory in [volumes / namespace, *volumes.glob(f"{namespace}-*")]:
        shutil.rmtree(directory, ignore_errors=True)


def ansible_playbook(playbook: str, environment: dict[str, str], *extra: str) -> int:
    """Run a playbook against the real node's inventory, output straight to the terminal."""
    bin_dir = Path(sys.executable).parent
    env = dict(
        os.environ,
        **environment,
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"),
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    command = [str(bin_dir / "ansible-playbook"), "-i", INVENTORY, f"playbooks/{playbook}", *extra]
    print(f"\n$ ansible-playbook -i {INVENTORY} playbooks/{playbook} {' '.join(extra)}".rstrip(), flush=True)
    return subprocess.run(command, cwd=REPO_ROOT, env=env, check=False).returncode


def main() -> int:
    started = time.monotonic()
    harness = Harness()
    timings: list[tuple[str, float]] = []

    def timed(what: str, step):
        begin = time.monotonic()
        result = step()
        timings.append((what, time.monotonic() - begin))
        return result

    keep = bool(os.environ.get("GPUOPS_HARNESS_KEEP"))
    try:
        timed("harness and real node up", lambda: (harness.up(), harness.real_node.up()))
        image = timed("trainer image (training/Containerfile)", lambda: build_trainer_image(harness))
        environment = inventory_environment(harness, image)
        timed("checkpoint volume", lambda: checkpoint_volume(harness, "training"))
        for playbook in ("provision_nodes.yml", "provision_cluster.yml", "train.yml"):
            rc = timed(playbook, lambda playbook=playbook: ansible_playbook(playbook, environment))
            if rc != 0:
                log(f"cluster demo: {playbook} failed (exit {rc})")
                return rc
        runs = sorted((REPO_ROOT / "runs").glob("*/summary.json"), key=lambda path: path.stat().st_mtime)
        if runs:
            summary = json.loads(runs[-1].read_text())
            print(f"\nreport: {runs[-1].parent / 'report.html'}")
            for rank in summary.get("ranks") or []:
                print(
                    f"rank {rank.get('rank')}: pod {rank.get('host')} on node {rank.get('node')}, "
                    f"memlock {rank.get('memlock_bytes')} bytes, status {rank.get('status')}"
                )
        return 0
    except HarnessError as error:
        print(f"cluster demo: {error}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            timed("harness down", harness.down)
        for what, seconds in timings:
            print(f"  {what}: {seconds:.1f} s")
        print(f"cluster demo: {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    sys.exit(main())

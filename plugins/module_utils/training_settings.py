# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The settings of one training run, and the values every launcher derives from them.

The settings are the gpuops.training.training_job role's variables without their
``training_job_`` prefix: their names, defaults and choices come from the role's argument
spec (:mod:`role_settings`), so a new setting is declared there (and in ``defaults/main.yml``)
and nowhere else. The nccl_tests role hands its own variables of the same names (``nccl_tests_cpu``
for ``cpu``) for its MPIJobs; every message names the caller's variable through the prefix the
caller passes.
"""

from __future__ import annotations

import hashlib
import re

from ansible_collections.gpuops.training.plugins.module_utils import role_settings
from ansible_collections.gpuops.training.plugins.module_utils.quantities import format_bytes
from ansible_collections.gpuops.training.plugins.module_utils.role_settings import SettingsError
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int
from ansible_collections.gpuops.training.plugins.module_utils.sizing import shm_bytes

ROLE = "training_job"
PREFIX = "training_job_"
# torchrun on the hosts themselves, launched by the role (the torchrun_argv filter).
HOST_LAUNCHERS = ("local", "ssh")
# The trainer on Kubernetes or through Run:ai: a pod rendered by the training_workload filter.
CLUSTER_LAUNCHERS = ("pytorchjob", "indexed_job", "trainjob", "runai")
TRAINER_LAUNCHERS = HOST_LAUNCHERS + CLUSTER_LAUNCHERS
# mpijob renders the same pod for nccl-tests (the nccl_tests role), not for the trainer.
WORKLOAD_LAUNCHERS = CLUSTER_LAUNCHERS + ("mpijob",)
LAUNCHERS = TRAINER_LAUNCHERS + ("mpijob",)
# The Training Operator v1 starts an MPIJob's ranks with ``kubectl exec`` into the workers
# (its kubexec.sh is mpirun's rsh agent), so the workers only wait, as the operator's own
# default does: no sshd and no keys in the image.
MPI_WORKER_COMMAND = ["sleep", "365d"]
# mpijob only (nccl-tests), not the trainer's, so not in the training_job role's spec: the
# launcher's command (required) and the workers' command.
MPIJOB_DEFAULTS = {"mpirun_argv": None, "mpi_worker_command": MPI_WORKER_COMMAND}
# Datasets read from files (the others are generated).
FILE_DATASETS = ("coco", "openimages")
# training_job_dataset_pvc's default: the namespace's dataset PVC for file datasets, none for
# synthetic data.
DATASET_PVC_AUTO = "auto"
# What the verification expects NCCL to report for each fabric: RoCE is NCCL's IB transport.
TRANSPORT_OF_FABRIC = {"ib": "IB", "roce": "IB", "socket": "Socket"}


def defaults():
    """Every setting with the role's default (None where the role computes it)."""
    result = role_settings.defaults(ROLE, PREFIX)
    result.update(MPIJOB_DEFAULTS)
    return result


def setting_names(names, prefix=PREFIX):
    """The names among ``names`` (a role's variables) that carry a training setting under ``prefix``."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise SettingsError("names must be a list of variable names, got %r" % (names,))
    if not isinstance(prefix, str) or not prefix:
        raise SettingsError("prefix must be a variable prefix such as training_job_, got %r" % (prefix,))
    keys = set(defaults())
    return sorted(name for name in names if name.startswith(prefix) and name[len(prefix) :] in keys)


def with_defaults(settings, prefix=PREFIX):
    """The settings with every key left out taken from the role's defaults; the GPUs of a pod
    default to its ranks, as the role's do."""
    merged = role_settings.with_defaults(settings, defaults(), prefix)
    if merged.get("gpus_per_node") is None:
        merged["gpus_per_node"] = merged.get("nproc_per_node")
    if merged.get("dataset_pvc") == DATASET_PVC_AUTO:
        merged["dataset_pvc"] = namespace_dataset_pvc() if merged.get("dataset") in FILE_DATASETS else ""
    return merged


def namespace_dataset_pvc():
    """The name of the dataset PVC the training_namespace role creates by default (its
    argument spec says it, once)."""
    return role_settings.defaults("training_namespace", "training_namespace_")["dataset_pvc_name"]


# --------------------------------------------------------------------------------------
# values derived from the settings
# --------------------------------------------------------------------------------------


def networks(settings):
    """The Multus networks as a list (a comma-separated string is split)."""
    value = settings.get("network")
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(part).strip() for part in value if str(part).strip()]


def uses_rdma(settings):
    return settings.get("fabric") in ("ib", "roce") and bool(settings.get("rdma_resource"))


def elastic(settings):
    """Elastic runs: PyTorchJobs only (Indexed Jobs have a fixed size, Trainer v2 no elastic runs yet)."""
    return settings.get("launcher") == "pytorchjob" and (_int(settings.get("elastic_min_nodes")) or 0) > 0


def workload_name(settings):
    """The Kubernetes name of the run's objects: k8s_name, or a short name made of name and a
    hash of the run id (short enough for an Indexed Job's host FQDN)."""
    if settings.get("k8s_name"):
        return str(settings["k8s_name"])
    base = re.sub(r"[^a-z0-9-]+", "-", str(settings.get("name") or "run").lower())
    base = base.strip("-")[:20].strip("-") or "run"
    if not base[0].isalpha():
        base = "r" + base[:19]
    digest = hashlib.sha256(str(settings.get("run_id") or "").encode("utf-8")).hexdigest()[:6]
    return "%s-%s" % (base, digest)


def run_label(settings):
    """The run id as a label value (at most 63 characters of [A-Za-z0-9._-], alphanumeric ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", str(settings.get("run_id") or ""))[:63]
    return value.strip("-._")


def expected_transport(settings):
    """The NCCL transport the fabric profile promises (IB for ib and roce, Socket for socket)."""
    return TRANSPORT_OF_FABRIC.get(settings.get("fabric"), "")


def nccl_expected(settings):
    """Whether the run is meant to use NCCL: GPUs in the pod and a backend other than gloo."""
    return (_int(settings.get("gpus_per_node")) or 0) > 0 and settings.get("backend") != "gloo"


def sync_bn(settings):
    """SyncBatchNorm only across nodes, and only on GPUs (torch has no CPU version)."""
    choice = str(settings.get("sync_bn")).lower()
    if choice == "true":
        return True
    if choice == "false":
        return False
    nodes = _int(settings.get("elastic_max_nodes")) if elastic(settings) else _int(settings.get("nnodes"))
    return (nodes or 1) > 1 and nccl_expected(settings)


def shm_size(settings):
    """The /dev/shm sizeLimit: shm_size, or sized from the DataLoader and the ranks."""
    if settings.get("shm_size"):
        return str(settings["shm_size"])
    return format_bytes(sized_shm_bytes(settings), "Gi")


def sized_shm_bytes(settings):
    """/dev/shm for the DataLoader workers of every rank in the pod (sizing.shm_bytes)."""
    sample = settings.get("shm_sample_bytes")
    if sample in (None, "", 0, "0"):
        # A decoded RGB float32 image at RetinaNet's largest side, squared: an upper bound.
        side = _int(settings.get("max_size")) or defaults()["max_size"]
        sample = 3 * side * side * 4
    return shm_bytes(
        _int(settings.get("workers")),
        _int(settings.get("batch_size")),
        sample,
        gpus=max(_int(settings.get("nproc_per_node")) or 1, 1),
    )


def output_dir(settings):
    """The trainer's output directory (checkpoints) inside the pod: one per run on the PVC."""
    return "%s/%s" % (str(settings.get("checkpoint_mount")).rstrip("/"), settings.get("run_id"))

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One training run as Kubernetes workloads, and as a Run:ai command, from one set of settings.

Every Kubernetes launcher of the gpuops.training.training_job role renders the same pod from
the same settings, here and nowhere else:

- Guaranteed QoS: requests equal limits for cpu, memory, the GPUs and the RDMA devices;
- ``/dev/shm`` as a memory-backed ``emptyDir`` sized by :func:`sizing.shm_size` from the
  DataLoader workers, the batch size and the ranks in the pod;
- ``IPC_LOCK`` as the only capability (all others dropped), never privileged, no privilege
  escalation, no host network, the ``RuntimeDefault`` seccomp profile, ``runAsUser``/``runAsGroup``
  when given;
- the Multus network annotation and the RDMA device requests of the fabric;
- NCCL variables from a fabric profile (``ib``, ``roce``, ``socket``), explicit timeouts;
  variables from Secrets as ``secretKeyRef`` references, so that no value is in the pod spec;
- checkpoints on a PVC, ``torchrun --max-restarts``, ``restartPolicy: OnFailure`` and a
  ``backoffLimit``, so that a restarted pod resumes from the last checkpoint (the trainer
  resumes from its output directory by itself);
- labels with the run id, which is also how the launcher finds the run's pods.

Then one function per kind wraps that pod: :func:`indexed_job` (a headless Service and a
batch/v1 Job with ``completionMode: Indexed``), :func:`pytorchjob` (Kubeflow PyTorchJob),
:func:`trainjob` (Kubeflow Trainer v2 TrainJob, with the TrainingRuntime it references),
:func:`runai_argv` (``runai training pytorch submit``) and, for nccl-tests rather than the
trainer, :func:`mpijob` (Kubeflow MPIJob: the same pod as workers, a small launcher running
``mpirun``). :func:`problems` checks the settings first and names the role variable of each
problem.

The settings are the role's variables without their ``training_job_`` prefix; keys left out
take the values in :data:`DEFAULTS`. Pure functions: the filter plugin calls them, the unit
tests exercise them directly.
"""

from __future__ import annotations

import hashlib
import re

from ansible_collections.gpuops.training.plugins.module_utils.quantities import (
    QuantityError,
    format_bytes,
    parse_quantity,
)
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import ENV_NAME
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_bool as _bool
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int
from ansible_collections.gpuops.training.plugins.module_utils.sizing import SizingError, shm_bytes

PREFIX = "training_job_"
# Launchers of the trainer (the training_job role), and mpijob, which runs nccl-tests.
TRAINER_LAUNCHERS = ("pytorchjob", "indexed_job", "trainjob", "runai")
LAUNCHERS = TRAINER_LAUNCHERS + ("mpijob",)
# ExitCode: the operator restarts a pod only for a retryable exit code (128 and above: a
# signal, an OOM kill) and fails the job on a permanent one (1-127: the trainer's
# configuration, data, non-finite and storage errors), which gpuops_trainer.launch reports.
PYTORCHJOB_RESTART_POLICIES = ("OnFailure", "ExitCode", "Never")
# indexed_job: ExitCode gives a batch/v1 Job the same semantics with a podFailurePolicy (which
# needs restartPolicy Never): a permanent exit code fails the Job at once, any other failure
# replaces the pod until backoffLimit, and an eviction or preemption is not counted at all.
INDEXED_JOB_RESTART_POLICIES = ("OnFailure", "ExitCode")
PERMANENT_EXIT_CODES = list(range(1, 128))
FABRICS = ("ib", "roce", "socket")
# What the verification expects NCCL to report for each fabric: RoCE is NCCL's IB transport.
TRANSPORT_OF_FABRIC = {"ib": "IB", "roce": "IB", "socket": "Socket"}
GDR_LEVELS = ("", "LOC", "PIX", "PXB", "PHB", "SYS")
# The pod's seccomp profile; empty leaves it to the cluster (Unconfined unless the kubelet's
# SeccompDefault is on).
SECCOMP_PROFILES = ("RuntimeDefault", "Unconfined", "")
SYNC_BN = ("auto", "true", "false")
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RUN_ID_LABEL = "gpuops.training/run-id"
LAUNCHER_LABEL = "gpuops.training/launcher"
NAME_LABEL = "app.kubernetes.io/name"
TRAINER_API = "trainer.kubeflow.org"
RUNAI_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
# Container names the operators require: the Training Operator looks for "pytorch" (and its
# port "pytorchjob-port"), Trainer v2's torch plugin for "node".
CONTAINER_NAMES = {
    "pytorchjob": "pytorch",
    "indexed_job": "trainer",
    "trainjob": "node",
    "runai": "trainer",
    "mpijob": "mpi-worker",
}
# The Training Operator v1 starts an MPIJob's ranks with ``kubectl exec`` into the workers
# (its kubexec.sh is mpirun's rsh agent), so the workers only wait, as the operator's own
# default does: no sshd and no keys in the image.
MPI_WORKER_COMMAND = ["sleep", "365d"]
# The launcher only runs mpirun: a small Guaranteed pod without GPUs.
MPI_LAUNCHER_RESOURCES = {"cpu": "1", "memory": "1Gi"}
PYTORCHJOB_PORT_NAME = "pytorchjob-port"
# Linux keeps host names to 64 characters; setHostnameAsFQDN makes the FQDN the host name.
MAX_HOSTNAME = 64
# The server-side deadline is a backstop a minute after the launcher's own deadline, which
# reads the logs and stops the workload first.
DEADLINE_GRACE_S = 60

DEFAULTS = {
    "launcher": "pytorchjob",
    "name": "retinanet",
    "run_id": "",
    "k8s_name": "",
    "namespace": "training",
    "image": "",
    "image_pull_policy": "IfNotPresent",
    "container_python": "python3",
    "nnodes": 1,
    "nproc_per_node": 1,
    "gpus_per_node": 1,
    "gpu_resource": "nvidia.com/gpu",
    "cpu": "8",
    "memory": "64Gi",
    "shm_size": "",
    "shm_sample_bytes": 0,
    "workers": 2,
    "batch_size": 2,
    "max_size": 1333,
    "backend": "auto",
    "fabric": "socket",
    "network": [],
    "rdma_resource": "rdma/rdma_shared_device_a",
    "rdma_per_node": 1,
    "nccl_ib_hca": "mlx5",
    "nccl_ib_gid_index": 3,
    "nccl_net_gdr_level": "PHB",
    "nccl_socket_ifname": "",
    "nccl_debug": "INFO",
    "nccl_heartbeat_timeout_s": 600,
    "threads_per_process": 0,
    "env": {},
    "env_from_secrets": {},
    "seccomp_profile": "RuntimeDefault",
    "run_as_user": None,
    "run_as_group": None,
    "checkpoint_pvc": "checkpoints",
    "checkpoint_mount": "/checkpoints",
    "dataset_pvc": "",
    "dataset_mount": "/data",
    "max_restarts": 0,
    "backoff_limit": 3,
    "timeout_s": 3600,
    "rdzv_port": 29400,
    "rdzv_timeout_s": 900,
    "elastic_min_nodes": 0,
    "elastic_max_nodes": 0,
    "sync_bn": "auto",
    "set_hostname_as_fqdn": True,
    "pytorchjob_master": False,
    "pytorchjob_restart_policy": "OnFailure",
    "indexed_job_restart_policy": "OnFailure",
    "cluster_domain": "cluster.local",
    "trainjob_runtime": "",
    "trainjob_runtime_kind": "ClusterTrainingRuntime",
    "runai_project": "",
    "pod_annotations": {},
    "pod_labels": {},
    "node_selector": {},
    "tolerations": [],
    "service_account": "",
    "priority_class": "",
    "trainer_args": [],
}
# mpijob only (nccl-tests), not the trainer's: the launcher's command (required) and the
# workers' command (MPI_WORKER_COMMAND when left out).
MPIJOB_KEYS = ("mpirun_argv", "mpi_worker_command")

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# A Multus network reference: [namespace/]name[@interface].
_NETWORK = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(@[A-Za-z0-9_.-]{1,15})?$"
)


class WorkloadError(ValueError):
    """Settings that cannot be rendered; the message lists every problem."""


# --------------------------------------------------------------------------------------
# settings
# --------------------------------------------------------------------------------------


def settings_with_defaults(settings):
    """The settings with every key left out (or None where None means unset) filled in."""
    if settings is not None and not isinstance(settings, dict):
        raise WorkloadError(
            "the settings must be a mapping of training_job_* variables (without the prefix), got %s"
            % type(settings).__name__
        )
    merged = dict(DEFAULTS)
    for key, value in (settings or {}).items():
        merged[key] = value
    return merged


def _var(key):
    return PREFIX + key


def _optional_id(value):
    """runAsUser/runAsGroup: None or '' for unset, else an int."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _int(value)


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
    """The Kubernetes name of the run's objects: training_job_k8s_name, or a short name made
    of training_job_name and a hash of the run id (short enough for an Indexed Job's host FQDN)."""
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


def labels(settings):
    """Labels of every object and pod of the run."""
    result = {str(key): str(value) for key, value in (settings.get("pod_labels") or {}).items()}
    result.update(
        {
            NAME_LABEL: "gpuops-nccl-tests" if settings.get("launcher") == "mpijob" else "gpuops-trainer",
            RUN_ID_LABEL: run_label(settings),
            LAUNCHER_LABEL: str(settings.get("launcher")),
        }
    )
    return result


def pod_selector(settings):
    """The label selector that finds the run's pods, whoever created them."""
    return "%s=%s" % (RUN_ID_LABEL, run_label(settings))


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
    """The /dev/shm sizeLimit: training_job_shm_size, or sized from the DataLoader and the ranks."""
    if settings.get("shm_size"):
        return str(settings["shm_size"])
    return format_bytes(_shm_bytes(settings), "Gi")


def _sample_bytes(settings):
    given = settings.get("shm_sample_bytes")
    if given not in (None, "", 0, "0"):
        return given
    # A decoded RGB float32 image at RetinaNet's largest side, squared: an upper bound.
    side = _int(settings.get("max_size")) or DEFAULTS["max_size"]
    return 3 * side * side * 4


def _shm_bytes(settings):
    return shm_bytes(
        _int(settings.get("workers")),
        _int(settings.get("batch_size")),
        _sample_bytes(settings),
        gpus=max(_int(settings.get("nproc_per_node")) or 1, 1),
    )


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------


def _check_int(problems, settings, key, minimum, maximum=None):
    value = _int(settings.get(key))
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bound = "at least %d" % minimum if maximum is None else "between %d and %d" % (minimum, maximum)
        problems.append("%s must be an integer %s, got %r" % (_var(key), bound, settings.get(key)))
        return None
    return value


def _check_quantity(problems, settings, key):
    try:
        value = parse_quantity(settings.get(key), _var(key))
    except QuantityError as error:
        problems.append(str(error))
        return None
    if value <= 0:
        problems.append("%s must be a quantity above 0, got %r" % (_var(key), settings.get(key)))
        return None
    return value


def _check_mapping(problems, settings, key, key_pattern=None, what="key"):
    value = settings.get(key)
    if not isinstance(value, dict):
        problems.append("%s must be a mapping, got %r" % (_var(key), value))
        return
    for name, item in value.items():
        if key_pattern is not None and not key_pattern.match(str(name)):
            problems.append("%s: %r is not a valid %s" % (_var(key), name, what))
        if isinstance(item, (dict, list)):
            problems.append(
                "%s: the value of %s must be a string or a number, got %r" % (_var(key), name, item)
            )


def _secret_env_problems(settings):
    """env_from_secrets: NAME -> {secret: <Secret name>, key: <key in it>}, names not in env."""
    key = "env_from_secrets"
    value = settings.get(key)
    if not isinstance(value, dict):
        return ["%s must be a mapping of variable names to {secret, key}, got %r" % (_var(key), value)]
    found = []
    if value and settings.get("launcher") == "runai":
        found.append(
            "%s: the runai launcher cannot reference Secrets; use the Run:ai project's credentials "
            "or %s" % (_var(key), _var("env"))
        )
    plain = settings.get("env") if isinstance(settings.get("env"), dict) else {}
    for name, ref in value.items():
        if not ENV_NAME.match(str(name)):
            found.append("%s: %r is not a valid environment variable name" % (_var(key), name))
        elif name in plain:
            found.append("%s: %s is also set in %s; set it in one of them" % (_var(key), name, _var("env")))
        if not isinstance(ref, dict) or set(ref) != {"secret", "key"}:
            found.append(
                "%s: %s must be a mapping with exactly the keys secret and key, got %r"
                % (_var(key), name, ref)
            )
            continue
        secret, secret_key = ref["secret"], ref["key"]
        if not (isinstance(secret, str) and _DNS1123_SUBDOMAIN.match(secret) and len(secret) <= 253):
            found.append("%s: %s.secret must be a Secret name, got %r" % (_var(key), name, secret))
        if not (isinstance(secret_key, str) and _SECRET_KEY.match(secret_key)) or secret_key in (".", ".."):
            found.append(
                "%s: %s.key must be a key of the Secret (letters, digits, '-', '_', '.'), got %r"
                % (_var(key), name, secret_key)
            )
    return found


def _fqdn(settings, name, index):
    return "%s-%d.%s.%s.svc.%s" % (
        name,
        index,
        name,
        settings.get("namespace"),
        settings.get("cluster_domain"),
    )


def problems(settings):
    """Every problem with the settings, each naming its role variable; empty when valid."""
    try:
        s = settings_with_defaults(settings)
    except WorkloadError as error:
        return [str(error)]
    found = []
    launcher = s.get("launcher")
    if launcher not in LAUNCHERS:
        found.append("%s must be one of %s, got %r" % (_var("launcher"), ", ".join(LAUNCHERS), launcher))
    if not s.get("run_id"):
        found.append("%s is empty: the run needs an id" % _var("run_id"))
    elif not run_label(s):
        found.append("%s %r has no character a label value can hold" % (_var("run_id"), s["run_id"]))
    name = workload_name(s)
    if not (_DNS1035_LABEL.match(name) and len(name) <= 40):
        found.append(
            "%s: the objects' name %r must be a DNS-1035 label (lower-case letters, digits and '-', "
            "starting with a letter) of at most 40 characters" % (_var("k8s_name"), name)
        )
    if launcher != "runai" and not (
        isinstance(s.get("namespace"), str) and _DNS1123_LABEL.match(s["namespace"])
    ):
        found.append(
            "%s must be a DNS-1123 label such as training, got %r" % (_var("namespace"), s.get("namespace"))
        )
    if not (isinstance(s.get("image"), str) and s["image"].strip()):
        found.append(
            "%s is required for the %s launcher: the container image with torch and gpuops-trainer"
            % (_var("image"), launcher)
        )
    if s.get("image_pull_policy") not in ("Always", "IfNotPresent", "Never"):
        found.append(
            "%s must be Always, IfNotPresent or Never, got %r"
            % (_var("image_pull_policy"), s.get("image_pull_policy"))
        )
    if not (isinstance(s.get("container_python"), str) and s["container_python"].strip()):
        found.append("%s must name the Python interpreter in the image" % _var("container_python"))

    nnodes = _check_int(found, s, "nnodes", 1)
    nproc = _check_int(found, s, "nproc_per_node", 1)
    gpus = _check_int(found, s, "gpus_per_node", 0)
    if gpus and nproc and nproc > gpus:
        found.append(
            "%s (%d) exceeds %s (%d): each rank needs a GPU of its own"
            % (_var("nproc_per_node"), nproc, _var("gpus_per_node"), gpus)
        )
    if gpus == 0 and s.get("backend") == "nccl":
        found.append("%s is nccl but %s is 0: NCCL needs GPUs" % (_var("backend"), _var("gpus_per_node")))
    if not (isinstance(s.get("gpu_resource"), str) and _RESOURCE_NAME.match(s["gpu_resource"])):
        found.append(
            "%s must be an extended resource name such as nvidia.com/gpu, got %r"
            % (_var("gpu_resource"), s.get("gpu_resource"))
        )
    _check_quantity(found, s, "cpu")
    memory = _check_quantity(found, s, "memory")
    shm = None
    if s.get("shm_size"):
        shm = _check_quantity(found, s, "shm_size")
    else:
        try:
            shm = parse_quantity(format_bytes(_shm_bytes(s), "Gi"))
        except (SizingError, QuantityError, TypeError) as error:
            found.append("%s: cannot size /dev/shm: %s" % (_var("shm_size"), error))
    if memory is not None and shm is not None and shm >= memory:
        found.append(
            "%s (%s) must be larger than the /dev/shm size %s: a memory-backed emptyDir counts "
            "against the container's memory limit" % (_var("memory"), s.get("memory"), shm_size(s))
        )

    fabric = s.get("fabric")
    if fabric not in FABRICS:
        found.append("%s must be one of %s, got %r" % (_var("fabric"), ", ".join(FABRICS), fabric))
    raw_network = s.get("network")
    if raw_network is not None and not isinstance(raw_network, (str, list)):
        found.append("%s must be a network name or a list of them, got %r" % (_var("network"), raw_network))
    else:
        for network in networks(s):
            if not _NETWORK.match(network):
                found.append(
                    "%s: %r is not a NetworkAttachmentDefinition reference ([namespace/]name[@interface])"
                    % (_var("network"), network)
                )
    if fabric in ("ib", "roce"):
        if s.get("rdma_resource") and not _RESOURCE_NAME.match(str(s["rdma_resource"])):
            found.append(
                "%s must be an extended resource name such as rdma/rdma_shared_device_a, got %r"
                % (_var("rdma_resource"), s.get("rdma_resource"))
            )
        if s.get("rdma_resource"):
            _check_int(found, s, "rdma_per_node", 1)
        if not (isinstance(s.get("nccl_ib_hca"), str) and s["nccl_ib_hca"].strip()):
            found.append(
                "%s must name the HCAs for the %s fabric, such as mlx5" % (_var("nccl_ib_hca"), fabric)
            )
        if s.get("nccl_net_gdr_level") not in GDR_LEVELS:
            found.append(
                "%s must be one of LOC, PIX, PXB, PHB, SYS or empty, got %r"
                % (_var("nccl_net_gdr_level"), s.get("nccl_net_gdr_level"))
            )
    if fabric == "roce":
        _check_int(found, s, "nccl_ib_gid_index", 0)
    ifname = s.get("nccl_socket_ifname")
    if ifname and not re.match(r"^[\^=]?[A-Za-z0-9_.,:@-]+$", str(ifname)):
        found.append(
            "%s must be an interface name or NCCL prefix list, got %r" % (_var("nccl_socket_ifname"), ifname)
        )
    _check_int(found, s, "nccl_heartbeat_timeout_s", 1)
    _check_int(found, s, "threads_per_process", 0)
    _check_mapping(found, s, "env", ENV_NAME, "environment variable name")
    found += _secret_env_problems(s)
    if s.get("seccomp_profile") not in SECCOMP_PROFILES:
        found.append(
            "%s must be RuntimeDefault, Unconfined or empty, got %r"
            % (_var("seccomp_profile"), s.get("seccomp_profile"))
        )

    for key in ("run_as_user", "run_as_group"):
        value = s.get(key)
        if not (value is None or (isinstance(value, str) and not value.strip())):
            number = _int(value)
            if number is None or number < 0:
                found.append(
                    "%s must be a user or group id (0 or more) or empty, got %r" % (_var(key), value)
                )

    for pvc_key, mount_key in (("checkpoint_pvc", "checkpoint_mount"), ("dataset_pvc", "dataset_mount")):
        pvc = s.get(pvc_key)
        if pvc and not (isinstance(pvc, str) and _DNS1123_SUBDOMAIN.match(pvc) and len(pvc) <= 253):
            found.append("%s must be a PersistentVolumeClaim name or empty, got %r" % (_var(pvc_key), pvc))
        mount = s.get(mount_key)
        if not (
            isinstance(mount, str) and mount.startswith("/") and mount.rstrip("/") not in ("", "/dev/shm")
        ):
            found.append(
                "%s must be an absolute path other than / and /dev/shm, got %r" % (_var(mount_key), mount)
            )
    if s.get("dataset_pvc") and s.get("checkpoint_mount") == s.get("dataset_mount"):
        found.append(
            "%s and %s must differ, both are %r"
            % (_var("checkpoint_mount"), _var("dataset_mount"), s.get("checkpoint_mount"))
        )

    _check_int(found, s, "max_restarts", 0)
    _check_int(found, s, "backoff_limit", 0)
    _check_int(found, s, "timeout_s", 1)
    _check_int(found, s, "rdzv_port", 1, 65535)
    _check_int(found, s, "rdzv_timeout_s", 1)
    minimum = _check_int(found, s, "elastic_min_nodes", 0)
    maximum = _check_int(found, s, "elastic_max_nodes", 0)
    if minimum and maximum is not None and nnodes:
        if launcher == "indexed_job":
            found.append(
                "%s: elastic runs need the pytorchjob launcher, an Indexed Job has a fixed size"
                % _var("elastic_min_nodes")
            )
        elif launcher == "trainjob":
            found.append(
                "%s: elastic runs need the pytorchjob launcher: Kubeflow Trainer v2 does not run elastic "
                "TrainJobs yet (its torch plugin leaves elasticPolicy to a future JobSet)"
                % _var("elastic_min_nodes")
            )
        elif not minimum <= nnodes <= maximum:
            found.append(
                "%s (%d) <= %s (%d) <= %s (%d) must hold for an elastic run"
                % (
                    _var("elastic_min_nodes"),
                    minimum,
                    _var("nnodes"),
                    nnodes,
                    _var("elastic_max_nodes"),
                    maximum,
                )
            )
    elif maximum and not minimum:
        found.append(
            "%s is set but %s is 0: set both for an elastic run"
            % (_var("elastic_max_nodes"), _var("elastic_min_nodes"))
        )

    if str(s.get("sync_bn")).lower() not in SYNC_BN:
        found.append("%s must be auto, true or false, got %r" % (_var("sync_bn"), s.get("sync_bn")))
    elif str(s.get("sync_bn")).lower() == "true" and not nccl_expected(s):
        found.append(
            "%s is true but the run has no GPUs or uses gloo: SyncBatchNorm needs CUDA" % _var("sync_bn")
        )

    if launcher == "indexed_job" and _bool(s.get("set_hostname_as_fqdn")) and nnodes:
        longest = _fqdn(s, name, nnodes - 1)
        if len(longest) > MAX_HOSTNAME:
            found.append(
                "%s: the pods' host name %s has %d characters, Linux allows %d: shorten %s or %s, "
                "or set %s to false" % (
                    _var("set_hostname_as_fqdn"), longest, len(longest), MAX_HOSTNAME,
                    _var("namespace"), _var("k8s_name"), _var("set_hostname_as_fqdn"),
                )
            )  # fmt: skip
    restart_policy = s.get("pytorchjob_restart_policy")
    if launcher == "pytorchjob" and restart_policy not in PYTORCHJOB_RESTART_POLICIES:
        found.append(
            "%s must be one of %s, got %r"
            % (_var("pytorchjob_restart_policy"), ", ".join(PYTORCHJOB_RESTART_POLICIES), restart_policy)
        )
    indexed_policy = s.get("indexed_job_restart_policy")
    if launcher == "indexed_job" and indexed_policy not in INDEXED_JOB_RESTART_POLICIES:
        found.append(
            "%s must be one of %s, got %r"
            % (_var("indexed_job_restart_policy"), ", ".join(INDEXED_JOB_RESTART_POLICIES), indexed_policy)
        )
    if launcher == "pytorchjob" and _bool(s.get("pytorchjob_master")) and elastic(s):
        found.append(
            "%s: an elastic PyTorchJob has Workers only; set %s to false"
            % (_var("elastic_min_nodes"), _var("pytorchjob_master"))
        )
    if launcher == "trainjob":
        if s.get("trainjob_runtime_kind") not in RUNTIME_KINDS:
            found.append(
                "%s must be TrainingRuntime or ClusterTrainingRuntime, got %r"
                % (_var("trainjob_runtime_kind"), s.get("trainjob_runtime_kind"))
            )
        runtime = s.get("trainjob_runtime")
        if runtime and not (isinstance(runtime, str) and _DNS1123_SUBDOMAIN.match(runtime)):
            found.append("%s must be a runtime name or empty, got %r" % (_var("trainjob_runtime"), runtime))

    _check_mapping(found, s, "pod_annotations", _QUALIFIED_NAME, "annotation key")
    _check_mapping(found, s, "pod_labels", _QUALIFIED_NAME, "label key")
    for key, value in (s.get("pod_labels") or {}).items() if isinstance(s.get("pod_labels"), dict) else []:
        if not _LABEL_VALUE.match(str(value)) or len(str(value)) > 63:
            found.append(
                "%s: the value %r of %s is not a valid label value" % (_var("pod_labels"), value, key)
            )
    _check_mapping(found, s, "node_selector", _QUALIFIED_NAME, "label key")
    if not isinstance(s.get("tolerations"), list) or not all(
        isinstance(t, dict) for t in s.get("tolerations") or []
    ):
        found.append(
            "%s must be a list of tolerations (mappings), got %r"
            % (_var("tolerations"), s.get("tolerations"))
        )
    for key in ("service_account", "priority_class"):
        value = s.get(key)
        if value and not (isinstance(value, str) and _DNS1123_SUBDOMAIN.match(value)):
            found.append("%s must be a DNS-1123 name or empty, got %r" % (_var(key), value))
    args = s.get("trainer_args")
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        found.append(
            "%s must be a list of strings (the trainer's arguments), got %r" % (_var("trainer_args"), args)
        )
    if launcher == "mpijob":
        for key in MPIJOB_KEYS:
            argv = s.get(key, MPI_WORKER_COMMAND if key == "mpi_worker_command" else None)
            if not (isinstance(argv, list) and argv and all(isinstance(arg, str) for arg in argv)):
                found.append("%s must be a non-empty list of strings (a command), got %r" % (_var(key), argv))
    return found


def _checked(settings):
    s = settings_with_defaults(settings)
    found = problems(s)
    if found:
        raise WorkloadError("\n".join(found))
    return s


# --------------------------------------------------------------------------------------
# the container and the pod
# --------------------------------------------------------------------------------------


def fabric_env(settings):
    """NCCL's network settings for the fabric profile, as (name, value) pairs."""
    fabric = settings.get("fabric")
    ifname = settings.get("nccl_socket_ifname") or ("net1" if networks(settings) else "eth0")
    pairs = []
    if fabric in ("ib", "roce"):
        pairs += [("NCCL_IB_DISABLE", "0"), ("NCCL_IB_HCA", str(settings.get("nccl_ib_hca")))]
        if fabric == "roce":
            pairs.append(("NCCL_IB_GID_INDEX", str(_int(settings.get("nccl_ib_gid_index")))))
        if settings.get("nccl_net_gdr_level"):
            pairs.append(("NCCL_NET_GDR_LEVEL", str(settings["nccl_net_gdr_level"])))
    else:
        pairs.append(("NCCL_IB_DISABLE", "1"))
    # NCCL's bootstrap (and the socket transport) and gloo use this interface.
    pairs += [("NCCL_SOCKET_IFNAME", str(ifname)), ("GLOO_SOCKET_IFNAME", str(ifname))]
    return pairs


def env_pairs(settings):
    """Every variable of the trainer container, in order; training_job_env wins on a clash."""
    pairs = fabric_env(settings)
    pairs += [
        ("NCCL_DEBUG", str(settings.get("nccl_debug"))),
        # A hung or failed collective tears the process down (and torchrun restarts the
        # workers) instead of leaving the pod waiting; the watchdog heartbeat is explicit.
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", str(_int(settings.get("nccl_heartbeat_timeout_s")))),
        ("PYTHONUNBUFFERED", "1"),
        # Restarted workers must not reuse the failed attempt's rendezvous store (pytorch#135712).
        ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
    ]
    threads = _int(settings.get("threads_per_process")) or 0
    if threads > 0:
        pairs.append(("OMP_NUM_THREADS", str(threads)))
    extra = [
        (str(key), "" if value is None else str(value)) for key, value in (settings.get("env") or {}).items()
    ]
    overridden = {key for key, _value in extra} | set(settings.get("env_from_secrets") or {})
    return [(key, value) for key, value in pairs if key not in overridden] + extra


def secret_env(settings):
    """The variables read from Secrets, as EnvVar references: the kubelet resolves them, so no
    value is in the pod spec, the rendered manifests or Ansible's output."""
    return [
        {"name": str(name), "valueFrom": {"secretKeyRef": {"name": ref["secret"], "key": ref["key"]}}}
        for name, ref in (settings.get("env_from_secrets") or {}).items()
    ]


def _env(settings):
    return [{"name": key, "value": value} for key, value in env_pairs(settings)] + secret_env(settings)


def resources(settings):
    """requests == limits for cpu, memory, the GPUs and the RDMA devices (Guaranteed QoS)."""
    amounts = {"cpu": str(settings.get("cpu")), "memory": str(settings.get("memory"))}
    gpus = _int(settings.get("gpus_per_node")) or 0
    if gpus > 0:
        amounts[str(settings.get("gpu_resource"))] = str(gpus)
    if uses_rdma(settings):
        amounts[str(settings["rdma_resource"])] = str(_int(settings.get("rdma_per_node")))
    return {"requests": dict(amounts), "limits": dict(amounts)}


def output_dir(settings):
    """The trainer's output directory (checkpoints) inside the pod: one per run on the PVC."""
    return "%s/%s" % (str(settings.get("checkpoint_mount")).rstrip("/"), settings.get("run_id"))


def trainer_args(settings):
    """The trainer's arguments (rendered by the role from trainer_args.j2), plus --sync-bn
    across nodes."""
    args = list(settings.get("trainer_args") or [])
    if sync_bn(settings) and "--sync-bn" not in args:
        args.append("--sync-bn")
    return args


def torchrun_argv(settings, endpoint, nnodes=None):
    """torchrun with c10d rendezvous at ``endpoint``, restarts and an explicit join timeout."""
    if nnodes is None:
        nnodes = str(_int(settings.get("nnodes")))
    timeout = _int(settings.get("rdzv_timeout_s"))
    return [
        str(settings.get("container_python")),
        "-m",
        "gpuops_trainer.launch",
        "--nnodes=%s" % nnodes,
        "--nproc-per-node=%d" % _int(settings.get("nproc_per_node")),
        "--max-restarts=%d" % _int(settings.get("max_restarts")),
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=%s" % endpoint,
        "--rdzv-id=%s" % settings.get("run_id"),
        "--rdzv-conf=join_timeout=%d,read_timeout=%d" % (timeout, timeout),
        "-m",
        "gpuops_trainer.train",
    ] + trainer_args(settings)


def volumes(settings):
    result = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(settings)}}]
    if settings.get("checkpoint_pvc"):
        result.append(
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": settings["checkpoint_pvc"]}}
        )
    else:
        # Without a PVC a restarted container still finds its checkpoints, a new pod does not.
        result.append({"name": "checkpoints", "emptyDir": {}})
    if settings.get("dataset_pvc"):
        result.append(
            {
                "name": "dataset",
                "persistentVolumeClaim": {"claimName": settings["dataset_pvc"], "readOnly": True},
            }
        )
    return result


def volume_mounts(settings):
    result = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "checkpoints", "mountPath": settings.get("checkpoint_mount")},
    ]
    if settings.get("dataset_pvc"):
        result.append({"name": "dataset", "mountPath": settings.get("dataset_mount"), "readOnly": True})
    return result


def container_security_context():
    """IPC_LOCK (RDMA memory registration) and nothing else: every other capability the
    runtime grants by default is dropped; never privileged."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    }


def pod_security_context(settings):
    context = {}
    if settings.get("seccomp_profile"):
        context["seccompProfile"] = {"type": settings["seccomp_profile"]}
    user = _optional_id(settings.get("run_as_user"))
    group = _optional_id(settings.get("run_as_group"))
    if user is not None:
        context["runAsUser"] = user
        if user > 0:
            context["runAsNonRoot"] = True
    if group is not None:
        context["runAsGroup"] = group
        # Files on the checkpoint PVC belong to that group, so a non-root trainer can write.
        context["fsGroup"] = group
    return context


def pod_annotations(settings):
    annotations = {str(key): str(value) for key, value in (settings.get("pod_annotations") or {}).items()}
    if networks(settings):
        annotations[NETWORKS_ANNOTATION] = ",".join(networks(settings))
    return annotations


def container(settings, command, name=None):
    return {
        "name": name or CONTAINER_NAMES.get(settings.get("launcher"), "trainer"),
        "image": settings.get("image"),
        "imagePullPolicy": settings.get("image_pull_policy"),
        "command": command,
        "env": _env(settings),
        "resources": resources(settings),
        "securityContext": container_security_context(),
        "volumeMounts": volume_mounts(settings),
        "ports": [{"name": "rdzv", "containerPort": _int(settings.get("rdzv_port")), "protocol": "TCP"}],
    }


def pod_template(settings, command, container_name=None):
    """The pod every launcher runs: Guaranteed QoS, /dev/shm, IPC_LOCK only, the network."""
    spec = {
        "restartPolicy": "OnFailure",
        "containers": [container(settings, command, container_name)],
        "volumes": volumes(settings),
        # Thousands of services in a namespace would otherwise become environment variables.
        "enableServiceLinks": False,
    }
    security = pod_security_context(settings)
    if security:
        spec["securityContext"] = security
    if settings.get("service_account"):
        spec["serviceAccountName"] = settings["service_account"]
    if settings.get("priority_class"):
        spec["priorityClassName"] = settings["priority_class"]
    if settings.get("node_selector"):
        spec["nodeSelector"] = {str(k): str(v) for k, v in settings["node_selector"].items()}
    if settings.get("tolerations"):
        spec["tolerations"] = list(settings["tolerations"])
    metadata = {"labels": labels(settings)}
    annotations = pod_annotations(settings)
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def _metadata(settings, name=None):
    return {
        "name": name or workload_name(settings),
        "namespace": settings.get("namespace"),
        "labels": labels(settings),
    }


def _deadline(settings):
    return _int(settings.get("timeout_s")) + DEADLINE_GRACE_S


# --------------------------------------------------------------------------------------
# one function per kind
# --------------------------------------------------------------------------------------


def indexed_job(settings):
    """A headless Service and an Indexed Job: pod i is host <job>-i.<service>; the c10d
    rendezvous runs on index 0, as in the seed recipe."""
    s = _checked(settings)
    name = workload_name(s)
    nnodes = _int(s["nnodes"])
    port = _int(s["rdzv_port"])
    endpoint = "%s-0.%s:%d" % (name, name, port)
    template = pod_template(s, torchrun_argv(s, endpoint), CONTAINER_NAMES["indexed_job"])
    template["spec"]["subdomain"] = name
    if _bool(s.get("set_hostname_as_fqdn")):
        template["spec"]["setHostnameAsFQDN"] = True
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(s),
        "spec": {
            "clusterIP": "None",
            # Pods resolve each other while starting, before they are Ready.
            "publishNotReadyAddresses": True,
            "selector": {RUN_ID_LABEL: run_label(s)},
            "ports": [{"name": "rdzv", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(s),
        "spec": {
            "completionMode": "Indexed",
            "completions": nnodes,
            "parallelism": nnodes,
            "backoffLimit": _int(s["backoff_limit"]),
            "activeDeadlineSeconds": _deadline(s),
            "template": template,
        },
    }
    if s["indexed_job_restart_policy"] == "ExitCode":
        template["spec"]["restartPolicy"] = "Never"
        job["spec"]["podFailurePolicy"] = {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER_NAMES["indexed_job"],
                        "operator": "In",
                        "values": list(PERMANENT_EXIT_CODES),
                    },
                },
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]
        }
    return [service, job]


def pytorchjob(settings):
    """A Kubeflow PyTorchJob of nnodes Workers with c10d rendezvous on worker 0 (between the
    minimum and maximum with an elastic policy), or with training_job_pytorchjob_master a
    Master and nnodes-1 Workers with the rendezvous on the master.

    The Training Operator adds an init container (requests below limits) to every Worker of a
    job with a Master, which makes those Workers Burstable: Workers only keep every pod
    Guaranteed.
    """
    s = _checked(settings)
    name = workload_name(s)
    port = _int(s["rdzv_port"])
    nnodes = _int(s["nnodes"])
    spec = {
        "nprocPerNode": str(_int(s["nproc_per_node"])),
        "runPolicy": {
            "backoffLimit": _int(s["backoff_limit"]),
            "activeDeadlineSeconds": _deadline(s),
            # The launcher reads every pod's log after the end: keep the pods.
            "cleanPodPolicy": "None",
        },
        "pytorchReplicaSpecs": {},
    }
    if elastic(s):
        minimum, maximum = _int(s["elastic_min_nodes"]), _int(s["elastic_max_nodes"])
        command = torchrun_argv(s, "%s-worker-0:%d" % (name, port), "%d:%d" % (minimum, maximum))
        timeout = str(_int(s["rdzv_timeout_s"]))
        spec["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "rdzvPort": port,
            "minReplicas": minimum,
            "maxReplicas": maximum,
            "maxRestarts": _int(s["max_restarts"]),
            "rdzvConf": [
                {"key": "join_timeout", "value": timeout},
                {"key": "read_timeout", "value": timeout},
            ],
        }
        replicas = {"Worker": nnodes}
    elif _bool(s.get("pytorchjob_master")):
        command = torchrun_argv(s, "%s-master-0:%d" % (name, port))
        replicas = {"Master": 1}
        if nnodes > 1:
            replicas["Worker"] = nnodes - 1
    else:
        # Workers only: with a Master the operator adds an init container with requests below
        # its limits to every Worker, which makes the Workers Burstable.
        command = torchrun_argv(s, "%s-worker-0:%d" % (name, port))
        replicas = {"Worker": nnodes}
    for replica_type, count in replicas.items():
        template = pod_template(s, command, CONTAINER_NAMES["pytorchjob"])
        # The operator finds the rendezvous port by this name.
        template["spec"]["containers"][0]["ports"][0]["name"] = PYTORCHJOB_PORT_NAME
        spec["pytorchReplicaSpecs"][replica_type] = {
            "replicas": count,
            "restartPolicy": s["pytorchjob_restart_policy"],
            "template": template,
        }
    return [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _metadata(s), "spec": spec}]


def trainjob(settings):
    """A Kubeflow Trainer v2 TrainJob.

    Without training_job_trainjob_runtime, a namespaced TrainingRuntime of the same name
    carries the whole pod (the TrainJob API cannot set a security context or resources
    limits apart from requests), and the TrainJob references it. With it, the TrainJob
    references that runtime and overrides what the API lets it: image, command, environment,
    resources per node, volumes and mounts, labels and annotations, node selection; the
    runtime must then grant IPC_LOCK and the user ids itself.
    """
    s = _checked(settings)
    name = workload_name(s)
    nnodes = _int(s["nnodes"])
    port = _int(s["rdzv_port"])
    # Trainer v2 names node pods <trainjob>-node-0-<index> in a headless service named after the TrainJob.
    command = torchrun_argv(s, "%s-node-0-0.%s:%d" % (name, name, port))
    template = pod_template(s, command, CONTAINER_NAMES["trainjob"])
    objects = []
    trainer = {
        "numNodes": nnodes,
        "numProcPerNode": _int(s["nproc_per_node"]),
    }
    trainjob_spec = {"labels": labels(s), "trainer": trainer}
    if s.get("trainjob_runtime"):
        trainjob_spec["runtimeRef"] = {
            "name": s["trainjob_runtime"],
            "apiGroup": TRAINER_API,
            "kind": s.get("trainjob_runtime_kind"),
        }
        container_spec = template["spec"]["containers"][0]
        trainer.update(
            {
                "image": s["image"],
                "command": command,
                "env": container_spec["env"],
                "resourcesPerNode": container_spec["resources"],
            }
        )
        override_spec = {
            "volumes": template["spec"]["volumes"],
            "containers": [{"name": "node", "volumeMounts": container_spec["volumeMounts"]}],
        }
        for key in ("nodeSelector", "tolerations", "serviceAccountName"):
            if key in template["spec"]:
                override_spec[key] = template["spec"][key]
        trainjob_spec["podTemplateOverrides"] = [
            {"targetJobs": [{"name": "node"}], "metadata": template["metadata"], "spec": override_spec}
        ]
    else:
        torch_policy = {"numProcPerNode": _int(s["nproc_per_node"])}
        job_template_labels = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
        job_template_labels.update(labels(s))
        objects.append(
            {
                "apiVersion": "%s/v1alpha1" % TRAINER_API,
                "kind": "TrainingRuntime",
                "metadata": _metadata(s),
                "spec": {
                    "mlPolicy": {"numNodes": nnodes, "torch": torch_policy},
                    "template": {
                        "metadata": {"labels": labels(s)},
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": "node",
                                    "replicas": 1,
                                    "template": {
                                        "metadata": {"labels": job_template_labels},
                                        "spec": {
                                            "backoffLimit": _int(s["backoff_limit"]),
                                            "activeDeadlineSeconds": _deadline(s),
                                            "template": template,
                                        },
                                    },
                                }
                            ]
                        },
                    },
                },
            }
        )
        trainjob_spec["runtimeRef"] = {"name": name, "apiGroup": TRAINER_API, "kind": "TrainingRuntime"}
    objects.append(
        {
            "apiVersion": "%s/v1alpha1" % TRAINER_API,
            "kind": "TrainJob",
            "metadata": _metadata(s),
            "spec": trainjob_spec,
        }
    )
    return objects


def runai_argv(settings):
    """``runai training pytorch submit NAME ...`` from the same settings, as an argv list.

    Run:ai creates a master pod and ``--workers`` worker pods: the run's nnodes nodes are the
    master and nnodes-1 workers. torchrun meets at the master through the MASTER_ADDR and
    MASTER_PORT variables the PyTorch operator sets, which Kubernetes expands in the command.
    """
    s = _checked(settings)
    argv = ["runai", "training", "pytorch", "submit", workload_name(s)]
    if s.get("runai_project"):
        argv += ["--project", str(s["runai_project"])]
    argv += ["--image", str(s["image"]), "--workers", str(_int(s["nnodes"]) - 1)]
    gpus = _int(s["gpus_per_node"]) or 0
    if gpus > 0:
        argv += ["--gpu-devices-request", str(gpus)]
    argv += [
        "--cpu-core-request", str(s["cpu"]),
        "--cpu-core-limit", str(s["cpu"]),
        "--cpu-memory-request", str(s["memory"]),
        "--cpu-memory-limit", str(s["memory"]),
        "--large-shm",
    ]  # fmt: skip
    for key, value in pod_annotations(s).items():
        argv += ["--annotation", "%s=%s" % (key, value)]
    if uses_rdma(s):
        argv += ["--extended-resource", "%s=%d" % (s["rdma_resource"], _int(s["rdma_per_node"]))]
    user, group = _optional_id(s.get("run_as_user")), _optional_id(s.get("run_as_group"))
    if user is not None:
        argv += ["--run-as-uid", str(user)]
    if group is not None:
        argv += ["--run-as-gid", str(group)]
    for key, value in env_pairs(s):
        argv += ["--environment-variable", "%s=%s" % (key, value)]
    if s.get("checkpoint_pvc"):
        argv += ["--existing-pvc", "claimname=%s,path=%s" % (s["checkpoint_pvc"], s["checkpoint_mount"])]
    if s.get("dataset_pvc"):
        argv += ["--existing-pvc", "claimname=%s,path=%s" % (s["dataset_pvc"], s["dataset_mount"])]
    argv += ["--command", "--"] + torchrun_argv(s, "$(MASTER_ADDR):$(MASTER_PORT)")
    return argv


def mpijob(settings):
    """A Kubeflow MPIJob (kubeflow.org/v1, the Training Operator's) for nccl-tests: one launcher
    running ``mpirun_argv`` over nnodes workers with ``nproc_per_node`` slots each.

    The workers get the pod every launcher renders (Guaranteed QoS, /dev/shm, IPC_LOCK only,
    the network, RDMA and the fabric's NCCL variables) and wait (``mpi_worker_command``); the
    operator's hostfile and ``kubectl exec`` agent let mpirun start the ranks in them, in the
    container ``mainContainer`` names. The launcher is a small Guaranteed pod without GPUs,
    with the same NCCL variables (mpirun passes them on with -x), and the service account the
    operator creates for it (the right to exec into the workers). Nothing restarts: a
    benchmark run again in place would replace the log that is read afterwards, and a failed
    launcher's pod (and log) stays until the MPIJob is deleted.
    """
    s = _checked(settings)
    worker_name = CONTAINER_NAMES["mpijob"]
    worker = pod_template(s, list(s.get("mpi_worker_command", MPI_WORKER_COMMAND)), worker_name)
    launcher = pod_template(s, list(s["mpirun_argv"]), "mpi-launcher")
    launcher_container = launcher["spec"]["containers"][0]
    launcher_container["resources"] = {
        "requests": dict(MPI_LAUNCHER_RESOURCES),
        "limits": dict(MPI_LAUNCHER_RESOURCES),
    }
    launcher_container.pop("ports", None)
    worker["spec"]["containers"][0].pop("ports", None)
    # The operator's <name>-launcher service account may exec into the workers; another one
    # could not.
    launcher["spec"].pop("serviceAccountName", None)
    # The launcher needs neither the secondary network nor the checkpoint volume.
    launcher["metadata"].get("annotations", {}).pop(NETWORKS_ANNOTATION, None)
    launcher["spec"]["volumes"] = [
        volume for volume in launcher["spec"]["volumes"] if volume["name"] == "dshm"
    ]
    launcher_container["volumeMounts"] = [
        mount for mount in launcher_container["volumeMounts"] if mount["name"] == "dshm"
    ]
    # The operator sets each pod's restartPolicy from its replica's (Never below) and warns
    # about one in the template.
    for template in (launcher, worker):
        template["spec"].pop("restartPolicy", None)
    spec = {
        "slotsPerWorker": _int(s["nproc_per_node"]),
        "mainContainer": worker_name,
        # No backoffLimit: nothing restarts, and the operator deletes every pod, the failed
        # launcher and its log included, when a job reaches its backoff limit (it keeps them
        # when the launcher's failure alone ends the job, with cleanPodPolicy None).
        "runPolicy": {
            "activeDeadlineSeconds": _deadline(s),
            # The launcher's log is read after the end: keep the pods.
            "cleanPodPolicy": "None",
        },
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
            "Worker": {"replicas": _int(s["nnodes"]), "restartPolicy": "Never", "template": worker},
        },
    }
    return [{"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": _metadata(s), "spec": spec}]


KINDS = {
    "mpijob": ("MPIJob", "kubeflow.org/v1", mpijob),
    "indexed_job": ("Job", "batch/v1", indexed_job),
    "pytorchjob": ("PyTorchJob", "kubeflow.org/v1", pytorchjob),
    "trainjob": ("TrainJob", "%s/v1alpha1" % TRAINER_API, trainjob),
}


def workload(settings):
    """Everything a launcher needs: the objects in apply order, the kind and name to wait for,
    the pod selector, the expected number of pods, the transport to verify and, for runai,
    the command."""
    s = _checked(settings)
    launcher = s["launcher"]
    name = workload_name(s)
    result = {
        "launcher": launcher,
        "name": name,
        "namespace": s["namespace"],
        "pod_selector": pod_selector(s),
        "expected_pods": _int(s["nnodes"]) + (1 if launcher == "mpijob" else 0),
        "world_size": _int(s["nnodes"]) * _int(s["nproc_per_node"]),
        "shm_size": shm_size(s),
        "env": dict(env_pairs(s)),
        "output_dir": output_dir(s),
        "sync_bn": sync_bn(s),
        "nccl_expected": nccl_expected(s),
        "nccl_transport": expected_transport(s) if nccl_expected(s) else "",
        "manifests": [],
        "kind": None,
        "api_version": None,
        "command": None,
        "runai_argv": None,
    }
    if launcher == "runai":
        # Run:ai runs a PyTorch workload as a Kubeflow PyTorchJob of the workload's name, whose
        # pods the Training Operator labels with the job name (our labels do not reach them).
        result.update({"kind": "PyTorchJob", "api_version": "kubeflow.org/v1", "runai_argv": runai_argv(s)})
        result["pod_selector"] = "%s=%s" % (RUNAI_JOB_NAME_LABEL, name)
        result["command"] = result["runai_argv"][result["runai_argv"].index("--") + 1 :]
        return result
    kind, api_version, build = KINDS[launcher]
    manifests = build(s)
    result.update({"kind": kind, "api_version": api_version, "manifests": manifests})
    result["command"] = next(command for command in map(_command_of, manifests) if command)
    return result


def _command_of(obj):
    """The trainer container's command inside a workload object; None where it has none."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Job":
        return spec["template"]["spec"]["containers"][0]["command"]
    if obj["kind"] == "PyTorchJob":
        first = next(iter(spec["pytorchReplicaSpecs"].values()))
        return first["template"]["spec"]["containers"][0]["command"]
    if obj["kind"] == "MPIJob":
        return spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    if obj["kind"] == "TrainingRuntime":
        job = spec["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        return job["template"]["spec"]["containers"][0]["command"]
    if obj["kind"] == "TrainJob":
        return (spec.get("trainer") or {}).get("command")
    return None

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every check of a training run's settings, by concern, each problem naming its variable.

:func:`problems` runs the concerns that apply to the launcher the settings name: what every
run needs (its name, its id, torchrun's ranges, the environment), what the trainer needs (its
ranges and formats), and, for the launchers that render a pod, its identity on Kubernetes,
resources, fabric, security, storage, elastic runs, scheduling, placement and gang scheduling
(:mod:`pod_scheduling`) and what one kind alone needs.
The choices come from the role's argument spec. The training_job role runs them before
anything starts (``tasks/validate.yml``), and the nccl_tests role before it renders an
MPIJob; both pass their prefix, so that each message names the caller's own variable.
"""

from __future__ import annotations

import json
import math
import re

from ansible_collections.gpuops.training.plugins.module_utils import pod_scheduling as ps
from ansible_collections.gpuops.training.plugins.module_utils import role_settings
from ansible_collections.gpuops.training.plugins.module_utils import training_settings as ts
from ansible_collections.gpuops.training.plugins.module_utils.health.gate import gate_problems
from ansible_collections.gpuops.training.plugins.module_utils.image_pull_secrets import name_problems
from ansible_collections.gpuops.training.plugins.module_utils.k8s_names import (
    dns_label_problem,
    dns_subdomain_problem,
    label_value_problem,
    qualified_name_problem,
)
from ansible_collections.gpuops.training.plugins.module_utils.quantities import (
    QuantityError,
    format_bytes,
    parse_quantity,
)
from ansible_collections.gpuops.training.plugins.module_utils.role_settings import SettingsError
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import ENV_NAME
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_bool as _bool
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int
from ansible_collections.gpuops.training.plugins.module_utils.sizing import SizingError

# The run directory is <runs_dir>/<run id>: a plain name keeps it inside runs_dir.
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_INJECT_FAULT = re.compile(r"^[0-9]+@[0-9]+(:(exit|raise|kill))?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
# A Multus network reference: [namespace/]name[@interface].
_NETWORK = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(@[A-Za-z0-9_.-]{1,15})?$"
)
_SOCKET_IFNAME = re.compile(r"^[\^=]?[A-Za-z0-9_.,:@-]+$")
# NCCL_DEBUG_SUBSYS: subsystem names separated by commas, a leading ^ excluding them.
_DEBUG_SUBSYS = re.compile(r"^\^?[A-Za-z_]+(,[A-Za-z_]+)*$")
# The objects' name: a DNS-1035 label short enough for <name>-<index>.<name> host names.
MAX_WORKLOAD_NAME = 40
# Linux keeps host names to 64 characters; setHostnameAsFQDN makes the FQDN the host name.
MAX_HOSTNAME = 64
# Lower bounds of the integer settings of every run (torchrun and the trainer alike).
RUN_MINIMUMS = (
    ("nproc_per_node", 1),
    ("max_restarts", 0),
    ("timeout_s", 1),
    ("rdzv_timeout_s", 1),
    ("poll_interval_s", 1),
    ("threads_per_process", 0),
    ("nccl_heartbeat_timeout_s", 1),
    ("log_parallel", 1),
    ("log_timeout_s", 1),
    ("stuck_timeout", 0),
)
TRAINER_MINIMUMS = (
    ("synthetic_images", 1),
    ("synthetic_classes", 1),
    ("min_size", 32),
    ("max_size", 32),
    ("image_size", 32),
    ("epochs", 1),
    ("batch_size", 1),
    ("warmup_iters", 0),
    ("workers", 0),
    ("print_freq", 1),
    ("collective_timeout_s", 1),
)
MAX_PORT = 65535


def problems(settings, prefix=ts.PREFIX):
    """Every problem with the settings, each naming the caller's variable; empty when valid."""
    try:
        s = ts.with_defaults(settings, prefix)
    except SettingsError as error:
        return [str(error)]
    var = role_settings.variable_namer(prefix)
    launcher = s.get("launcher")
    if launcher not in ts.LAUNCHERS:
        return ["%s must be one of %s, got %r" % (var("launcher"), ", ".join(ts.LAUNCHERS), launcher)]
    found = role_settings.choice_problems(ts.ROLE, ts.PREFIX, s, var, skip=("launcher",))
    for launchers, concern in CONCERNS:
        if launcher in launchers:
            found += concern(s, var)
    return found


def required_problems(settings, prefix=ts.PREFIX):
    """What a builder needs beyond valid settings, which the role computes: the run's id and,
    for an MPIJob, mpirun's command line."""
    var = role_settings.variable_namer(prefix)
    found = []
    if not (isinstance(settings.get("run_id"), str) and settings["run_id"]):
        found.append("%s is empty: the run needs an id" % var("run_id"))
    if settings.get("launcher") == "mpijob" and not _command(settings.get("mpirun_argv")):
        found.append(
            "%s must be a non-empty list of strings (a command), got %r"
            % (var("mpirun_argv"), settings.get("mpirun_argv"))
        )
    return found


def checked(settings, prefix=ts.PREFIX, launchers=ts.LAUNCHERS, what="the settings"):
    """The settings with their defaults, or SettingsError listing every problem."""
    s = ts.with_defaults(settings, prefix)
    found = problems(s, prefix)
    if not found and s.get("launcher") not in launchers:
        found.append(
            "%s is %r, but %s are for the %s launchers"
            % (
                role_settings.variable_namer(prefix)("launcher"),
                s.get("launcher"),
                what,
                ", ".join(launchers),
            )
        )
    found = found or required_problems(s, prefix)
    if found:
        raise SettingsError("\n".join(found))
    return s


# --------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------


def _check_int(found, s, var, key, minimum, maximum=None):
    value = _int(s.get(key))
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bound = "of at least %d" % minimum if maximum is None else "between %d and %d" % (minimum, maximum)
        found.append("%s must be an integer %s, got %r" % (var(key), bound, s.get(key)))
        return None
    return value


def _check_quantity(found, s, var, key):
    try:
        value = parse_quantity(s.get(key), var(key))
    except QuantityError as error:
        found.append(str(error))
        return None
    if value <= 0:
        found.append("%s must be a quantity above 0, got %r" % (var(key), s.get(key)))
        return None
    return value


def _check_mapping(found, s, var, key, name_problem=None, what="key"):
    value = s.get(key)
    if not isinstance(value, dict):
        found.append("%s must be a mapping, got %r" % (var(key), value))
        return
    for name, item in value.items():
        if name_problem is not None and name_problem(str(name)):
            found.append("%s: %r is not a valid %s" % (var(key), name, what))
        if isinstance(item, (dict, list)):
            found.append("%s: the value of %s must be a string or a number, got %r" % (var(key), name, item))


def _positive_number(value):
    """A finite float above 0 from a number or a numeric string; None otherwise."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def _command(value):
    return isinstance(value, list) and bool(value) and all(isinstance(arg, str) for arg in value)


def _env_name_problem(name):
    return None if ENV_NAME.match(name) else "not an environment variable name"


def _subdomain(value):
    return isinstance(value, str) and dns_subdomain_problem(value) is None


def _resource_name(value):
    return isinstance(value, str) and qualified_name_problem(value, require_prefix=True) is None


# --------------------------------------------------------------------------------------
# every run
# --------------------------------------------------------------------------------------


def run_problems(s, var):
    """The run's name and id (its directory), torchrun's ranges and the environment."""
    found = []
    for key in ("name", "run_id"):
        value = s.get(key)
        if key == "run_id" and value in ("", None):
            continue
        if not (isinstance(value, str) and _PLAIN_NAME.match(value)):
            found.append(
                "%s must be a plain name (letters, digits, '.', '_' and '-', starting with a letter or "
                "digit, at most 100 characters) so that the run directory stays inside %s, got %s"
                % (var(key), s.get("runs_dir"), json.dumps(value, default=repr))
            )
    for key, minimum in RUN_MINIMUMS:
        _check_int(found, s, var, key, minimum)
    _check_int(found, s, var, "rdzv_port", 1, MAX_PORT)
    _check_mapping(found, s, var, "env", _env_name_problem, "environment variable name")
    subsys = s.get("nccl_debug_subsys")
    if subsys not in ("", None) and not (isinstance(subsys, str) and _DEBUG_SUBSYS.match(subsys)):
        found.append(
            "%s must be NCCL subsystem names separated by commas (INIT,NET; a leading ^ excludes them) "
            "or empty for NCCL's default, got %s"
            % (var("nccl_debug_subsys"), json.dumps(subsys, default=repr))
        )
    return found


def secret_env_problems(s, var):
    """env_from_secrets: NAME -> {secret: <Secret name>, key: <key in it>}, names not in env;
    only the launchers whose pods can read Secrets."""
    key = "env_from_secrets"
    value = s.get(key)
    if not isinstance(value, dict):
        return ["%s must be a mapping of variable names to {secret, key}, got %r" % (var(key), value)]
    if value and s.get("launcher") in ts.HOST_LAUNCHERS:
        return [
            "%s references Kubernetes Secrets, which the %s launcher cannot read; use %s, or a "
            "Kubernetes launcher (pytorchjob, indexed_job, trainjob)" % (var(key), s["launcher"], var("env"))
        ]
    found = []
    if value and s.get("launcher") == "runai":
        found.append(
            "%s: the runai launcher cannot reference Secrets; use the Run:ai project's credentials "
            "or %s" % (var(key), var("env"))
        )
    plain = s.get("env") if isinstance(s.get("env"), dict) else {}
    for name, ref in value.items():
        if not ENV_NAME.match(str(name)):
            found.append("%s: %r is not a valid environment variable name" % (var(key), name))
        elif name in plain:
            found.append("%s: %s is also set in %s; set it in one of them" % (var(key), name, var("env")))
        if not isinstance(ref, dict) or set(ref) != {"secret", "key"}:
            found.append(
                "%s: %s must be a mapping with exactly the keys secret and key, got %r"
                % (var(key), name, ref)
            )
            continue
        secret, secret_key = ref["secret"], ref["key"]
        if not _subdomain(secret):
            found.append("%s: %s.secret must be a Secret name, got %r" % (var(key), name, secret))
        if not (isinstance(secret_key, str) and _SECRET_KEY.match(secret_key)) or secret_key in (".", ".."):
            found.append(
                "%s: %s.key must be a key of the Secret (letters, digits, '-', '_', '.'), got %r"
                % (var(key), name, secret_key)
            )
    return found


# --------------------------------------------------------------------------------------
# the trainer
# --------------------------------------------------------------------------------------


def trainer_problems(s, var):
    """The trainer's own arguments: ranges, the fault drill, the dataset."""
    found = []
    for key, minimum in TRAINER_MINIMUMS:
        _check_int(found, s, var, key, minimum)
    if _positive_number(s.get("lr")) is None:
        found.append("%s must be a positive number, got %r" % (var("lr"), s.get("lr")))
    fault = s.get("inject_fault")
    if fault and not (isinstance(fault, str) and _INJECT_FAULT.match(fault)):
        found.append(
            "%s must look like RANK@STEP or RANK@STEP:MODE with MODE exit, raise or kill (for example "
            "1@3), got %s" % (var("inject_fault"), fault)
        )
    if s.get("dataset") != "synthetic" and not (isinstance(s.get("dataset_path"), str) and s["dataset_path"]):
        found.append(
            "%s is required when %s is %s; set it to the dataset's root directory on the target host "
            "(or use %s=synthetic)" % (var("dataset_path"), var("dataset"), s.get("dataset"), var("dataset"))
        )
    extra = s.get("extra_args")
    if not (isinstance(extra, list) and all(isinstance(arg, str) for arg in extra)):
        found.append(
            "%s must be a list of strings (the trainer's arguments), got %r" % (var("extra_args"), extra)
        )
    return found


# --------------------------------------------------------------------------------------
# the pod (every launcher that renders one)
# --------------------------------------------------------------------------------------


def identity_problems(s, var):
    """The objects' name and namespace, the image, its pull Secrets and the interpreter in it."""
    found = []
    name = ts.workload_name(s)
    if not (dns_label_problem(name) is None and name[0].isalpha() and len(name) <= MAX_WORKLOAD_NAME):
        found.append(
            "%s: the objects' name %r must be a DNS-1035 label (lower-case letters, digits and '-', "
            "starting with a letter) of at most %d characters" % (var("k8s_name"), name, MAX_WORKLOAD_NAME)
        )
    if s.get("launcher") != "runai" and dns_label_problem(s.get("namespace")):
        found.append(
            "%s must be a DNS-1123 label such as training, got %r" % (var("namespace"), s.get("namespace"))
        )
    if not (isinstance(s.get("image"), str) and s["image"].strip()):
        what = (
            "nccl-tests built with MPI=1 and mpirun"
            if s["launcher"] == "mpijob"
            else "torch and gpuops-trainer"
        )
        found.append(
            "%s is required for the %s launcher: the container image with %s"
            % (var("image"), s["launcher"], what)
        )
    if not (isinstance(s.get("container_python"), str) and s["container_python"].strip()):
        found.append("%s must name the Python interpreter in the image" % var("container_python"))
    found += pull_secret_problems(s, var)
    return found


def pull_secret_problems(s, var):
    """The image pull Secrets: names, each once; the runai launcher cannot set them."""
    value = s.get("image_pull_secrets")
    found = name_problems(value, var("image_pull_secrets"))
    if not found and value and s.get("launcher") == "runai":
        found.append(
            "%s: the runai launcher cannot set image pull Secrets; give them to the Run:ai project"
            % var("image_pull_secrets")
        )
    return found


def resource_problems(s, var):
    """Pods, ranks and GPUs, cpu, memory and /dev/shm (Guaranteed QoS)."""
    found = []
    _check_int(found, s, var, "nnodes", 1)
    nproc = _int(s.get("nproc_per_node"))
    gpus = _check_int(found, s, var, "gpus_per_node", 0)
    if gpus and nproc and nproc > gpus:
        found.append(
            "%s (%d) exceeds %s (%d): each rank needs a GPU of its own"
            % (var("nproc_per_node"), nproc, var("gpus_per_node"), gpus)
        )
    if gpus == 0 and s.get("backend") == "nccl":
        found.append("%s is nccl but %s is 0: NCCL needs GPUs" % (var("backend"), var("gpus_per_node")))
    if not _resource_name(s.get("gpu_resource")):
        found.append(
            "%s must be an extended resource name such as nvidia.com/gpu, got %r"
            % (var("gpu_resource"), s.get("gpu_resource"))
        )
    _check_quantity(found, s, var, "cpu")
    memory = _check_quantity(found, s, var, "memory")
    shm = None
    if s.get("shm_size"):
        shm = _check_quantity(found, s, var, "shm_size")
    else:
        try:
            shm = parse_quantity(format_bytes(ts.sized_shm_bytes(s), "Gi"))
        except (SizingError, QuantityError, TypeError) as error:
            found.append("%s: cannot size /dev/shm: %s" % (var("shm_size"), error))
    if memory is not None and shm is not None and shm >= memory:
        found.append(
            "%s (%s) must be larger than the /dev/shm size %s: a memory-backed emptyDir counts "
            "against the container's memory limit" % (var("memory"), s.get("memory"), ts.shm_size(s))
        )
    return found


def fabric_problems(s, var):
    """The Multus networks, the RDMA devices and NCCL's variables of the fabric profile."""
    found = []
    fabric = s.get("fabric")
    raw_network = s.get("network")
    if raw_network is not None and not isinstance(raw_network, (str, list)):
        found.append("%s must be a network name or a list of them, got %r" % (var("network"), raw_network))
    else:
        for network in ts.networks(s):
            if not _NETWORK.match(network):
                found.append(
                    "%s: %r is not a NetworkAttachmentDefinition reference ([namespace/]name[@interface])"
                    % (var("network"), network)
                )
    if fabric in ("ib", "roce"):
        if s.get("rdma_resource"):
            if not _resource_name(s["rdma_resource"]):
                found.append(
                    "%s must be an extended resource name such as rdma/rdma_shared_device_a, got %r"
                    % (var("rdma_resource"), s.get("rdma_resource"))
                )
            _check_int(found, s, var, "rdma_per_node", 1)
        if not (isinstance(s.get("nccl_ib_hca"), str) and s["nccl_ib_hca"].strip()):
            found.append(
                "%s must name the HCAs for the %s fabric, such as mlx5" % (var("nccl_ib_hca"), fabric)
            )
    if fabric == "roce":
        _check_int(found, s, var, "nccl_ib_gid_index", 0)
    ifname = s.get("nccl_socket_ifname")
    if ifname and not _SOCKET_IFNAME.match(str(ifname)):
        found.append(
            "%s must be an interface name or NCCL prefix list, got %r" % (var("nccl_socket_ifname"), ifname)
        )
    return found


def security_problems(s, var):
    """The user and group ids the trainer runs as (the seccomp profile is a choice)."""
    found = []
    for key in ("run_as_user", "run_as_group"):
        value = s.get(key)
        if not (value is None or (isinstance(value, str) and not value.strip())):
            number = _int(value)
            if number is None or number < 0:
                found.append("%s must be a user or group id (0 or more) or empty, got %r" % (var(key), value))
    return found


def storage_problems(s, var):
    """The checkpoint and dataset claims and where they are mounted."""
    found = []
    for pvc_key, mount_key in (("checkpoint_pvc", "checkpoint_mount"), ("dataset_pvc", "dataset_mount")):
        pvc = s.get(pvc_key)
        if pvc and not _subdomain(pvc):
            found.append("%s must be a PersistentVolumeClaim name or empty, got %r" % (var(pvc_key), pvc))
        mount = s.get(mount_key)
        if not (
            isinstance(mount, str) and mount.startswith("/") and mount.rstrip("/") not in ("", "/dev/shm")
        ):
            found.append(
                "%s must be an absolute path other than / and /dev/shm, got %r" % (var(mount_key), mount)
            )
    if s.get("dataset_pvc") and s.get("checkpoint_mount") == s.get("dataset_mount"):
        found.append(
            "%s and %s must differ, both are %r"
            % (var("checkpoint_mount"), var("dataset_mount"), s.get("checkpoint_mount"))
        )
    return found + extra_volume_problems(s, var)


# The pod's own volumes; a user's volume of the same name would replace one of them.
OWN_VOLUMES = ("dshm", "checkpoints", "dataset")


def extra_volume_problems(s, var):
    """The user's volumes: Volume objects with new, valid names, each mounted by a VolumeMount
    at an absolute path none of the pod's own mounts uses."""
    found = []
    volumes = s.get("volumes") or []
    mounts = s.get("volume_mounts") or []
    names = []
    if not isinstance(volumes, list):
        return ["%s must be a list of Kubernetes Volume objects, got %r" % (var("volumes"), volumes)]
    for index, volume in enumerate(volumes):
        name = volume.get("name") if isinstance(volume, dict) else None
        if not isinstance(name, str) or dns_label_problem(name):
            found.append(
                "%s[%d] must be a Volume with a name that is a DNS label, got %r"
                % (var("volumes"), index, volume)
            )
        elif name in OWN_VOLUMES or name in names:
            found.append(
                "%s[%d] is named %r, which %s"
                % (
                    var("volumes"),
                    index,
                    name,
                    "the pod uses for its own volume" if name in OWN_VOLUMES else "an earlier volume has",
                )
            )
        elif len(volume) < 2:
            found.append(
                "%s[%d] (%s) names no volume source (hostPath, nfs, configMap, ...)"
                % (var("volumes"), index, name)
            )
        names.append(name)
    if not isinstance(mounts, list):
        return found + [
            "%s must be a list of Kubernetes VolumeMount objects, got %r" % (var("volume_mounts"), mounts)
        ]
    taken = {"/dev/shm", str(s.get("checkpoint_mount")).rstrip("/")}
    if s.get("dataset_pvc"):
        taken.add(str(s.get("dataset_mount")).rstrip("/"))
    for index, mount in enumerate(mounts):
        if not isinstance(mount, dict) or not isinstance(mount.get("name"), str):
            found.append(
                "%s[%d] must be a VolumeMount with a name, got %r" % (var("volume_mounts"), index, mount)
            )
            continue
        path = mount.get("mountPath")
        if mount["name"] not in names:
            found.append(
                "%s[%d] mounts %r, which is not in %s"
                % (var("volume_mounts"), index, mount["name"], var("volumes"))
            )
        if not (isinstance(path, str) and path.startswith("/") and path.rstrip("/")):
            found.append(
                "%s[%d] needs an absolute mountPath other than /, got %r"
                % (var("volume_mounts"), index, path)
            )
        elif path.rstrip("/") in taken:
            found.append(
                "%s[%d] mounts at %s, which the pod already uses" % (var("volume_mounts"), index, path)
            )
        else:
            taken.add(path.rstrip("/"))
    return found


def elastic_problems(s, var):
    """Restarts, elastic sizes (a PyTorchJob's alone) and SyncBatchNorm."""
    found = []
    launcher = s.get("launcher")
    _check_int(found, s, var, "backoff_limit", 0)
    nnodes = _int(s.get("nnodes"))
    minimum = _check_int(found, s, var, "elastic_min_nodes", 0)
    maximum = _check_int(found, s, var, "elastic_max_nodes", 0)
    if minimum and maximum is not None and nnodes and nnodes > 0:
        if launcher == "indexed_job":
            found.append(
                "%s: elastic runs need the pytorchjob launcher, an Indexed Job has a fixed size"
                % var("elastic_min_nodes")
            )
        elif launcher == "trainjob":
            found.append(
                "%s: elastic runs need the pytorchjob launcher: Kubeflow Trainer v2 does not run elastic "
                "TrainJobs yet (its torch plugin leaves elasticPolicy to a future JobSet)"
                % var("elastic_min_nodes")
            )
        elif not minimum <= nnodes <= maximum:
            found.append(
                "%s (%d) <= %s (%d) <= %s (%d) must hold for an elastic run"
                % (
                    var("elastic_min_nodes"),
                    minimum,
                    var("nnodes"),
                    nnodes,
                    var("elastic_max_nodes"),
                    maximum,
                )
            )
    elif maximum and not minimum:
        found.append(
            "%s is set but %s is 0: set both for an elastic run"
            % (var("elastic_max_nodes"), var("elastic_min_nodes"))
        )
    if launcher == "pytorchjob" and _bool(s.get("pytorchjob_master")) and ts.elastic(s):
        found.append(
            "%s: an elastic PyTorchJob has Workers only; set %s to false"
            % (var("elastic_min_nodes"), var("pytorchjob_master"))
        )
    choice = str(s.get("sync_bn")).lower()
    if choice not in ("auto", "true", "false"):
        found.append("%s must be auto, true or false, got %r" % (var("sync_bn"), s.get("sync_bn")))
    elif choice == "true" and not ts.nccl_expected(s):
        found.append(
            "%s is true but the run has no GPUs or uses gloo: SyncBatchNorm needs CUDA" % var("sync_bn")
        )
    return found


def scheduling_problems(s, var):
    """Annotations, labels, node selection, tolerations, service account and priority."""
    found = []
    _check_mapping(found, s, var, "pod_annotations", qualified_name_problem, "annotation key")
    _check_mapping(found, s, var, "pod_labels", qualified_name_problem, "label key")
    if isinstance(s.get("pod_labels"), dict):
        for key, value in s["pod_labels"].items():
            if label_value_problem(str(value)):
                found.append(
                    "%s: the value %r of %s is not a valid label value" % (var("pod_labels"), value, key)
                )
    _check_mapping(found, s, var, "node_selector", qualified_name_problem, "label key")
    tolerations = s.get("tolerations")
    if not isinstance(tolerations, list) or not all(isinstance(item, dict) for item in tolerations):
        found.append(
            "%s must be a list of tolerations (mappings), got %r" % (var("tolerations"), tolerations)
        )
    for key in ("service_account", "priority_class"):
        value = s.get(key)
        if value and not _subdomain(value):
            found.append("%s must be a DNS-1123 name or empty, got %r" % (var(key), value))
    return found


# Run:ai renders a command, not a pod spec.
POD_SPEC_LAUNCHERS = ("pytorchjob", "indexed_job", "trainjob", "mpijob")


def placement_problems(s, var):
    """The GPU taint's toleration, node affinity and the spread across nodes."""
    existing_runtime = s.get("launcher") == "trainjob" and bool(s.get("trainjob_runtime"))
    return ps.placement_problems(s, var, POD_SPEC_LAUNCHERS, existing_runtime)


def fqdn(s, name, index):
    return "%s-%d.%s.%s.svc.%s" % (name, index, name, s.get("namespace"), s.get("cluster_domain"))


def indexed_job_problems(s, var):
    """The pods' host names, when they are their FQDNs."""
    nnodes = _int(s.get("nnodes"))
    if not (_bool(s.get("set_hostname_as_fqdn")) and nnodes and nnodes > 0):
        return []
    longest = fqdn(s, ts.workload_name(s), nnodes - 1)
    if len(longest) <= MAX_HOSTNAME:
        return []
    return [
        "%s: the pods' host name %s has %d characters, Linux allows %d: shorten %s or %s, or set %s to false"
        % (
            var("set_hostname_as_fqdn"), longest, len(longest), MAX_HOSTNAME,
            var("namespace"), var("k8s_name"), var("set_hostname_as_fqdn"),
        )
    ]  # fmt: skip


def trainjob_problems(s, var):
    runtime = s.get("trainjob_runtime")
    if runtime and not _subdomain(runtime):
        return ["%s must be a runtime name or empty, got %r" % (var("trainjob_runtime"), runtime)]
    return []


def mpijob_problems(s, var):
    """The workers' command, and mpirun's when given (the builder requires it)."""
    found = []
    for key in ("mpi_worker_command", "mpirun_argv"):
        if key == "mpirun_argv" and s.get(key) is None:
            continue
        if not _command(s.get(key)):
            found.append(
                "%s must be a non-empty list of strings (a command), got %r" % (var(key), s.get(key))
            )
    return found


_POD = ts.WORKLOAD_LAUNCHERS
# (the launchers a concern applies to, the concern), in the order of the messages.
CONCERNS = (
    (ts.LAUNCHERS, run_problems),
    (ts.TRAINER_LAUNCHERS, gate_problems),
    (ts.TRAINER_LAUNCHERS, trainer_problems),
    (_POD, identity_problems),
    (_POD, resource_problems),
    (_POD, fabric_problems),
    (ts.LAUNCHERS, secret_env_problems),
    (_POD, security_problems),
    (_POD, storage_problems),
    (_POD, elastic_problems),
    (_POD, scheduling_problems),
    (_POD, placement_problems),
    (_POD, ps.gang_problems),
    (("indexed_job",), indexed_job_problems),
    (("trainjob",), trainjob_problems),
    (("mpijob",), mpijob_problems),
)

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The pod every Kubernetes launcher runs, from the settings of one run, here and nowhere else:

- Guaranteed QoS: requests equal limits for cpu, memory, the GPUs and the RDMA devices;
- ``/dev/shm`` as a memory-backed ``emptyDir`` sized by :func:`training_settings.shm_size`
  from the DataLoader workers, the batch size and the ranks in the pod;
- ``IPC_LOCK`` as the only capability (all others dropped), never privileged, no privilege
  escalation, no host network, the ``RuntimeDefault`` seccomp profile, ``runAsUser``/``runAsGroup``
  when given;
- the Multus network annotation and the RDMA device requests of the fabric;
- NCCL variables from a fabric profile (``ib``, ``roce``, ``socket``), explicit timeouts;
  variables from Secrets as ``secretKeyRef`` references, so that no value is in the pod spec;
- checkpoints on a PVC and the dataset on another, read-only;
- labels with the run id, which is also how the launcher finds the run's pods;
- where the pods may run (:mod:`pod_scheduling`): the GPU taint's toleration, node affinity,
  the spread of the rank pods across nodes.
- image pull Secrets by name, for a private registry.

A setting of the pod (a volume, a field of the security context) is added here, once, for
every kind in :mod:`training_workload`.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils import pod_scheduling as ps
from ansible_collections.gpuops.training.plugins.module_utils import training_settings as ts
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RUN_ID_LABEL = "gpuops.training/run-id"
LAUNCHER_LABEL = "gpuops.training/launcher"
NAME_LABEL = "app.kubernetes.io/name"
# Container names the operators require: the Training Operator looks for "pytorch" (and its
# port "pytorchjob-port"), Trainer v2's torch plugin for "node".
CONTAINER_NAMES = {
    "pytorchjob": "pytorch",
    "indexed_job": "trainer",
    "trainjob": "node",
    "runai": "trainer",
    "mpijob": "mpi-worker",
}
# The server-side deadline is a backstop a minute after the launcher's own deadline, which
# reads the logs and stops the workload first.
DEADLINE_GRACE_S = 60


def labels(settings):
    """Labels of every object and pod of the run."""
    result = {str(key): str(value) for key, value in (settings.get("pod_labels") or {}).items()}
    result.update(
        {
            NAME_LABEL: "gpuops-nccl-tests" if settings.get("launcher") == "mpijob" else "gpuops-trainer",
            RUN_ID_LABEL: ts.run_label(settings),
            LAUNCHER_LABEL: str(settings.get("launcher")),
        }
    )
    return result


def pod_selector(settings):
    """The label selector that finds the run's pods, whoever created them."""
    return "%s=%s" % (RUN_ID_LABEL, ts.run_label(settings))


def metadata(settings, name=None):
    return {
        "name": name or ts.workload_name(settings),
        "namespace": settings.get("namespace"),
        "labels": labels(settings),
    }


def deadline(settings):
    return _int(settings.get("timeout_s")) + DEADLINE_GRACE_S


# --------------------------------------------------------------------------------------
# the environment
# --------------------------------------------------------------------------------------


def fabric_env(settings):
    """NCCL's network settings for the fabric profile, as (name, value) pairs."""
    fabric = settings.get("fabric")
    ifname = settings.get("nccl_socket_ifname") or ("net1" if ts.networks(settings) else "eth0")
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
    """Every variable of the trainer container, in order; env wins on a clash."""
    pairs = fabric_env(settings)
    pairs += [
        ("NCCL_DEBUG", str(settings.get("nccl_debug"))),
        ("NCCL_DEBUG_SUBSYS", str(settings.get("nccl_debug_subsys") or "")),
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
    # An empty NCCL_DEBUG_SUBSYS leaves NCCL's default.
    pairs = [(key, value) for key, value in pairs if not (key == "NCCL_DEBUG_SUBSYS" and not value)]
    return [(key, value) for key, value in pairs if key not in overridden] + extra


def secret_env(settings):
    """The variables read from Secrets, as EnvVar references: the kubelet resolves them, so no
    value is in the pod spec, the rendered manifests or Ansible's output."""
    return [
        {"name": str(name), "valueFrom": {"secretKeyRef": {"name": ref["secret"], "key": ref["key"]}}}
        for name, ref in (settings.get("env_from_secrets") or {}).items()
    ]


# The Kubernetes node the pod runs on, from the downward API: the trainer records it on every
# rank, so the verdict names each rank's node (its host name is the pod's).
NODE_NAME_ENV = {"name": "GPUOPS_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


# The pod's root filesystem is read-only: home and caches (torch, triton, pip) live in /tmp.
WRITABLE_HOME_ENV = (("HOME", "/tmp"), ("XDG_CACHE_HOME", "/tmp/.cache"))


def container_env(settings):
    pairs = env_pairs(settings)
    named = {key for key, _value in pairs} | set(settings.get("env_from_secrets") or {})
    pairs = [(key, value) for key, value in WRITABLE_HOME_ENV if key not in named] + pairs
    return (
        [{"name": key, "value": value} for key, value in pairs] + secret_env(settings) + [dict(NODE_NAME_ENV)]
    )


# --------------------------------------------------------------------------------------
# resources, volumes, security
# --------------------------------------------------------------------------------------


def resources(settings):
    """requests == limits for cpu, memory, the GPUs and the RDMA devices (Guaranteed QoS)."""
    amounts = {"cpu": str(settings.get("cpu")), "memory": str(settings.get("memory"))}
    gpus = _int(settings.get("gpus_per_node")) or 0
    if gpus > 0:
        amounts[str(settings.get("gpu_resource"))] = str(gpus)
    if ts.uses_rdma(settings):
        amounts[str(settings["rdma_resource"])] = str(_int(settings.get("rdma_per_node")))
    return {"requests": dict(amounts), "limits": dict(amounts)}


# Everything a rank writes outside its volumes (torchrun's rendezvous files, caches, temporary
# files) goes here: the container's root filesystem is read-only.
TMP_MOUNT = "/tmp"


def volumes(settings):
    result = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ts.shm_size(settings)}},
        {"name": "tmp", "emptyDir": {}},
    ]
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
    return result + [dict(volume) for volume in settings.get("volumes") or []]


def volume_mounts(settings):
    result = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": TMP_MOUNT},
        {"name": "checkpoints", "mountPath": settings.get("checkpoint_mount")},
    ]
    if settings.get("dataset_pvc"):
        result.append({"name": "dataset", "mountPath": settings.get("dataset_mount"), "readOnly": True})
    return result + [dict(mount) for mount in settings.get("volume_mounts") or []]


def container_security_context():
    """IPC_LOCK (RDMA memory registration) and nothing else: every other capability the
    runtime grants by default is dropped; never privileged; a read-only root filesystem (what
    a rank writes goes to its volumes and /tmp)."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    }


def optional_id(value):
    """runAsUser/runAsGroup: None or '' for unset, else an int."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _int(value)


def pod_security_context(settings):
    context = {}
    if settings.get("seccomp_profile"):
        context["seccompProfile"] = {"type": settings["seccomp_profile"]}
    user = optional_id(settings.get("run_as_user"))
    group = optional_id(settings.get("run_as_group"))
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
    if ts.networks(settings):
        annotations[NETWORKS_ANNOTATION] = ",".join(ts.networks(settings))
    return annotations


# --------------------------------------------------------------------------------------
# the container and the pod
# --------------------------------------------------------------------------------------


def container(settings, command, name=None):
    return {
        "name": name or CONTAINER_NAMES.get(settings.get("launcher"), "trainer"),
        "image": settings.get("image"),
        "imagePullPolicy": settings.get("image_pull_policy"),
        "command": command,
        "env": container_env(settings),
        "resources": resources(settings),
        "securityContext": container_security_context(),
        "volumeMounts": volume_mounts(settings),
        "ports": [{"name": "rdzv", "containerPort": _int(settings.get("rdzv_port")), "protocol": "TCP"}],
    }


def pod_template(settings, command, container_name=None, ranks=True):
    """The pod every launcher runs: Guaranteed QoS, /dev/shm, IPC_LOCK only, the network.

    ``ranks`` is False for a pod that runs no rank (an MPIJob's launcher): it is not spread
    with the ranks' pods, nor counted by their spread constraints."""
    spec = {
        "restartPolicy": "OnFailure",
        "containers": [container(settings, command, container_name)],
        "volumes": volumes(settings),
        # Thousands of services in a namespace would otherwise become environment variables.
        "enableServiceLinks": False,
    }
    if ranks:
        # The ranks never call the API: no token in their pods. (An MPIJob's launcher runs
        # mpirun through kubectl exec, and keeps its ServiceAccount's token.)
        spec["automountServiceAccountToken"] = False
    security = pod_security_context(settings)
    if security:
        spec["securityContext"] = security
    if settings.get("service_account"):
        spec["serviceAccountName"] = settings["service_account"]
    if settings.get("image_pull_secrets"):
        # References to Secrets in the namespace: their contents never enter the pod spec.
        spec["imagePullSecrets"] = [{"name": str(name)} for name in settings["image_pull_secrets"]]
    if settings.get("priority_class"):
        spec["priorityClassName"] = settings["priority_class"]
    if settings.get("node_selector"):
        spec["nodeSelector"] = {str(k): str(v) for k, v in settings["node_selector"].items()}
    tolerations = ps.tolerations(settings)
    if tolerations:
        spec["tolerations"] = tolerations
    affinity = ps.affinity(settings)
    if affinity:
        spec["affinity"] = affinity
    pod_labels = labels(settings)
    if ranks:
        pod_labels[ps.COMPONENT_LABEL] = ps.RANKS_COMPONENT
        spread = ps.topology_spread_constraints(
            settings, _int(settings.get("nnodes")), ps.rank_selector(ts.run_label(settings), RUN_ID_LABEL)
        )
        if spread:
            spec["topologySpreadConstraints"] = spread
    pod_metadata = {"labels": pod_labels}
    annotations = pod_annotations(settings)
    if annotations:
        pod_metadata["annotations"] = annotations
    return {"metadata": pod_metadata, "spec": spec}

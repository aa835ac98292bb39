# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One training run as Kubernetes workloads, and as a Run:ai command, from one set of settings.

Each kind wraps the pod of :mod:`training_pod` (the same for every kind) around the torchrun
command of :mod:`torchrun`, and returns its objects and that command:
:func:`indexed_job` (a headless Service and a batch/v1 Job with ``completionMode: Indexed``),
:func:`pytorchjob` (Kubeflow PyTorchJob), :func:`trainjob` (Kubeflow Trainer v2 TrainJob, with
the TrainingRuntime it references) and, for nccl-tests rather than the trainer, :func:`mpijob`
(Kubeflow MPIJob: the same pod as workers, a small launcher running ``mpirun``);
:func:`runai` returns ``runai training pytorch submit`` and its command instead of objects.
:func:`workload` is what the training_workload filter returns: the objects with everything a
launcher needs to wait for them and verify the run.

A run given a Kueue LocalQueue (``kueue_local_queue``) has its workload labelled with it and
created suspended: Kueue starts it once the whole job's quota is admitted. Every builder
checks the settings first (:mod:`training_checks`) and raises SettingsError
with every problem, each naming the caller's variable (the prefix the caller passes). Pure
functions: the filter plugin calls them, the unit tests exercise them directly.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils import pod_scheduling as ps
from ansible_collections.gpuops.training.plugins.module_utils import training_settings as ts
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_bool as _bool
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int
from ansible_collections.gpuops.training.plugins.module_utils.torchrun import torchrun_argv, trainer_args
from ansible_collections.gpuops.training.plugins.module_utils.training_checks import checked
from ansible_collections.gpuops.training.plugins.module_utils.training_pod import (
    CONTAINER_NAMES,
    NAME_LABEL,
    NETWORKS_ANNOTATION,
    RUN_ID_LABEL,
    deadline,
    env_pairs,
    labels,
    metadata,
    optional_id,
    pod_annotations,
    pod_selector,
    pod_template,
)

# ExitCode (indexed_job): a permanent exit code (1-127: the trainer's configuration, data,
# non-finite and storage errors, which gpuops_trainer.launch reports as its own) fails the Job
# at once; a signal or an OOM kill (128 and above) replaces the pod.
PERMANENT_EXIT_CODES = list(range(1, 128))
TRAINER_API = "trainer.kubeflow.org"
RUNAI_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
PYTORCHJOB_PORT_NAME = "pytorchjob-port"
# The MPIJob's launcher only runs mpirun: a small Guaranteed pod without GPUs.
MPI_LAUNCHER_RESOURCES = {"cpu": "1", "memory": "1Gi"}
# The dataset layout check before a launch: one small Guaranteed pod that parses the trainer's
# arguments (the trainer's options import torch) and looks for the paths they name.
LAYOUT_CHECK_MODULE = "gpuops_trainer.layout"
LAYOUT_CHECK_RESOURCES = {"cpu": "500m", "memory": "1Gi"}
LAYOUT_CHECK_LAUNCHERS = ("pytorchjob", "indexed_job", "trainjob")


def _checked(settings, prefix):
    return checked(settings, prefix, ts.WORKLOAD_LAUNCHERS, "the training_workload filter's workloads")


def indexed_job(settings, prefix=ts.PREFIX):
    """A headless Service and an Indexed Job: pod i is host <job>-i.<service>; the c10d
    rendezvous runs on index 0, as in the seed recipe."""
    s = _checked(settings, prefix)
    name = ts.workload_name(s)
    nnodes = _int(s["nnodes"])
    port = _int(s["rdzv_port"])
    command = torchrun_argv(s, "%s-0.%s:%d" % (name, name, port))
    template = pod_template(s, command, CONTAINER_NAMES["indexed_job"])
    template["spec"]["subdomain"] = name
    if _bool(s.get("set_hostname_as_fqdn")):
        template["spec"]["setHostnameAsFQDN"] = True
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(s),
        "spec": {
            "clusterIP": "None",
            # Pods resolve each other while starting, before they are Ready.
            "publishNotReadyAddresses": True,
            "selector": {RUN_ID_LABEL: ts.run_label(s)},
            "ports": [{"name": "rdzv", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(s),
        "spec": {
            "completionMode": "Indexed",
            "completions": nnodes,
            "parallelism": nnodes,
            "backoffLimit": _int(s["backoff_limit"]),
            "activeDeadlineSeconds": deadline(s),
            "template": template,
        },
    }
    if ps.queue_for_kueue(job, s):
        job["spec"]["suspend"] = True
    if s["indexed_job_restart_policy"] == "ExitCode":
        # A podFailurePolicy needs restartPolicy Never: a permanent exit code fails the Job at
        # once, any other failure replaces the pod until backoffLimit, and an eviction or
        # preemption is not counted at all.
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
    return [service, job], command


def pytorchjob(settings, prefix=ts.PREFIX):
    """A Kubeflow PyTorchJob of nnodes Workers with c10d rendezvous on worker 0 (between the
    minimum and maximum with an elastic policy), or with pytorchjob_master a Master and
    nnodes-1 Workers with the rendezvous on the master.

    The Training Operator adds an init container to every Worker of a job with a Master:
    upstream's template (requests below limits) makes those Workers Burstable, the
    training_operator role's keeps them Guaranteed. Workers only need no init container. Its
    restartPolicy ExitCode restarts a pod only for a retryable exit code (128
    and above) and fails the job on a permanent one (1-127).
    """
    s = _checked(settings, prefix)
    name = ts.workload_name(s)
    port = _int(s["rdzv_port"])
    nnodes = _int(s["nnodes"])
    run_policy = {
        "activeDeadlineSeconds": deadline(s),
        # The launcher reads every pod's log after the end: keep the pods.
        "cleanPodPolicy": "None",
    }
    # With Never nothing restarts, and a failed replica alone fails the job, its pods kept. A
    # job that reaches its backoffLimit has every pod deleted whatever cleanPodPolicy says
    # (Training Operator v1), and their logs with them.
    if s["pytorchjob_restart_policy"] != "Never":
        run_policy["backoffLimit"] = _int(s["backoff_limit"])
    spec = {
        "nprocPerNode": str(_int(s["nproc_per_node"])),
        "runPolicy": run_policy,
        "pytorchReplicaSpecs": {},
    }
    if ts.elastic(s):
        minimum, maximum = _int(s["elastic_min_nodes"]), _int(s["elastic_max_nodes"])
        command = torchrun_argv(s, "%s-worker-0:%d" % (name, port))
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
        # Workers only: no init container (with a Master the operator adds one to every Worker,
        # Guaranteed only with the training_operator role's template).
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
    # A gang of every pod (of the minimum for an elastic run) is placed at once or not at all.
    gang = ps.scheduling_policy(s, _int(s["elastic_min_nodes"]) if ts.elastic(s) else nnodes)
    if gang:
        run_policy["schedulingPolicy"] = gang
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": metadata(s), "spec": spec}
    if ps.queue_for_kueue(job, s):
        run_policy["suspend"] = True
    return [job], command


def trainjob(settings, prefix=ts.PREFIX):
    """A Kubeflow Trainer v2 TrainJob.

    Without trainjob_runtime, a namespaced TrainingRuntime of the same name carries the whole
    pod (the TrainJob API cannot set a security context or resources limits apart from
    requests), and the TrainJob references it. With it, the TrainJob references that runtime
    and overrides what the API lets it: image, command, environment, resources per node,
    volumes and mounts, labels and annotations, node selection; the runtime must then grant
    IPC_LOCK and the user ids itself.
    """
    s = _checked(settings, prefix)
    name = ts.workload_name(s)
    nnodes = _int(s["nnodes"])
    port = _int(s["rdzv_port"])
    # Trainer v2 names node pods <trainjob>-node-0-<index> in a headless service named after the TrainJob.
    command = torchrun_argv(s, "%s-node-0-0.%s:%d" % (name, name, port))
    template = pod_template(s, command, CONTAINER_NAMES["trainjob"])
    objects = []
    trainer = {"numNodes": nnodes, "numProcPerNode": _int(s["nproc_per_node"])}
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
        for key in ("nodeSelector", "affinity", "tolerations", "serviceAccountName", "imagePullSecrets"):
            if key in template["spec"]:
                override_spec[key] = template["spec"][key]
        trainjob_spec["podTemplateOverrides"] = [
            {"targetJobs": [{"name": "node"}], "metadata": template["metadata"], "spec": override_spec}
        ]
    else:
        job_template_labels = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
        job_template_labels.update(labels(s))
        replicated_job = {
            "name": "node",
            "replicas": 1,
            "template": {
                "metadata": {"labels": job_template_labels},
                "spec": {
                    "backoffLimit": _int(s["backoff_limit"]),
                    "activeDeadlineSeconds": deadline(s),
                    "template": template,
                },
            },
        }
        objects.append(
            {
                "apiVersion": "%s/v1alpha1" % TRAINER_API,
                "kind": "TrainingRuntime",
                "metadata": metadata(s),
                "spec": {
                    "mlPolicy": {"numNodes": nnodes, "torch": {"numProcPerNode": _int(s["nproc_per_node"])}},
                    "template": {
                        "metadata": {"labels": labels(s)},
                        "spec": {"replicatedJobs": [replicated_job]},
                    },
                },
            }
        )
        trainjob_spec["runtimeRef"] = {"name": name, "apiGroup": TRAINER_API, "kind": "TrainingRuntime"}
    train_job = {
        "apiVersion": "%s/v1alpha1" % TRAINER_API,
        "kind": "TrainJob",
        "metadata": metadata(s),
        "spec": trainjob_spec,
    }
    if ps.queue_for_kueue(train_job, s):
        trainjob_spec["suspend"] = True
    objects.append(train_job)
    return objects, command


def mpijob(settings, prefix=ts.PREFIX):
    """A Kubeflow MPIJob (kubeflow.org/v1, the Training Operator's) for nccl-tests: one launcher
    running ``mpirun_argv`` over nnodes workers with ``nproc_per_node`` slots each.

    The workers get the pod every launcher renders (Guaranteed QoS, /dev/shm, IPC_LOCK only,
    the network, RDMA and the fabric's NCCL variables) and wait (``mpi_worker_command``); the
    operator's hostfile and ``kubectl exec`` agent let mpirun start the ranks in them, in the
    container ``mainContainer`` names. The launcher is a small Guaranteed pod without GPUs,
    with the same NCCL variables (mpirun passes them on with -x), and the service account the
    operator creates for it (the right to exec into the workers). Nothing restarts: a
    benchmark run again in place would replace the log that is read afterwards, and a failed
    launcher's pod (and log) stays until the MPIJob is deleted. The command is mpirun's.
    """
    s = _checked(settings, prefix)
    command = list(s["mpirun_argv"])
    worker_name = CONTAINER_NAMES["mpijob"]
    worker = pod_template(s, list(s["mpi_worker_command"]), worker_name)
    # The launcher runs no rank: the workers' spread constraints neither place nor count it.
    launcher = pod_template(s, command, "mpi-launcher", ranks=False)
    launcher_container = launcher["spec"]["containers"][0]
    launcher_container["resources"] = {
        "requests": dict(MPI_LAUNCHER_RESOURCES),
        "limits": dict(MPI_LAUNCHER_RESOURCES),
    }
    launcher_container.pop("ports", None)
    # mpirun registers no RDMA memory: the launcher adds no capability, so that OpenShift's
    # restricted-v2 admits it under the operator's service account (the trainer's SCC is not
    # granted to that account).
    launcher_container["securityContext"]["capabilities"] = {"drop": ["ALL"]}
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
            "activeDeadlineSeconds": deadline(s),
            # The launcher's log is read after the end: keep the pods.
            "cleanPodPolicy": "None",
        },
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
            "Worker": {"replicas": _int(s["nnodes"]), "restartPolicy": "Never", "template": worker},
        },
    }
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": metadata(s), "spec": spec}
    return [job], command


def runai(settings, prefix=ts.PREFIX):
    """``runai training pytorch submit NAME ...`` from the same settings, as an argv list, and
    the command it runs (after ``--command --``).

    Run:ai creates a master pod and ``--workers`` worker pods: the run's nnodes nodes are the
    master and nnodes-1 workers. torchrun meets at the master through the MASTER_ADDR and
    MASTER_PORT variables the PyTorch operator sets, which Kubernetes expands in the command.
    """
    s = _checked(settings, prefix)
    argv = ["runai", "training", "pytorch", "submit", ts.workload_name(s)]
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
    if ts.uses_rdma(s):
        argv += ["--extended-resource", "%s=%d" % (s["rdma_resource"], _int(s["rdma_per_node"]))]
    for option, key in (("--run-as-uid", "run_as_user"), ("--run-as-gid", "run_as_group")):
        if optional_id(s.get(key)) is not None:
            argv += [option, str(optional_id(s.get(key)))]
    for key, value in env_pairs(s):
        argv += ["--environment-variable", "%s=%s" % (key, value)]
    if s.get("checkpoint_pvc"):
        argv += ["--existing-pvc", "claimname=%s,path=%s" % (s["checkpoint_pvc"], s["checkpoint_mount"])]
    if s.get("dataset_pvc"):
        argv += ["--existing-pvc", "claimname=%s,path=%s" % (s["dataset_pvc"], s["dataset_mount"])]
    command = torchrun_argv(s, "$(MASTER_ADDR):$(MASTER_PORT)")
    return argv + ["--command", "--"] + command, command


# launcher: (the kind to wait for, its apiVersion, the builder).
KINDS = {
    "mpijob": ("MPIJob", "kubeflow.org/v1", mpijob),
    "indexed_job": ("Job", "batch/v1", indexed_job),
    "pytorchjob": ("PyTorchJob", "kubeflow.org/v1", pytorchjob),
    "trainjob": ("TrainJob", "%s/v1alpha1" % TRAINER_API, trainjob),
    # Run:ai runs a PyTorch workload as a Kubeflow PyTorchJob of the workload's name.
    "runai": ("PyTorchJob", "kubeflow.org/v1", None),
}


def layout_check(settings, prefix=ts.PREFIX):
    """A batch/v1 Job that runs ``python -m gpuops_trainer.layout`` with the run's own trainer
    arguments in the run's image, with the run's volumes (the dataset PVC among them), node
    selection and security context, but none of its GPUs, networks or capabilities; None when
    the dataset is generated or the launcher is not a Kubernetes one. It exits 3 naming every
    path the trainer would miss, before any rank starts."""
    s = _checked(settings, prefix)
    if s["dataset"] not in ts.FILE_DATASETS or s["launcher"] not in LAYOUT_CHECK_LAUNCHERS:
        return None
    command = [s["container_python"], "-m", LAYOUT_CHECK_MODULE] + trainer_args(s, ts.output_dir(s))
    template = pod_template(s, command, "layout-check")
    spec = template["spec"]
    spec["restartPolicy"] = "Never"
    container = spec["containers"][0]
    container.pop("ports", None)
    container["env"] = []
    container["resources"] = {
        "requests": dict(LAYOUT_CHECK_RESOURCES),
        "limits": dict(LAYOUT_CHECK_RESOURCES),
    }
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    # The dataset and the caller's volumes (the image may need them); not /dev/shm or the
    # checkpoints, which another run may hold.
    own = ("dshm", "checkpoints")
    spec["volumes"] = [volume for volume in spec["volumes"] if volume["name"] not in own]
    container["volumeMounts"] = [mount for mount in container["volumeMounts"] if mount["name"] not in own]
    # Not the run's labels: the run's pods are found by them.
    name = ts.workload_name(s)[:56].rstrip("-") + "-layout"
    pod_labels = {NAME_LABEL: "gpuops-layout-check", "gpuops.training/layout-check-of": ts.run_label(s)}
    template["metadata"] = {"labels": pod_labels}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": s["namespace"], "labels": dict(pod_labels)},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 600, "template": template},
    }


def workload(settings, prefix=ts.PREFIX):
    """Everything a launcher needs: the objects in apply order, the kind and name to wait for,
    the pod selector, the expected number of pods, the transport to verify, the command and,
    for runai, the runai command."""
    s = _checked(settings, prefix)
    launcher = s["launcher"]
    kind, api_version, build = KINDS[launcher]
    result = {
        "launcher": launcher,
        "name": ts.workload_name(s),
        "namespace": s["namespace"],
        "pod_selector": pod_selector(s),
        "expected_pods": _int(s["nnodes"]) + (1 if launcher == "mpijob" else 0),
        "world_size": _int(s["nnodes"]) * _int(s["nproc_per_node"]),
        "shm_size": ts.shm_size(s),
        "env": dict(env_pairs(s)),
        "output_dir": ts.output_dir(s),
        "sync_bn": ts.sync_bn(s),
        "nccl_expected": ts.nccl_expected(s),
        "nccl_transport": ts.expected_transport(s) if ts.nccl_expected(s) else "",
        "kind": kind,
        "api_version": api_version,
        "manifests": [],
        "runai_argv": None,
        # The Kueue LocalQueue the workload waits in, or "".
        "kueue_local_queue": ps.kueue_queue(s) or "",
        "layout_check": layout_check(s, prefix),
    }
    if launcher == "runai":
        result["runai_argv"], result["command"] = runai(s, prefix)
        # The Training Operator labels the pods of Run:ai's PyTorchJob with the job name (our
        # labels do not reach them).
        result["pod_selector"] = "%s=%s" % (RUNAI_JOB_NAME_LABEL, result["name"])
    else:
        result["manifests"], result["command"] = build(s, prefix)
    return result

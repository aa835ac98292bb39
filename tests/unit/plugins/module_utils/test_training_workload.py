"""training_workload: one set of settings rendered as an Indexed Job, a PyTorchJob, a TrainJob
and a Run:ai command, with the same pod practices everywhere, and every problem named."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.training_workload import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils import training_checks as tc
from ansible_collections.gpuops.training.plugins.module_utils import training_pod as tp
from ansible_collections.gpuops.training.plugins.module_utils import training_settings as ts
from ansible_collections.gpuops.training.plugins.module_utils import training_workload as tw

RUN_ID = "retinanet-20261122T050000Z"


def settings(**overrides):
    base = {
        "launcher": "indexed_job",
        "name": "retinanet",
        "run_id": RUN_ID,
        "namespace": "training",
        "image": "registry.example/gpuops-trainer:1.0",
        "nnodes": 2,
        "nproc_per_node": 8,
        "gpus_per_node": 8,
        "cpu": "32",
        "memory": "256Gi",
        "workers": 8,
        "batch_size": 2,
        "fabric": "ib",
        "network": "rdma-net",
        "run_as_user": 2000,
        "run_as_group": 2000,
    }
    base.update(overrides)
    return base


def pod_of(built, kind):
    """The pod template of the object of ``kind`` a builder returned (objects, command)."""
    manifests, _command = built
    obj = next(item for item in manifests if item["kind"] == kind)
    if kind == "Job":
        return obj["spec"]["template"]
    if kind == "PyTorchJob":
        return next(iter(obj["spec"]["pytorchReplicaSpecs"].values()))["template"]
    if kind == "TrainingRuntime":
        return obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    raise AssertionError(kind)


def every_pod(s):
    return {
        "indexed_job": pod_of(tw.indexed_job(dict(s, launcher="indexed_job")), "Job"),
        "pytorchjob": pod_of(tw.pytorchjob(dict(s, launcher="pytorchjob")), "PyTorchJob"),
        "trainjob": pod_of(tw.trainjob(dict(s, launcher="trainjob")), "TrainingRuntime"),
    }


def env_of(pod):
    """The plain variables (those read from Secrets or the downward API have no value)."""
    return {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"] if "value" in item}


MPIRUN = ["mpirun", "-np", "16", "/opt/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "8G"]


def test_valid_settings_have_no_problems():
    for launcher in ts.WORKLOAD_LAUNCHERS:
        assert tc.problems(settings(launcher=launcher, mpirun_argv=MPIRUN)) == []


def test_an_mpijob_runs_mpirun_on_a_small_launcher_over_workers_with_the_same_pod_practices():
    s = settings(launcher="mpijob", mpirun_argv=MPIRUN)
    (job,), command = tw.mpijob(s)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "MPIJob")
    spec = job["spec"]
    assert spec["slotsPerWorker"] == 8
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    # mpirun reaches the workers with the operator's kubectl exec agent, into this container.
    assert spec["mainContainer"] == "mpi-worker"
    launcher, worker = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    assert (launcher["replicas"], worker["replicas"]) == (1, 2)
    # A benchmark is never run again in place: its log would be replaced.
    # (The operator sets the pods' restartPolicy from the replica's, and warns about a template's.)
    for replica in (launcher, worker):
        assert replica["restartPolicy"] == "Never" and "restartPolicy" not in replica["template"]["spec"]
    # The workers' pod is the one every launcher renders; they wait for mpirun's exec.
    expected = every_pod(s)["indexed_job"]["spec"]["containers"][0]
    (worker_container,) = worker["template"]["spec"]["containers"]
    assert worker_container["name"] == "mpi-worker"
    assert worker_container["command"] == ts.MPI_WORKER_COMMAND == ["sleep", "365d"]
    for key in ("resources", "securityContext", "env", "volumeMounts"):
        assert worker_container[key] == expected[key], key
    assert worker["template"]["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ts.shm_size(s)}} in worker[
        "template"
    ]["spec"]["volumes"]
    # The launcher: mpirun, no GPU, Guaranteed, the NCCL variables to pass on, no network.
    (launcher_container,) = launcher["template"]["spec"]["containers"]
    assert launcher_container["command"] == MPIRUN
    assert launcher_container["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    assert launcher_container["env"] == expected["env"]
    assert launcher_container["securityContext"]["privileged"] is False
    assert (
        "annotations" not in launcher["template"]["metadata"]
        or not launcher["template"]["metadata"]["annotations"]
    )
    result = tw.workload(s)
    assert (result["kind"], result["expected_pods"], result["command"]) == ("MPIJob", 3, MPIRUN)


def test_an_mpijob_launcher_keeps_the_operators_service_account_and_workers_take_their_command():
    s = settings(
        launcher="mpijob",
        mpirun_argv=MPIRUN,
        service_account="gpu-runner",
        mpi_worker_command=["sleep", "1d"],
    )
    replicas = tw.mpijob(s)[0][0]["spec"]["mpiReplicaSpecs"]
    # Only the operator's <job>-launcher account may exec into the workers.
    assert "serviceAccountName" not in replicas["Launcher"]["template"]["spec"]
    assert replicas["Worker"]["template"]["spec"]["serviceAccountName"] == "gpu-runner"
    assert replicas["Worker"]["template"]["spec"]["containers"][0]["command"] == ["sleep", "1d"]


@pytest.mark.parametrize("key", ["mpirun_argv", "mpi_worker_command"])
def test_an_mpijob_needs_its_commands(key):
    found = tc.problems(settings(**{"launcher": "mpijob", "mpirun_argv": MPIRUN, key: []}))
    assert found == ["training_job_%s must be a non-empty list of strings (a command), got []" % key]


def test_every_kind_renders_the_same_pod_practices():
    pods = every_pod(settings())
    for launcher, pod in pods.items():
        spec = pod["spec"]
        (container,) = spec["containers"]
        assert container["name"] == tp.CONTAINER_NAMES[launcher]
        amounts = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
        assert container["resources"] == {"requests": amounts, "limits": amounts}
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
        }
        # The ranks never call the API, and write outside their volumes only in /tmp.
        assert spec["automountServiceAccountToken"] is False
        assert {"name": "tmp", "emptyDir": {}} in spec["volumes"]
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        env = {item["name"]: item.get("value") for item in container["env"]}
        assert (env["HOME"], env["XDG_CACHE_HOME"]) == ("/tmp", "/tmp/.cache")
        assert spec["securityContext"] == {
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsUser": 2000,
            "runAsNonRoot": True,
            "runAsGroup": 2000,
            "fsGroup": 2000,
        }
        assert "hostNetwork" not in spec and "hostIPC" not in spec
        assert spec["restartPolicy"] == "OnFailure"
        # 8 ranks x (8 workers x 2 prefetched x 2 images x 3x1333x1333 float32 + 1Gi) = 13.1 GiB
        assert spec["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "14Gi"}}
        assert spec["volumes"][2] == {
            "name": "checkpoints",
            "persistentVolumeClaim": {"claimName": "checkpoints"},
        }
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert pod["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}
        assert pod["metadata"]["labels"][tp.RUN_ID_LABEL] == RUN_ID
        assert pod["metadata"]["labels"][tp.LAUNCHER_LABEL] == launcher
        command = container["command"]
        assert command[:3] == ["python3", "-m", "gpuops_trainer.launch"]
        assert "--max-restarts=0" in command and "--rdzv-backend=c10d" in command
        assert "--rdzv-conf=join_timeout=900,read_timeout=900" in command
        assert "--output-dir=/checkpoints/%s" % RUN_ID in command and "--epochs=26" in command
        assert command[-1] == "--sync-bn"
    containers = [pod["spec"]["containers"][0] for pod in pods.values()]
    assert all(c["env"] == containers[0]["env"] for c in containers)


@pytest.mark.parametrize(
    ("fabric", "expected"),
    [
        (
            "ib",
            {
                "NCCL_IB_DISABLE": "0",
                "NCCL_IB_HCA": "mlx5",
                "NCCL_NET_GDR_LEVEL": "PHB",
                "NCCL_SOCKET_IFNAME": "net1",
            },
        ),
        (
            "roce",
            {
                "NCCL_IB_DISABLE": "0",
                "NCCL_IB_HCA": "mlx5",
                "NCCL_IB_GID_INDEX": "3",
                "NCCL_NET_GDR_LEVEL": "PHB",
                "NCCL_SOCKET_IFNAME": "net1",
            },
        ),
        ("socket", {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "net1"}),
    ],
)
def test_fabric_profiles_set_nccls_variables(fabric, expected):
    env = env_of(pod_of(tw.indexed_job(settings(fabric=fabric)), "Job"))
    nccl_network = {
        key: value
        for key, value in env.items()
        if key.startswith("NCCL_") and key not in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")
    }
    assert nccl_network == expected
    assert env["GLOO_SOCKET_IFNAME"] == "net1"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "600"
    assert env["NCCL_DEBUG"] == "INFO"
    # What the verdict reads (the init, the network) and little else.
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


def test_nccl_debug_subsys_follows_its_setting_and_is_left_out_when_empty():
    assert (
        env_of(pod_of(tw.indexed_job(settings(nccl_debug_subsys="INIT")), "Job"))["NCCL_DEBUG_SUBSYS"]
        == "INIT"
    )
    assert "NCCL_DEBUG_SUBSYS" not in env_of(pod_of(tw.indexed_job(settings(nccl_debug_subsys="")), "Job"))
    # training_job_env wins, as for every variable.
    env = env_of(pod_of(tw.indexed_job(settings(env={"NCCL_DEBUG_SUBSYS": "ALL"})), "Job"))
    assert env["NCCL_DEBUG_SUBSYS"] == "ALL"


@pytest.mark.parametrize("subsys", ["INIT NET", "INIT,", ",NET", "^", 3])
def test_a_malformed_nccl_debug_subsys_is_named(subsys):
    found = tc.problems(settings(nccl_debug_subsys=subsys))
    assert any(
        problem.startswith("training_job_nccl_debug_subsys must be NCCL subsystem names") for problem in found
    )


def test_socket_fabric_requests_no_rdma_and_without_a_network_uses_eth0():
    pod = pod_of(tw.indexed_job(settings(fabric="socket", network=[])), "Job")
    assert "rdma/rdma_shared_device_a" not in pod["spec"]["containers"][0]["resources"]["limits"]
    assert "annotations" not in pod["metadata"]
    assert env_of(pod)["NCCL_SOCKET_IFNAME"] == "eth0"


def test_several_networks_and_the_users_environment_win():
    s = settings(network=["sriov/ib-a", "sriov/ib-b@net2"], env={"NCCL_IB_HCA": "=mlx5_0,mlx5_1", "EXTRA": 1})
    pod = pod_of(tw.indexed_job(s), "Job")
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "sriov/ib-a,sriov/ib-b@net2"
    env = env_of(pod)
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1" and env["EXTRA"] == "1"
    assert [item["name"] for item in pod["spec"]["containers"][0]["env"]].count("NCCL_IB_HCA") == 1


def test_variables_from_secrets_are_references_and_win_over_the_fabrics():
    secrets = {
        "HF_TOKEN": {"secret": "hub-credentials", "key": "token"},
        "NCCL_IB_HCA": {"secret": "fabric", "key": "hca.list"},
    }
    s = settings(env={"EXTRA": "1"}, env_from_secrets=secrets)
    for pod in every_pod(s).values():
        env = pod["spec"]["containers"][0]["env"]
        by_name = {item["name"]: item for item in env}
        assert [item["name"] for item in env].count("NCCL_IB_HCA") == 1
        assert by_name["HF_TOKEN"] == {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hub-credentials", "key": "token"}},
        }
        assert by_name["NCCL_IB_HCA"]["valueFrom"]["secretKeyRef"] == {"name": "fabric", "key": "hca.list"}
        assert "value" not in by_name["HF_TOKEN"] and by_name["EXTRA"]["value"] == "1"
    (_service, job), _command = tw.indexed_job(s)
    assert "hub-credentials" in str(job) and "token" in str(job)
    workload = tw.workload(dict(s, launcher="pytorchjob"))
    assert "HF_TOKEN" not in workload["env"] and "NCCL_IB_HCA" not in workload["env"]


def test_nccl_tests_mpijobs_are_labelled_as_such():
    (mpijob,), _command = tw.mpijob(settings(launcher="mpijob", mpirun_argv=MPIRUN))
    assert mpijob["metadata"]["labels"][tp.NAME_LABEL] == "gpuops-nccl-tests"
    assert pod_of(tw.indexed_job(settings()), "Job")["metadata"]["labels"][tp.NAME_LABEL] == "gpuops-trainer"


def test_the_indexed_job_rendezvous_on_index_0_through_its_headless_service():
    (service, job), command = tw.indexed_job(settings())
    name = ts.workload_name(settings())
    assert name == job["metadata"]["name"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {tp.RUN_ID_LABEL: RUN_ID}
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    assert spec["backoffLimit"] == 3 and spec["activeDeadlineSeconds"] == 259200 + 60
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == name and pod["setHostnameAsFQDN"] is True
    assert "--rdzv-endpoint=%s-0.%s:29400" % (name, name) in pod["containers"][0]["command"]
    assert "--nnodes=2" in pod["containers"][0]["command"]


@pytest.mark.parametrize("policy", ["ExitCode", "Never"])
def test_pytorchjob_restart_policy_reaches_every_replica(policy):
    (job,), command = tw.pytorchjob(
        settings(launcher="pytorchjob", pytorchjob_master=True, pytorchjob_restart_policy=policy)
    )
    assert {replica["restartPolicy"] for replica in job["spec"]["pytorchReplicaSpecs"].values()} == {policy}


@pytest.mark.parametrize(("policy", "backoff_limit"), [("OnFailure", 3), ("ExitCode", 3), ("Never", None)])
def test_a_pytorchjob_that_restarts_nothing_has_no_backoff_limit_so_its_pods_and_logs_are_kept(
    policy, backoff_limit
):
    # Training Operator v1 deletes every pod of a job that reaches its backoffLimit, whatever
    # cleanPodPolicy says; with Never the failed replica alone fails the job and the pods stay.
    (job,), _command = tw.pytorchjob(settings(launcher="pytorchjob", pytorchjob_restart_policy=policy))
    run_policy = job["spec"]["runPolicy"]
    assert run_policy.get("backoffLimit") == backoff_limit and run_policy["cleanPodPolicy"] == "None"


def test_the_indexed_job_exit_code_policy_fails_at_once_on_a_permanent_error_only():
    (_service, job), _command = tw.indexed_job(settings())
    assert (
        "podFailurePolicy" not in job["spec"]
        and job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    )
    (_service, job), _command = tw.indexed_job(settings(indexed_job_restart_policy="ExitCode"))
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    fail_job, ignore = job["spec"]["podFailurePolicy"]["rules"]
    assert fail_job["action"] == "FailJob"
    assert fail_job["onExitCodes"]["containerName"] == "trainer"
    assert fail_job["onExitCodes"]["operator"] == "In"
    # The trainer's permanent codes (2-5) and every other code below 128; none of a signal's.
    assert fail_job["onExitCodes"]["values"] == list(range(1, 128))
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    # The choices are the argument spec's, whatever the launcher (as the role's own check).
    assert tc.problems(settings(indexed_job_restart_policy="Never")) == [
        "training_job_indexed_job_restart_policy must be one of OnFailure, ExitCode, got 'Never'"
    ]


def test_an_unknown_pytorchjob_restart_policy_is_named():
    assert tc.problems(settings(launcher="pytorchjob", pytorchjob_restart_policy="Always")) == [
        "training_job_pytorchjob_restart_policy must be one of OnFailure, ExitCode, Never, got 'Always'"
    ]


def test_pytorchjob_workers_only_by_default_master_on_request_and_elastic():
    (job,), command = tw.pytorchjob(settings(launcher="pytorchjob"))
    name = job["metadata"]["name"]
    assert job["spec"]["nprocPerNode"] == "8"
    assert job["spec"]["runPolicy"] == {
        "backoffLimit": 3,
        "activeDeadlineSeconds": 259200 + 60,
        "cleanPodPolicy": "None",
    }
    assert {kind: replica["replicas"] for kind, replica in job["spec"]["pytorchReplicaSpecs"].items()} == {
        "Worker": 2
    }
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "OnFailure"
    container = worker["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 29400, "protocol": "TCP"}]
    assert "--rdzv-endpoint=%s-worker-0:29400" % name in container["command"]

    (job,), command = tw.pytorchjob(settings(launcher="pytorchjob", pytorchjob_master=True, nnodes=3))
    assert {kind: replica["replicas"] for kind, replica in job["spec"]["pytorchReplicaSpecs"].items()} == {
        "Master": 1,
        "Worker": 2,
    }
    assert (
        "--rdzv-endpoint=%s-master-0:29400" % name
        in pod_of(([job], command), "PyTorchJob")["spec"]["containers"][0]["command"]
    )

    (job,), command = tw.pytorchjob(
        settings(launcher="pytorchjob", elastic_min_nodes=1, elastic_max_nodes=4, max_restarts=5)
    )
    assert job["spec"]["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "rdzvPort": 29400,
        "minReplicas": 1,
        "maxReplicas": 4,
        "maxRestarts": 5,
        "rdzvConf": [{"key": "join_timeout", "value": "900"}, {"key": "read_timeout", "value": "900"}],
    }
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert "--nnodes=1:4" in command and "--max-restarts=5" in command


def test_trainjob_creates_its_runtime_or_overrides_an_existing_one():
    (runtime, trainjob), command = tw.trainjob(settings(launcher="trainjob"))
    name = ts.workload_name(settings())
    assert runtime["kind"] == "TrainingRuntime" and runtime["metadata"]["name"] == name
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "torch": {"numProcPerNode": 8}}
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"
    assert (
        replicated["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"]
        == "trainer"
    )
    assert replicated["template"]["spec"]["backoffLimit"] == 3
    command = replicated["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--rdzv-endpoint=%s-node-0-0.%s:29400" % (name, name) in command
    assert trainjob["spec"]["runtimeRef"] == {
        "name": name,
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }
    assert trainjob["spec"]["trainer"] == {"numNodes": 2, "numProcPerNode": 8}

    (trainjob,), command = tw.trainjob(settings(launcher="trainjob", trainjob_runtime="torch-distributed"))
    assert trainjob["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    trainer = trainjob["spec"]["trainer"]
    assert trainer["image"] == "registry.example/gpuops-trainer:1.0"
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    assert not any(item["name"].startswith("PET_") for item in trainer["env"])  # reserved by the torch plugin
    (override,) = trainjob["spec"]["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]
    assert override["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}
    assert override["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert override["spec"]["containers"][0]["name"] == "node"


def test_runai_argv_from_the_same_settings():
    s = settings(launcher="runai", runai_project="vision", dataset_pvc="coco", nccl_debug="WARN")
    name = ts.workload_name(s)
    argv, command = tw.runai(s)
    separator = argv.index("--")
    assert argv[:separator] == [
        "runai", "training", "pytorch", "submit", name,
        "--project", "vision",
        "--image", "registry.example/gpuops-trainer:1.0",
        "--workers", "1",
        "--gpu-devices-request", "8",
        "--cpu-core-request", "32", "--cpu-core-limit", "32",
        "--cpu-memory-request", "256Gi", "--cpu-memory-limit", "256Gi",
        "--large-shm",
        "--annotation", "k8s.v1.cni.cncf.io/networks=rdma-net",
        "--extended-resource", "rdma/rdma_shared_device_a=1",
        "--run-as-uid", "2000", "--run-as-gid", "2000",
        "--environment-variable", "NCCL_IB_DISABLE=0",
        "--environment-variable", "NCCL_IB_HCA=mlx5",
        "--environment-variable", "NCCL_NET_GDR_LEVEL=PHB",
        "--environment-variable", "NCCL_SOCKET_IFNAME=net1",
        "--environment-variable", "GLOO_SOCKET_IFNAME=net1",
        "--environment-variable", "NCCL_DEBUG=WARN",
        "--environment-variable", "NCCL_DEBUG_SUBSYS=INIT,NET",
        "--environment-variable", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
        "--environment-variable", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=600",
        "--environment-variable", "PYTHONUNBUFFERED=1",
        "--environment-variable", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
        "--existing-pvc", "claimname=checkpoints,path=/checkpoints",
        "--existing-pvc", "claimname=coco,path=/data",
        "--command",
    ]  # fmt: skip
    assert argv[separator + 1 :] == [
        "python3", "-m", "gpuops_trainer.launch",
        "--nnodes=2", "--nproc-per-node=8", "--max-restarts=0",
        "--rdzv-backend=c10d", "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
        "--rdzv-id=%s" % RUN_ID, "--rdzv-conf=join_timeout=900,read_timeout=900",
        "-m", "gpuops_trainer.train",
        "--output-dir=/checkpoints/%s" % RUN_ID, "--model=retinanet_resnet50_fpn", "--dataset=synthetic",
        "--synthetic-images=64", "--synthetic-classes=3", "--image-size=512", "--min-size=800",
        "--max-size=1333", "--epochs=26", "--batch-size=2", "--lr=0.01", "--warmup-iters=100",
        "--workers=8", "--dist-backend=auto", "--dist-timeout-s=1800", "--print-freq=10", "--sync-bn",
    ]  # fmt: skip
    assert tw.workload(s)["command"] == command == argv[separator + 1 :]
    result = tw.workload(s)
    assert result["runai_argv"] == argv and result["manifests"] == []
    assert result["pod_selector"] == "training.kubeflow.org/job-name=%s" % name


def test_sync_bn_only_across_nodes_with_gpus():
    assert ts.sync_bn(settings(nnodes=2))
    assert not ts.sync_bn(settings(nnodes=1))
    assert not ts.sync_bn(settings(nnodes=2, gpus_per_node=0, nproc_per_node=2))
    assert not ts.sync_bn(settings(nnodes=2, backend="gloo"))
    assert ts.sync_bn(settings(launcher="pytorchjob", nnodes=1, elastic_min_nodes=1, elastic_max_nodes=2))
    assert not ts.sync_bn(settings(nnodes=2, sync_bn="false"))
    assert "--sync-bn" not in tw.workload(settings(nnodes=1))["command"]
    assert "--sync-bn" in tw.workload(settings(nnodes=2))["command"]


def test_cpu_runs_request_no_gpus_and_promise_no_transport():
    s = settings(gpus_per_node=0, nproc_per_node=2, fabric="socket", network=[], backend="gloo")
    pod = pod_of(tw.indexed_job(s), "Job")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "32", "memory": "256Gi"}
    result = tw.workload(s)
    assert result["nccl_expected"] is False and result["nccl_transport"] == ""
    assert tw.workload(settings())["nccl_transport"] == "IB"
    assert tw.workload(settings(fabric="roce"))["nccl_transport"] == "IB"
    assert tw.workload(settings(fabric="socket"))["nccl_transport"] == "Socket"


def test_shm_size_given_or_sized():
    assert ts.shm_size(settings(shm_size="64Gi")) == "64Gi"
    assert ts.shm_size(settings(nproc_per_node=1, gpus_per_node=1, workers=0)) == "1Gi"
    assert ts.shm_size(settings(nproc_per_node=1, gpus_per_node=1, workers=2, max_size=96)) == "2Gi"
    # 2 ranks x (4 workers x 2 prefetched x 2 samples x 100Mi + 1Gi) = 5.1 GiB
    assert (
        ts.shm_size(settings(shm_sample_bytes="100Mi", nproc_per_node=2, gpus_per_node=2, workers=4)) == "6Gi"
    )


def test_no_user_ids_and_no_pvc():
    pod = pod_of(tw.indexed_job(settings(run_as_user="", run_as_group=None, checkpoint_pvc="")), "Job")
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["spec"]["volumes"][2] == {"name": "checkpoints", "emptyDir": {}}
    pod = pod_of(
        tw.indexed_job(settings(run_as_user=0, run_as_group="", seccomp_profile="Unconfined")), "Job"
    )
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "Unconfined"}, "runAsUser": 0}
    pod = pod_of(tw.indexed_job(settings(run_as_user="", run_as_group="", seccomp_profile="")), "Job")
    assert "securityContext" not in pod["spec"]


def test_the_name_is_short_stable_and_dns_safe():
    assert ts.workload_name(settings()) == ts.workload_name(settings())
    assert ts.workload_name(settings()) != ts.workload_name(settings(run_id=RUN_ID + "x"))
    name = ts.workload_name(settings(name="9 Very_Long Training Job Name With Spaces"))
    assert name.startswith("r9-very-long-trainin") and len(name) <= 27
    assert ts.workload_name(settings(k8s_name="mine")) == "mine"
    assert ts.run_label(settings(run_id="a b/c!")) == "a-b-c"


def test_the_builders_refuse_bad_settings_with_every_problem():
    with pytest.raises(tc.SettingsError) as error:
        tw.indexed_job(settings(image="", nnodes=0))
    assert "training_job_image is required" in str(error.value) and "training_job_nnodes" in str(error.value)


@pytest.mark.parametrize("value", [-1, "-5", "10m", "1.5", True, None, [600]])
@pytest.mark.parametrize(
    ("prefix", "launcher"), [("training_job_", "indexed_job"), ("nccl_tests_", "mpijob")]
)
def test_a_stuck_time_that_is_not_seconds_is_refused_naming_the_callers_variable(value, prefix, launcher):
    found = tc.problems(settings(launcher=launcher, mpirun_argv=MPIRUN, stuck_timeout=value), prefix)
    assert "%sstuck_timeout must be an integer of at least 0, got %r" % (prefix, value) in found, found


@pytest.mark.parametrize("value", [0, 15, "600"])
def test_a_stuck_time_of_seconds_or_0_is_accepted(value):
    assert tc.problems(settings(stuck_timeout=value)) == []


def test_the_filter_plugin_is_thin():
    filters = FilterModule().filters()
    assert filters["training_workload_problems"](settings(image="")) == tc.problems(settings(image=""))
    result = filters["training_workload"](settings(launcher="pytorchjob"))
    assert result["kind"] == "PyTorchJob" and result["api_version"] == "kubeflow.org/v1"
    assert result["expected_pods"] == 2 and result["world_size"] == 16
    assert result["pod_selector"] == "gpuops.training/run-id=%s" % RUN_ID
    assert result["output_dir"] == "/checkpoints/%s" % RUN_ID
    assert result["command"][:3] == ["python3", "-m", "gpuops_trainer.launch"]
    with pytest.raises(AnsibleFilterError, match="training_job_image is required"):
        filters["training_workload"](settings(image=""))


def test_settings_are_not_changed():
    s = settings(env={"A": "1"}, tolerations=[{"key": "gpu", "operator": "Exists"}])
    before = copy.deepcopy(s)
    for launcher in ts.WORKLOAD_LAUNCHERS:
        tw.workload(dict(s, launcher=launcher, mpirun_argv=MPIRUN))
    assert s == before


HOST_LIBS = {"name": "host-libs", "hostPath": {"path": "/usr/local/nvidia", "type": "Directory"}}


def test_extra_volumes_reach_every_kind_after_the_pods_own():
    mount = {"name": "host-libs", "mountPath": "/usr/local/nvidia", "readOnly": True}
    for pod in every_pod(settings(volumes=[HOST_LIBS], volume_mounts=[mount])).values():
        assert pod["spec"]["volumes"][-1] == HOST_LIBS
        assert [volume["name"] for volume in pod["spec"]["volumes"]][:3] == ["dshm", "tmp", "checkpoints"]
        assert pod["spec"]["containers"][0]["volumeMounts"][-1] == mount


def test_every_pod_tells_the_trainer_its_node_through_the_downward_api():
    for pod in every_pod(settings()).values():
        (node,) = [item for item in pod["spec"]["containers"][0]["env"] if item["name"] == "GPUOPS_NODE_NAME"]
        assert node == {"name": "GPUOPS_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def test_every_pod_names_its_image_pull_secrets_and_none_without_them():
    s = settings(image_pull_secrets=["regcred", "mirror"])
    for launcher, pod in every_pod(s).items():
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}], launcher
    for launcher, pod in every_pod(settings()).items():
        assert "imagePullSecrets" not in pod["spec"], launcher
    replicas = tw.mpijob(dict(s, launcher="mpijob", mpirun_argv=MPIRUN))[0][0]["spec"]["mpiReplicaSpecs"]
    for replica in ("Launcher", "Worker"):
        assert replicas[replica]["template"]["spec"]["imagePullSecrets"] == [
            {"name": "regcred"},
            {"name": "mirror"},
        ]
    # A TrainJob on a runtime of the cluster's gets them through its pod template override.
    (trainjob,), _command = tw.trainjob(dict(s, launcher="trainjob", trainjob_runtime="torch-distributed"))
    (override,) = trainjob["spec"]["podTemplateOverrides"]
    assert override["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    # nccl_tests' MPIJobs: the message names that role's variable.
    bad = settings(launcher="mpijob", mpirun_argv=MPIRUN, image_pull_secrets=["Bad_Name"])
    (problem,) = tc.problems(bad, "nccl_tests_")
    assert problem.startswith("nccl_tests_image_pull_secrets[0] is not a Secret name"), problem


def test_the_mpijob_launcher_adds_no_capability_and_workers_keep_ipc_lock():
    replicas = tw.mpijob(settings(launcher="mpijob", mpirun_argv=MPIRUN))[0][0]["spec"]["mpiReplicaSpecs"]
    launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]["securityContext"]
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]["securityContext"]
    assert launcher["capabilities"] == {"drop": ["ALL"]}
    assert worker["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}


# --------------------------------------------------------------------------------------
# the dataset PVC's auto default and the layout check before a launch
# --------------------------------------------------------------------------------------


def test_auto_dataset_pvc_is_the_namespaces_claim_for_files_and_none_for_synthetic_data():
    namespace_default = ts.role_settings.defaults("training_namespace", "training_namespace_")
    assert ts.defaults()["dataset_pvc"] == "auto"
    coco = ts.with_defaults(settings(dataset="coco", dataset_path="/data/coco"))
    assert coco["dataset_pvc"] == namespace_default["dataset_pvc_name"] == "dataset"
    assert ts.with_defaults(settings(dataset="synthetic"))["dataset_pvc"] == ""
    assert ts.with_defaults(settings(dataset="coco", dataset_pvc=""))["dataset_pvc"] == ""
    assert ts.with_defaults(settings(dataset="coco", dataset_pvc="mine"))["dataset_pvc"] == "mine"
    pod = pod_of(tw.indexed_job(settings(dataset="openimages", dataset_path="/data/oi")), "Job")
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert "dataset" in claims


@pytest.mark.parametrize("launcher", ["pytorchjob", "indexed_job", "trainjob"])
def test_the_layout_check_runs_the_runs_trainer_arguments_in_a_small_pod_with_the_dataset(launcher):
    s = settings(
        launcher=launcher,
        dataset="coco",
        dataset_path="/data/coco",
        extra_args=["--no-eval-at-end"],
        node_selector={"pool": "gpu"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    built = tw.workload(s)
    job = built["layout_check"]
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "training"
    assert job["metadata"]["name"] == built["name"] + "-layout"
    pod = job["spec"]["template"]
    container = pod["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["python3", "-m", "gpuops_trainer.layout"]
    assert "--dataset=coco" in command and "--data-path=/data/coco" in command
    assert "--no-eval-at-end" in command
    assert container["resources"]["requests"] == container["resources"]["limits"] == tw.LAYOUT_CHECK_RESOURCES
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    volumes = {volume["name"] for volume in pod["spec"]["volumes"]}
    assert "dataset" in volumes and not volumes & {"dshm", "checkpoints"}
    assert {m["name"] for m in container["volumeMounts"]} == volumes
    # The run's pods are found by the run-id label: the check's pod must not carry it.
    assert tp.RUN_ID_LABEL not in pod["metadata"]["labels"]
    # It runs where the run's pods would: the same node selection.
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert pod["spec"]["tolerations"] == s["tolerations"]


@pytest.mark.parametrize(
    "overrides",
    [{"dataset": "synthetic"}, {"launcher": "runai", "dataset": "coco", "dataset_path": "/data/coco"}],
)
def test_no_layout_check_for_generated_data_or_runai(overrides):
    assert tw.workload(settings(**overrides))["layout_check"] is None

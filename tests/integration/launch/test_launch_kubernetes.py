"""playbooks/train.yml with the pytorchjob, indexed_job and trainjob launchers, against the
real Kubernetes control plane of the test harness (tests/harness/README.md).

What the server stores is asserted (pods with QoS class Guaranteed, the memory-backed
/dev/shm, IPC_LOCK only, the Multus annotation, RDMA requests, NCCL environment), the pods
run to Succeeded through kwok, and every pod's log - one rank of a real gloo torchrun run of
the trainer plus one host's lines of a real NCCL log - is read back and verified.
"""

from __future__ import annotations

import json
import pathlib
import threading
import time

import pytest
from cluster_helpers import NCCL_FIXTURES, FakeTrainerController, PodLogServer, nccl_lines_by_host

PLAYBOOK = "playbooks/train.yml"
INVENTORY = "inventories/local"
IMAGE = "registry.example/gpuops-trainer:test"
IB_LOG = NCCL_FIXTURES / "ib-gdrdma-2node-a100-sendrecv-2165.log"
SOCKET_LOG = NCCL_FIXTURES / "socket-docker-eth0-sharp-plugin-garbled-trace.log"


def launch_vars(cluster, namespace, runs_dir, launcher, **extra):
    settings = {
        "training_job_launcher": launcher,
        "training_job_name": "rn",
        "training_job_runs_dir": str(runs_dir),
        "training_job_namespace": namespace,
        "training_job_kubeconfig": str(cluster.kubeconfig),
        "training_job_image": IMAGE,
        "training_job_nnodes": 2,
        "training_job_nproc_per_node": 1,
        "training_job_gpus_per_node": 1,
        # The inventory's CPU defaults say gloo; the pods ask for GPUs, so NCCL is expected.
        "training_job_backend": "auto",
        "training_job_cpu": "4",
        # /dev/shm: 2 workers x 2 prefetched batches x 2 images of 3x96x96 float32, plus 1Gi for
        # NCCL, rounded up to 2Gi.
        "training_job_workers": 2,
        "training_job_memory": "16Gi",
        "training_job_fabric": "ib",
        "training_job_network": "rdma-net",
        "training_job_run_as_user": 1000,
        "training_job_run_as_group": 1000,
        "training_job_timeout_s": 180,
        "training_job_progress_interval_s": 5,
        "training_job_poll_interval_s": 1,
        # Room for the log server to serve each pod's log while it runs.
        "training_job_pod_annotations": {"gpuops.test/run-duration": "4s"},
        # The ranks' logs come from a run on this machine with a 1 MiB locked-memory limit
        # (conftest); a cluster with the limits roles applied reports unlimited. The verdict on
        # it is checked by test_a_locked_memory_limit_under_the_ib_profile_fails_with_the_remedy.
        "training_verify_memlock_unlimited": False,
    }
    settings.update(extra)
    return settings


def node_logs(trainer_rank_logs, nccl_log):
    """Node i's log: the NCCL lines of the log's i-th host (all of them for a one-host log)
    and rank i's trainer output."""
    per_host = nccl_lines_by_host(nccl_log)
    return {
        rank: (per_host[rank] if rank < len(per_host) else "") + trainer_rank_logs[rank] for rank in (0, 1)
    }


def run_with_logs(run_playbook, cluster, namespace, settings, logs, controller=None):
    """Run the playbook while the pods' logs are served (and the fake controller runs)."""
    server = PodLogServer(cluster, namespace, logs)
    server.start()
    if controller is not None:
        controller.start()
    outcome = {}

    def play():
        started = time.monotonic()
        outcome["run"] = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=900)
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=play)
    thread.start()
    thread.join()
    server.stop()
    if controller is not None:
        controller.stop()
        assert not controller.errors, controller.errors
    assert not server.errors, server.errors
    return outcome["run"], outcome["seconds"], server


def only_run_dir(runs_dir):
    run_dirs = [path for path in pathlib.Path(runs_dir).iterdir() if path.is_dir() and path.name != "history"]
    assert len(run_dirs) == 1, run_dirs
    return run_dirs[0]


def get_json(cluster, *args):
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def assert_pod_practices(pod, container_name):
    """Guaranteed QoS, /dev/shm, IPC_LOCK only, not privileged, the network, RDMA, NCCL env."""
    spec = pod["spec"]
    assert pod["status"]["qosClass"] == "Guaranteed"
    (container,) = spec["containers"]
    assert container["name"] == container_name
    assert container["image"] == IMAGE
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    assert resources["limits"] == {
        "cpu": "4",
        "memory": "16Gi",
        "nvidia.com/gpu": "1",
        "rdma/rdma_shared_device_a": "1",
    }
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "checkpoints"}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm" and mounts["/checkpoints"] == "checkpoints"
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsUser"] == 1000 and spec["securityContext"]["runAsGroup"] == 1000
    assert not spec.get("hostNetwork") and not spec.get("hostIPC")
    assert spec["restartPolicy"] == "OnFailure"
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_IB_HCA"] == "mlx5"
    assert env["NCCL_NET_GDR_LEVEL"] == "PHB" and env["NCCL_SOCKET_IFNAME"] == "net1"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and env["NCCL_DEBUG"] == "INFO"
    command = container["command"]
    assert command[:3] == ["python3", "-m", "gpuops_trainer.launch"]
    assert "--nnodes=2" in command and "--rdzv-backend=c10d" in command
    assert any(arg.startswith("--rdzv-conf=join_timeout=") for arg in command)
    assert "--sync-bn" in command  # two nodes with GPUs
    run_id = pod["metadata"]["labels"]["gpuops.training/run-id"]
    assert "--output-dir=/checkpoints/%s" % run_id in command
    return command


def assert_verified_over_ib(run, runs_dir, pod_count=2):
    assert run.rc == 0, run
    assert "PASSED (2/2 ranks reported" in run.output
    run_dir = only_run_dir(runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "passed", summary["failures"]
    assert summary["nccl"]["transport"] == "IB"
    assert summary["nccl"]["init_complete_ranks"] == [0, 1]
    assert len(list((run_dir / "logs").glob("*.log"))) == pod_count
    assert (run_dir / "report.html").is_file() and (run_dir / "loss.png").is_file()
    assert "transport IB" in (run_dir / "report.md").read_text()
    # Not checked here (launch_vars), but reported.
    assert summary["memlock"]["limited_ranks"] == [0, 1]
    return run_dir, summary


def test_pytorchjob_runs_to_succeeded_and_verifies_over_ib(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    settings = launch_vars(k8s_cluster, launch_namespace, tmp_path / "runs", "pytorchjob")
    run, seconds, server = run_with_logs(
        run_playbook, k8s_cluster, launch_namespace, settings, node_logs(trainer_rank_logs, IB_LOG)
    )
    run_dir, _summary = assert_verified_over_ib(run, tmp_path / "runs")
    assert sorted(server.served.values()) == [0, 1]
    assert "pods: " in run.output and "of 2 expected" in run.output  # the progress line

    (job,) = get_json(k8s_cluster, "pytorchjobs.kubeflow.org", "-n", launch_namespace)["items"]
    spec = job["spec"]
    assert spec["nprocPerNode"] == "1"
    assert spec["runPolicy"]["backoffLimit"] == 3 and spec["runPolicy"]["cleanPodPolicy"] == "None"
    assert spec["runPolicy"]["activeDeadlineSeconds"] == 180 + 60
    # Workers only by default: no init container, and the rendezvous on worker 0.
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in job["status"]["conditions"])

    pods = get_json(k8s_cluster, "pods", "-n", launch_namespace)["items"]
    assert sorted(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"] for pod in pods) == [
        "0",
        "1",
    ]
    for pod in pods:
        assert not pod["spec"].get("initContainers")
        command = assert_pod_practices(pod, "pytorch")
        assert "--rdzv-endpoint=%s-worker-0:29400" % job["metadata"]["name"] in command
        assert pod["spec"]["containers"][0]["ports"][0]["name"] == "pytorchjob-port"
        assert pod["status"]["phase"] == "Succeeded"
        assert (run_dir / "logs" / ("%s.log" % pod["metadata"]["name"])).is_file()


def test_indexed_job_runs_to_succeeded_and_verifies_over_ib(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    settings = launch_vars(k8s_cluster, launch_namespace, tmp_path / "runs", "indexed_job")
    run, _seconds, _server = run_with_logs(
        run_playbook, k8s_cluster, launch_namespace, settings, node_logs(trainer_rank_logs, IB_LOG)
    )
    run_dir, summary = assert_verified_over_ib(run, tmp_path / "runs")
    # The role read the kwok GPU nodes the pods ran on (1056Gi and 8 nvidia.com/gpu allocatable):
    # the recommendation states the pod's share of a node's RAM next to its share of the GPUs.
    recommendation = summary["memory"]["recommendation"]
    share = recommendation["node_share"]
    assert (share["node_memory"], share["node_gpus"], share["pod_gpus"]) == ("1056Gi", 8, 1)
    assert share["gpu_share"] == 0.125 and share["strands_gpus"] is False
    assert share["statement"] in recommendation["statement"]
    assert "of the node's memory" in (run_dir / "report.md").read_text()

    (job,) = get_json(k8s_cluster, "jobs", "-n", launch_namespace)["items"]
    name = job["metadata"]["name"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert job["spec"]["backoffLimit"] == 3
    assert job["status"]["succeeded"] == 2
    (service,) = get_json(k8s_cluster, "services", "-n", launch_namespace)["items"]
    assert service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    pods = get_json(k8s_cluster, "pods", "-n", launch_namespace)["items"]
    assert len(pods) == 2
    for pod in pods:
        command = assert_pod_practices(pod, "trainer")
        assert pod["spec"]["subdomain"] == name and pod["spec"]["setHostnameAsFQDN"] is True
        # The rendezvous runs on the pod of index 0, reached through the headless Service.
        assert "--rdzv-endpoint=%s-0.%s:29400" % (name, name) in command
        assert pod["spec"]["hostname"] == "%s-%s" % (
            name,
            pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
        )


def test_trainjob_is_accepted_and_runs_through_a_stand_in_controller(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    """The harness installs the Trainer v2 CRDs but runs no Trainer controller: the API server
    validates and stores the TrainingRuntime and TrainJob, and a stand-in controller of the
    test (cluster_helpers.FakeTrainerController) turns the TrainJob into an Indexed Job and
    reports its end, so that the wait, the log collection and the verification run too."""
    settings = launch_vars(k8s_cluster, launch_namespace, tmp_path / "runs", "trainjob")
    controller = FakeTrainerController(k8s_cluster, launch_namespace)
    run, _seconds, _server = run_with_logs(
        run_playbook,
        k8s_cluster,
        launch_namespace,
        settings,
        node_logs(trainer_rank_logs, IB_LOG),
        controller,
    )
    assert_verified_over_ib(run, tmp_path / "runs")

    (trainjob,) = get_json(k8s_cluster, "trainjobs.trainer.kubeflow.org", "-n", launch_namespace)["items"]
    name = trainjob["metadata"]["name"]
    assert trainjob["spec"]["runtimeRef"] == {
        "name": name,
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }
    assert trainjob["spec"]["trainer"]["numNodes"] == 2
    assert (
        trainjob["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    )  # defaulted by the server
    (runtime,) = get_json(k8s_cluster, "trainingruntimes.trainer.kubeflow.org", "-n", launch_namespace)[
        "items"
    ]
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "torch": {"numProcPerNode": 1}}
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"
    assert (
        replicated["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"]
        == "trainer"
    )
    pod_spec = replicated["template"]["spec"]["template"]["spec"]
    assert pod_spec["containers"][0]["name"] == "node"
    assert "--rdzv-endpoint=%s-node-0-0.%s:29400" % (name, name) in pod_spec["containers"][0]["command"]
    pods = get_json(k8s_cluster, "pods", "-n", launch_namespace)["items"]
    assert len(pods) == 2
    for pod in pods:
        assert_pod_practices(pod, "node")


def test_a_socket_fallback_under_the_ib_profile_fails_with_the_remedy(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    """Also the Master + Worker layout, and why it is not the default."""
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        tmp_path / "runs",
        "pytorchjob",
        training_job_pytorchjob_master=True,
        training_job_pod_labels={"gpuops.test/with-master": "true"},
    )
    run, _seconds, server = run_with_logs(
        run_playbook, k8s_cluster, launch_namespace, settings, node_logs(trainer_rank_logs, SOCKET_LOG)
    )
    assert sorted(server.served.values()) == [0, 1]
    assert run.rc != 0, run
    output = " ".join(run.output.split())
    assert "transport: expected IB, found Socket" in output
    for remedy in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "Multus network annotation"):
        assert remedy in output
    summary = json.loads((only_run_dir(tmp_path / "runs") / "summary.json").read_text())
    assert summary["verdict"] == "failed"
    assert summary["nccl"]["transport"] == "Socket"

    (job,) = get_json(k8s_cluster, "pytorchjobs.kubeflow.org", "-n", launch_namespace)["items"]
    assert {kind: spec["replicas"] for kind, spec in job["spec"]["pytorchReplicaSpecs"].items()} == {
        "Master": 1,
        "Worker": 1,
    }
    pods = {
        pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]: pod
        for pod in get_json(k8s_cluster, "pods", "-n", launch_namespace)["items"]
    }
    command = assert_pod_practices(pods["master"], "pytorch")
    assert "--rdzv-endpoint=%s-master-0:29400" % job["metadata"]["name"] in command
    # The operator's init container comes from the template the training_operator role gives
    # it (the harness's operator reads the same one): requests equal to limits, so the Worker
    # stays Guaranteed (upstream's template would make it Burstable).
    (init,) = pods["worker"]["spec"]["initContainers"]
    assert init["name"] == "init-pytorch"
    assert init["resources"]["requests"] == init["resources"]["limits"] == {"cpu": "100m", "memory": "20Mi"}
    assert pods["worker"]["status"]["qosClass"] == "Guaranteed"


def test_a_locked_memory_limit_under_the_ib_profile_fails_with_the_remedy(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    """NCCL's own lines say IB here; the ranks' run_start records say what their processes got.
    With the check left to auto, the IB fabric profile turns it on."""
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        tmp_path / "runs",
        "indexed_job",
        training_verify_memlock_unlimited="auto",
    )
    run, _seconds, _server = run_with_logs(
        run_playbook, k8s_cluster, launch_namespace, settings, node_logs(trainer_rank_logs, IB_LOG)
    )
    assert run.rc != 0, run
    output = " ".join(run.output.split())
    assert (
        "ranks 0 (1Mi), 1 (1Mi) run with a locked-memory limit (RLIMIT_MEMLOCK), expected unlimited" in output
    ), output
    assert "gpuops.training.crio_limits" in output and "IPC_LOCK alone" in output
    run_dir = only_run_dir(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "failed" and summary["nccl"]["transport"] == "IB"
    assert (
        "| Locked memory | limited to as little as 1Mi on ranks 0, 1" in (run_dir / "report.md").read_text()
    )


@pytest.mark.parametrize(
    ("exit_code", "named"),
    [
        ("3", "exited with code 3 (Error)"),
        # kwok's fail stage ends the container with reason Error: a SIGKILL without the
        # kubelet's OOMKilled (which kwok cannot give; the unit tests and the real node do).
        (
            "137",
            "exited with code 137 (killed by SIGKILL (the kernel's OOM killer sends it when memory runs out)",
        ),
    ],
)
def test_a_failing_pod_ends_the_run_with_the_failure_named(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, tmp_path, exit_code, named
):
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        tmp_path / "runs",
        "indexed_job",
        training_job_backoff_limit=0,
        training_job_pod_annotations={"gpuops.test/fail": "true", "gpuops.test/exit-code": exit_code},
    )
    run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=300)
    assert run.rc != 0, run
    output = " ".join(run.output.split())
    assert "Job %s/rn-" % launch_namespace in output and "failed (BackoffLimitExceeded" in output
    assert named in output
    assert "did not finish within" not in output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"training_job_image": ""}, "training_job_image is required for the pytorchjob launcher"),
        (
            {"training_job_memory": "1Gi"},
            "training_job_memory (1Gi) must be larger than the /dev/shm size 2Gi",
        ),
        (
            {"training_job_fabric": "ethernet"},
            "value of training_job_fabric must be one of: ib, roce, socket",
        ),
        (
            {"training_job_nproc_per_node": 2, "training_job_gpus_per_node": 1},
            "training_job_nproc_per_node (2) exceeds training_job_gpus_per_node (1)",
        ),
        (
            {"training_job_network": "Bad_Net"},
            "training_job_network: 'Bad_Net' is not a NetworkAttachmentDefinition",
        ),
        (
            {"training_job_env_from_secrets": {"HF_TOKEN": {"secret": "hub", "key": "../token"}}},
            "training_job_env_from_secrets: HF_TOKEN.key must be a key of the Secret",
        ),
        (
            {"training_job_seccomp_profile": "Localhost"},
            "value of training_job_seccomp_profile must be one of: RuntimeDefault, Unconfined, ",
        ),
        (
            {"training_job_stuck_timeout": -1},
            "training_job_stuck_timeout must be an integer of at least 0, got -1",
        ),
    ],
)
def test_bad_settings_fail_before_anything_is_created(
    run_playbook, k8s_cluster, launch_namespace, tmp_path, extra, message
):
    settings = launch_vars(k8s_cluster, launch_namespace, tmp_path / "runs", "pytorchjob", **extra)
    run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=300)
    assert run.rc != 0, run
    assert message in " ".join(run.output.split()), run
    assert not (tmp_path / "runs").exists()
    assert get_json(k8s_cluster, "pytorchjobs.kubeflow.org", "-n", launch_namespace)["items"] == []


@pytest.mark.parametrize(
    ("launcher", "extra"),
    [
        ("pytorchjob", {"elastic_min_nodes": 1, "elastic_max_nodes": 4, "max_restarts": 3}),
        ("pytorchjob", {"pytorchjob_master": True, "nnodes": 3}),
        ("indexed_job", {"fabric": "roce", "network": ["sriov/ib-a", "ib-b@net2"], "dataset_pvc": "coco"}),
        (
            "indexed_job",
            {
                "indexed_job_restart_policy": "ExitCode",
                "env_from_secrets": {"T": {"secret": "s", "key": "k"}},
            },
        ),
        (
            "trainjob",
            {"trainjob_runtime": "torch-distributed", "node_selector": {"nvidia.com/gpu.present": "true"}},
        ),
        (
            "trainjob",
            {
                "trainjob_runtime": "my-runtime",
                "trainjob_runtime_kind": "TrainingRuntime",
                "fabric": "socket",
            },
        ),
    ],
)
def test_every_variant_is_accepted_by_the_api_server(k8s_cluster, launch_namespace, launcher, extra):
    """Server-side dry runs of the variants the playbook tests do not run, against the real
    API server and the upstream CRDs (Training Operator v1.9.2, Trainer v2.1.0)."""
    from ansible_collections.gpuops.training.plugins.module_utils import training_workload

    settings = {
        "launcher": launcher,
        "run_id": "rn-20261122T050000Z",
        "name": "rn",
        "namespace": launch_namespace,
        "image": IMAGE,
        "nnodes": 2,
        "nproc_per_node": 8,
        "gpus_per_node": 8,
        "cpu": "32",
        "memory": "256Gi",
        "fabric": "ib",
        "network": "rdma-net",
        "run_as_user": 1000,
        "run_as_group": 1000,
        **extra,
    }
    manifests = training_workload.workload(settings)["manifests"]
    document = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests})
    result = k8s_cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=gpuops-training", "-f", "-",
        input=document, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("serverside-applied (server dry run)") == len(manifests), result.stdout

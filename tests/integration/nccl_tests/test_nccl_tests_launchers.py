"""playbooks/nccl_tests.yml with the ssh and mpijob launchers.

ssh: two inventory hosts; mpirun on the first one starts the ranks on both. There is no MPI
or GPU here, so mpirun is a stand-in that records its command line (and its parent's: the
timeout around it) and prints what the real all_reduce_perf printed on two A3 Mega nodes
(tests/unit/fixtures/nccl/published).

mpijob: against the harness's real kube-apiserver, scheduler and Training Operator, an MPIJob
per collective; kwok runs its pods (the harness renews the simulated nodes' Leases) and
serves, as the launcher's log, the log of a real MPIJob launcher: all_reduce_perf over two
p5 nodes, 16 ranks, through the AWS OFI plugin with GPUDirect RDMA.
"""

from __future__ import annotations

import json
import pathlib
import secrets
import stat
import threading

import pytest
import yaml
from cluster_helpers import NCCL_FIXTURES, PodLogServer
from nccl_tests_output import mpijob_settings

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]

# 16 ranks on two A3 Mega nodes (8 x H100 each), all_reduce, peak busbw 338.82 GB/s.
ALL_REDUCE = NCCL_FIXTURES / "gcp-a3mega-allreduce-16rank-table-only.log"
# An MPIJob launcher's log: 16 ranks on two p5 nodes (8 x H100 each, 32 x 100 Gb/s EFA),
# all_reduce_perf through the AWS OFI plugin with GPUDirect RDMA, peak busbw 487.59 GB/s.
MPIJOB_ALL_REDUCE = NCCL_FIXTURES / "efa-ofi-2203-p5-2node-mpijob.log"
# 8 ranks of alltoall_perf: a peer exited ("remote process exited or there was a network error").
ALLTOALL_REMOTE_EXITED = NCCL_FIXTURES / "nccltests-2287-alltoall-remote-exited-then-sendrecv.log"
PLAYBOOK = "playbooks/nccl_tests.yml"
PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python")
LINE_RATE = {"gbit_per_nic": 200, "nic_count": 8}  # 200 GB/s of links per node
P5_LINE_RATE = {"gbit_per_nic": 100, "nic_count": 32}  # 400 GB/s of EFA per p5 node
LAUNCHER = "training.kubeflow.org/replica-type"


def summary_of(runs_dir):
    (run_dir,) = [path for path in pathlib.Path(runs_dir).iterdir() if path.name != "history"]
    return json.loads((run_dir / "nccl_tests.json").read_text()), run_dir


def failure(output):
    return " ".join(output.split()).rpartition("FAILED! =>")[2]


# --------------------------------------------------------------------------------------
# ssh
# --------------------------------------------------------------------------------------


@pytest.fixture
def two_hosts(tmp_path):
    """Two inventory hosts (both run locally), built binaries, and a stand-in mpirun."""
    binaries = tmp_path / "build"
    binaries.mkdir()
    (binaries / "all_reduce_perf").write_text("#!/bin/sh\nexit 99  # started by mpirun, never directly\n")
    (binaries / "all_reduce_perf").chmod(0o755)
    mpirun = tmp_path / "mpirun"
    mpirun.write_text(
        "#!/bin/sh\n"
        'printf "%%s\\n" "$@" > "%(tmp)s/mpirun.argv"\n'
        'tr "\\0" "\\n" < /proc/$PPID/cmdline > "%(tmp)s/parent.argv"\n'
        'env | grep "^NCCL_" | sort > "%(tmp)s/mpirun.env"\n'
        'cat "%(log)s"\n' % {"tmp": tmp_path, "log": ALL_REDUCE}
    )
    mpirun.chmod(mpirun.stat().st_mode | stat.S_IXUSR)
    node = {"ansible_connection": "local", "ansible_python_interpreter": PYTHON}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "nccl_test_nodes": {
                            "hosts": {
                                "gpu-a": dict(node, ansible_host="10.1.0.11"),
                                "gpu-b": dict(node, ansible_host="10.1.0.12"),
                            },
                            "vars": {
                                "nccl_tests_launcher": "ssh",
                                "nccl_tests_binaries_dir": str(binaries),
                                "nccl_tests_runs_dir": str(tmp_path / "runs"),
                                "nccl_tests_mpirun": str(mpirun),
                                "nccl_tests_gpus_per_node": 8,
                                "nccl_tests_gpus_per_process": 1,
                            },
                        }
                    }
                }
            }
        )
    )
    return tmp_path, str(inventory)


def test_ssh_runs_mpirun_once_over_every_host_and_judges_the_result(run_playbook, two_hosts):
    tmp_path, inventory = two_hosts
    run = run_playbook(
        PLAYBOOK,
        inventory,
        {
            "nccl_tests_line_rate": LINE_RATE,
            "nccl_tests_min_busbw_share": 0.8,
            "nccl_tests_expect_nranks": 16,
            "nccl_tests_timeout_s": 900,
            "nccl_tests_env": {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "ens1"},
        },
    )
    assert run.rc == 0, run
    mpirun = str(tmp_path / "mpirun")
    binary = str(tmp_path / "build" / "all_reduce_perf")
    argv = (tmp_path / "mpirun.argv").read_text().splitlines()
    assert argv == [
        "-np", "16", "-H", "10.1.0.11:8,10.1.0.12:8", "--bind-to", "none",
        "-x", "NCCL_DEBUG", "-x", "NCCL_IB_HCA", "-x", "NCCL_SOCKET_IFNAME",
        binary, "-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-c", "1",
    ]  # fmt: skip
    # The same timeout as the local launcher around mpirun; -x passes on what mpirun has.
    assert (tmp_path / "parent.argv").read_text().splitlines() == [
        "timeout", "--kill-after=30", "900", mpirun,
    ] + argv  # fmt: skip
    assert (tmp_path / "mpirun.env").read_text().splitlines() == [
        "NCCL_DEBUG=INFO", "NCCL_IB_HCA=mlx5", "NCCL_SOCKET_IFNAME=ens1",
    ]  # fmt: skip
    # The environment reached mpirun from a 0600 file, removed after the runs.
    assert not list((tmp_path / "runs").rglob(".nccl-tests-environment"))
    summary, run_dir = summary_of(tmp_path / "runs")
    assert (summary["verdict"], summary["host"], summary["line_rate_gbyte_s"]) == ("passed", "gpu-a", 200.0)
    (row,) = summary["collectives"]
    assert (row["collective"], row["ok"], row["nranks"], row["peak_busbw_gbyte_s"]) == (
        "all_reduce",
        True,
        16,
        338.82,
    )
    assert row["busbw_share"] == pytest.approx(338.82 / 200, abs=0.01)
    assert (run_dir / "all_reduce.log").read_text().startswith(ALL_REDUCE.read_text()[:200])
    assert "| all_reduce | 16 | 338.82 |" in (run_dir / "nccl_tests.md").read_text()
    # Only the first host launched: the second one ended before the run directory.
    assert "gpu-b" not in " ".join(line for line in run.output.splitlines() if "changed: [" in line)


def test_ssh_below_the_expected_bandwidth_fails_naming_the_collective(run_playbook, two_hosts):
    tmp_path, inventory = two_hosts
    run = run_playbook(
        PLAYBOOK,
        inventory,
        {"nccl_tests_line_rate": {"gbit_per_nic": 400, "nic_count": 8}, "nccl_tests_min_busbw_share": 0.9},
    )
    assert run.rc != 0
    message = failure(run.output)
    assert "all_reduce:" in message and "338.82" in message, message
    summary, _run_dir = summary_of(tmp_path / "runs")
    assert summary["verdict"] == "failed" and summary["collectives"][0]["ok"] is False


def test_ssh_without_nccl_tests_on_the_first_host_stops_before_anything_runs(run_playbook, two_hosts):
    tmp_path, inventory = two_hosts
    (tmp_path / "build" / "all_reduce_perf").unlink()
    run = run_playbook(PLAYBOOK, inventory)
    assert run.rc != 0
    assert "nccl-tests binaries missing or not executable" in run.output and "all_reduce_perf" in run.output
    assert not (tmp_path / "mpirun.argv").exists() and not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------------------
# mpijob
# --------------------------------------------------------------------------------------


def launcher_log_index(pod):
    """Every MPIJob launcher gets log 0; the workers print nothing mpirun collects."""
    return 0 if (pod["metadata"].get("labels") or {}).get(LAUNCHER) == "launcher" else None


class LauncherFailure(threading.Thread):
    """Make every MPIJob launcher of the namespace exit with ``exit_code`` a second after it
    starts (kwok's gpuops-pod-fail stage), as mpirun does when a rank fails; the workers
    keep running."""

    def __init__(self, cluster, namespace, exit_code):
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.exit_code = cluster, namespace, exit_code
        self.failed, self.errors = set(), []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            listing = self.cluster.kubectl(
                "get", "pods", "-n", self.namespace, "-l", LAUNCHER + "=launcher", "-o", "json", check=False
            )
            for pod in json.loads(listing.stdout)["items"] if listing.returncode == 0 else []:
                name = pod["metadata"]["name"]
                if name not in self.failed:
                    annotated = self.cluster.kubectl(
                        "annotate", "pod", name, "-n", self.namespace, "--overwrite", "gpuops.test/fail=true",
                        "gpuops.test/exit-code=%d" % self.exit_code, "gpuops.test/run-duration=1s",
                        check=False,
                    )  # fmt: skip
                    (
                        self.failed.add(name)
                        if annotated.returncode == 0
                        else self.errors.append(annotated.stderr)
                    )
            self._halt.wait(0.3)

    def stop(self):
        self._halt.set()
        self.join(timeout=10)


def create_mpijob_namespace(cluster):
    name = "nt-mpi-%s" % secrets.token_hex(3)
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("wait", "--for=create", "--timeout=30s", "-n", name, "serviceaccount/default")
    return name


@pytest.fixture
def mpijob_namespace(k8s_cluster):
    """A namespace of its own (the harness may be shared), whose pods are gone before the next
    test starts: a run holds every simulated GPU."""
    name = create_mpijob_namespace(k8s_cluster)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=true", "--timeout=120s", check=False)


def mpijob_vars(cluster, namespace, runs_dir, **extra):
    settings = {
        "nccl_tests_nnodes": 2,
        # The launcher runs long enough for its log to be served; the pods stay for the test.
        "nccl_tests_pod_annotations": {"gpuops.test/run-duration": "3s"},
        "nccl_tests_delete_finished": False,
        "ansible_connection": "local",
        "ansible_python_interpreter": PYTHON,
    }
    settings.update(extra)
    return mpijob_settings(cluster, namespace, runs_dir, **settings)


def run_mpijob(run_playbook, cluster, namespace, settings, log=MPIJOB_ALL_REDUCE, fail_launcher_with=None):
    server = PodLogServer(cluster, namespace, {0: log}, index_of=launcher_log_index)
    helpers = [server] + (
        [LauncherFailure(cluster, namespace, fail_launcher_with)] if fail_launcher_with else []
    )
    for helper in helpers:
        helper.start()
    try:
        return run_playbook(PLAYBOOK, "localhost,", settings, timeout=600), server
    finally:
        for helper in helpers:
            helper.stop()
        assert all(helper.errors == [] for helper in helpers), [helper.errors for helper in helpers]


def get_json(cluster, *args):
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def test_mpijob_runs_on_the_cluster_and_its_launchers_log_is_judged(
    run_playbook, k8s_cluster, mpijob_namespace, tmp_path
):
    settings = mpijob_vars(
        k8s_cluster, mpijob_namespace, tmp_path / "runs",
        nccl_tests_line_rate=P5_LINE_RATE, nccl_tests_min_busbw_share=0.8,
        nccl_tests_expect_nranks=16, nccl_tests_expect_transport="Plugin",
        nccl_tests_env={"NCCL_IB_HCA": "mlx5_0,mlx5_1"},
    )  # fmt: skip
    run, server = run_mpijob(run_playbook, k8s_cluster, mpijob_namespace, settings)
    assert run.rc == 0, run
    assert len(server.served) == 1 and next(iter(server.served)).endswith("-launcher")
    summary, run_dir = summary_of(tmp_path / "runs")
    assert (summary["verdict"], summary["transport"], summary["gdr"]) == ("passed", "Plugin", True)
    assert summary["line_rate_gbyte_s"] == 400.0
    (row,) = summary["collectives"]
    assert (row["collective"], row["ok"], row["rc"], row["nranks"], row["peak_busbw_gbyte_s"]) == (
        "all_reduce",
        True,
        0,
        16,
        487.59,
    )
    assert row["busbw_share"] == pytest.approx(487.59 / 400, abs=0.01)
    assert (run_dir / "all_reduce.log").read_text().startswith(MPIJOB_ALL_REDUCE.read_text()[:500])
    assert (
        "Line rate: 400.0 GB/s; transport: Plugin with GPUDirect RDMA"
        in (run_dir / "nccl_tests.md").read_text()
    )

    # What the server stores.
    (job,) = get_json(k8s_cluster, "mpijobs", "-n", mpijob_namespace)["items"]
    name, spec = job["metadata"]["name"], job["spec"]
    run_id = job["metadata"]["labels"]["gpuops.training/run-id"]
    assert run_id == run_dir.name + "-all-reduce"
    assert (spec["slotsPerWorker"], spec["mainContainer"]) == (8, "mpi-worker")
    # Nothing restarts and the pods stay, so that a failed launcher's log can still be read.
    assert spec["runPolicy"] == {"activeDeadlineSeconds": 180, "cleanPodPolicy": "None", "suspend": False}
    launcher, workers = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    assert (launcher["replicas"], launcher["restartPolicy"]) == (1, "Never")
    assert (workers["replicas"], workers["restartPolicy"]) == (2, "Never")

    # The launcher: mpirun over the operator's hostfile, small and Guaranteed, no GPU, no network.
    (container,) = launcher["template"]["spec"]["containers"]
    assert container["name"] == "mpi-launcher" and container["image"] == "registry.example/nccl-tests:2.21"
    assert container["command"] == [
        "mpirun", "-np", "16", "--bind-to", "none", "-x", "NCCL_DEBUG", "-x", "NCCL_IB_HCA",
        "/opt/nccl-tests/build/all_reduce_perf",
        "-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-c", "1",
    ]  # fmt: skip
    small = {"cpu": "1", "memory": "1Gi"}
    assert container["resources"] == {"requests": small, "limits": small}
    assert "k8s.v1.cni.cncf.io/networks" not in launcher["template"]["metadata"].get("annotations", {})
    assert "serviceAccountName" not in launcher["template"]["spec"]

    # The workers: the training pod's practices, waiting for mpirun's exec.
    (container,) = workers["template"]["spec"]["containers"]
    assert (container["name"], container["command"]) == ("mpi-worker", ["sleep", "365d"])
    amounts = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    }
    # The workers never call the API; the launcher runs mpirun through kubectl exec and keeps
    # its ServiceAccount's token.
    assert workers["template"]["spec"]["automountServiceAccountToken"] is False
    assert "automountServiceAccountToken" not in launcher["template"]["spec"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}} in workers["template"][
        "spec"
    ]["volumes"]
    assert workers["template"]["metadata"]["annotations"] == {
        "gpuops.test/run-duration": "3s",
        "k8s.v1.cni.cncf.io/networks": "rdma-net",
    }
    env = {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}
    assert {key: env[key] for key in ("NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL")} == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",  # nccl_tests_env wins over the fabric profile
        "NCCL_NET_GDR_LEVEL": "PHB",
    }
    assert (env["NCCL_SOCKET_IFNAME"], env["NCCL_DEBUG"]) == ("net1", "INFO")
    launcher_env = {
        item["name"]: item.get("value", item.get("valueFrom"))
        for item in launcher["template"]["spec"]["containers"][0]["env"]
    }
    assert {key: launcher_env[key] for key in ("NCCL_DEBUG", "NCCL_IB_HCA")} == {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
    }

    # The pods the operator made of it: all Guaranteed, the launcher with the operator's
    # service account (the right to exec into the workers). (Where the workers run is not
    # asserted: other tests sharing the harness may hold GPUs meanwhile.)
    pods = {
        pod["metadata"]["name"]: pod
        for pod in get_json(
            k8s_cluster, "pods", "-n", mpijob_namespace, "-l", "gpuops.training/run-id=" + run_id
        )["items"]
    }
    assert sorted(pods) == ["%s-%s" % (name, suffix) for suffix in ("launcher", "worker-0", "worker-1")]
    assert {pod["status"]["qosClass"] for pod in pods.values()} == {"Guaranteed"}
    assert pods[name + "-launcher"]["spec"]["serviceAccountName"] == name + "-launcher"
    assert pods[name + "-launcher"]["status"]["phase"] == "Succeeded"


def test_mpijob_below_the_expected_bandwidth_fails_naming_the_share(
    run_playbook, k8s_cluster, mpijob_namespace, tmp_path
):
    settings = mpijob_vars(
        k8s_cluster, mpijob_namespace, tmp_path / "runs",
        nccl_tests_line_rate={"gbit_per_nic": 400, "nic_count": 32}, nccl_tests_min_busbw_share=0.9,
        nccl_tests_delete_finished=True,
    )  # fmt: skip
    run, _server = run_mpijob(run_playbook, k8s_cluster, mpijob_namespace, settings)
    assert run.rc != 0
    message = failure(run.output)
    assert "all_reduce:" in message and "487.59" in message, message
    summary, _run_dir = summary_of(tmp_path / "runs")
    assert summary["verdict"] == "failed" and summary["collectives"][0]["rc"] == 0
    # Deleted once its log was read, so that it holds no GPUs.
    assert get_json(k8s_cluster, "mpijobs", "-n", mpijob_namespace)["items"] == []


def test_a_failed_mpijob_launcher_keeps_its_log_which_is_judged_with_its_exit_code(
    run_playbook, k8s_cluster, mpijob_namespace, tmp_path
):
    settings = mpijob_vars(
        k8s_cluster, mpijob_namespace, tmp_path / "runs",
        nccl_tests_collectives=["alltoall"],
        nccl_tests_pod_annotations={"gpuops.test/run-duration": "3600s"},
        nccl_tests_delete_finished=True,
    )  # fmt: skip
    run, _server = run_mpijob(
        run_playbook,
        k8s_cluster,
        mpijob_namespace,
        settings,
        log=ALLTOALL_REMOTE_EXITED,
        fail_launcher_with=3,
    )
    assert run.rc != 0
    message = failure(run.output)
    # What the log says, and how the launcher ended.
    assert "alltoall: no_errors: expected none, found remote_exited" in message, message
    assert "alltoall_perf exited with code 3; MPIJob %s/" % mpijob_namespace in message, message
    assert "-launcher: Failed on gpu-node-" in message and "exited with code 3 (Error)" in message, message
    summary, run_dir = summary_of(tmp_path / "runs")
    (row,) = summary["collectives"]
    assert (row["collective"], row["ok"], row["rc"], row["nranks"]) == ("alltoall", False, 3, 8)
    assert "remote process exited or there was a network error" in (run_dir / "alltoall.log").read_text()


# Workers that ask for 16 GPUs (the simulated nodes have 8) never schedule; mpirun waits for them,
# so the launcher keeps running. One run ends at its deadline (no stuck time), the other at its
# stuck time; both are launched at once, each in its namespace, and the tests read the outcome.
NEVER_SCHEDULED = {
    "deadline": {"nccl_tests_timeout_s": 20, "nccl_tests_stuck_timeout": 0},
    "stuck": {"nccl_tests_timeout_s": 300, "nccl_tests_stuck_timeout": 15},
}


@pytest.fixture(scope="module")
def never_scheduled(run_playbook, k8s_cluster, tmp_path_factory):
    outcomes = {}

    def play(name):
        namespace = create_mpijob_namespace(k8s_cluster)
        runs_dir = tmp_path_factory.mktemp("runs-" + name)
        outcomes[name] = {"namespace": namespace, "runs_dir": runs_dir}
        settings = mpijob_vars(
            k8s_cluster, namespace, runs_dir,
            nccl_tests_gpus_per_node=16,
            nccl_tests_pod_annotations={"gpuops.test/run-duration": "3600s"},
            nccl_tests_delete_finished=True,
            **NEVER_SCHEDULED[name],
        )  # fmt: skip
        try:
            outcomes[name]["run"], _server = run_mpijob(run_playbook, k8s_cluster, namespace, settings)
        except Exception as error:  # the test of that run reports it
            outcomes[name]["error"] = repr(error)

    threads = [threading.Thread(target=play, args=(name,)) for name in NEVER_SCHEDULED]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    yield outcomes
    for outcome in outcomes.values():
        k8s_cluster.kubectl(
            "delete", "namespace", outcome["namespace"], "--wait=true", "--timeout=120s", check=False
        )


def never_scheduled_outcome(outcomes, name):
    outcome = outcomes[name]
    assert "error" not in outcome, outcome["error"]
    assert outcome["run"].rc != 0
    return outcome, failure(outcome["run"].output)


def test_an_mpijob_whose_workers_never_schedule_ends_at_its_deadline_naming_the_pods(
    k8s_cluster, never_scheduled
):
    """nccl_tests_stuck_timeout 0: the wait as before there was a stuck time."""
    outcome, message = never_scheduled_outcome(never_scheduled, "deadline")
    assert "all_reduce_perf exited with code 124 (stopped after 20 s)" in message, message
    assert "did not finish within 20 s" in message, message
    assert "-worker-0: Pending" in message and "Insufficient nvidia.com/gpu" in message, message
    assert "-launcher: Running" in message, message
    assert "is stuck:" not in message, message
    # Stopped at the deadline: the MPIJob is deleted, its pods with it.
    assert get_json(k8s_cluster, "mpijobs", "-n", outcome["namespace"])["items"] == []


def test_an_mpijob_whose_workers_never_schedule_ends_at_its_stuck_time_naming_them_and_the_remedy(
    k8s_cluster, never_scheduled
):
    outcome, message = never_scheduled_outcome(never_scheduled, "stuck")
    assert "all_reduce_perf never ran: its MPIJob was stuck for nccl_tests_stuck_timeout (15 s); " in message
    assert "did not finish within" not in message and "stopped after" not in message, message
    assert "MPIJob %s/" % outcome["namespace"] in message and " is stuck: it has not gone on for " in message
    # Both workers, refused a place for one reason, with the scheduler's words and the remedy.
    assert "-worker-0, pod %s/" % outcome["namespace"] in message, message
    assert "-worker-1: not scheduled for " in message, message
    assert "Insufficient nvidia.com/gpu" in message, message
    assert (
        "to go on, free nvidia.com/gpu on the nodes (other pods hold it) or add nodes that have it" in message
    )
    summary, _run_dir = summary_of(outcome["runs_dir"])
    (row,) = summary["collectives"]
    assert (row["collective"], row["ok"], row["rc"]) == ("all_reduce", False, 1)
    # Stopped: the MPIJob is deleted, its pods with it.
    assert get_json(k8s_cluster, "mpijobs", "-n", outcome["namespace"])["items"] == []


# --------------------------------------------------------------------------------------
# mpijob settings are the nccl_tests role's own
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"nccl_tests_cpu": "lots"}, "nccl_tests_cpu 'lots' is not a Kubernetes quantity"),
        (
            {"nccl_tests_network": "Bad_Net"},
            "nccl_tests_network: 'Bad_Net' is not a NetworkAttachmentDefinition",
        ),
        ({"nccl_tests_memory": "4Gi"}, "nccl_tests_memory (4Gi) must be larger than the /dev/shm size 8Gi"),
        (
            {"nccl_tests_stuck_timeout": -1},
            "nccl_tests_stuck_timeout must be an integer of at least 0, got -1",
        ),
    ],
)
def test_bad_mpijob_settings_fail_in_validation_naming_the_roles_own_variables(
    run_playbook, tmp_path, extra, message
):
    """The MPIJob is rendered by the training workload filter, but a bad value is the nccl_tests
    role's: its validation names nccl_tests_* (never training_job_*) before anything is rendered,
    created or applied. No cluster is needed: nothing reaches the API server."""
    settings = {
        "nccl_tests_hosts": "localhost",
        "nccl_tests_launcher": "mpijob",
        "nccl_tests_image": "registry.example/nccl-tests:2.21",
        "nccl_tests_runs_dir": str(tmp_path / "runs"),
        "nccl_tests_kubeconfig": str(tmp_path / "no-such-kubeconfig"),
        "ansible_python_interpreter": PYTHON,
        **extra,
    }
    run = run_playbook(PLAYBOOK, "localhost,", dict(settings, ansible_connection="local"))
    assert run.rc != 0, run
    output = " ".join(run.output.split())
    assert message in output, run
    assert "training_job_" not in output, run
    # Caught by the role's validation step, in the form of its other validation messages.
    assert "The mpijob launcher settings are not valid:" in output, run
    assert "Render the MPIJob" not in output, run
    assert not (tmp_path / "runs").exists()

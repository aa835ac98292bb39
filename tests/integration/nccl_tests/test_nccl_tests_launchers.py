"""playbooks/nccl_tests.yml with the ssh and mpijob launchers.

ssh: two inventory hosts; mpirun on the first one starts the ranks on both. There is no MPI
or GPU here, so mpirun is a stand-in that records its command line and prints what the real
all_reduce_perf printed on two A3 Mega nodes (../shared/fixtures/nccl).

mpijob: against the harness's real kube-apiserver and Training Operator, an MPIJob per
collective; kwok runs its pods and serves a real nccl-tests log as the launcher's log.
"""

from __future__ import annotations

import json
import pathlib
import stat
import threading

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]

FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "nccl"
# 16 ranks on two A3 Mega nodes (8 x H100 each), all_reduce, peak busbw 338.82 GB/s.
ALL_REDUCE = FIXTURES / "gcp-a3mega-allreduce-16rank-table-only.log"
PLAYBOOK = "playbooks/nccl_tests.yml"
PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python")
LINE_RATE = {"gbit_per_nic": 200, "nic_count": 8}  # 200 GB/s of links per node


def summary_of(runs_dir):
    (run_dir,) = pathlib.Path(runs_dir).iterdir()
    return json.loads((run_dir / "nccl_tests.json").read_text()), run_dir


def failure(output):
    return " ".join(output.split()).rpartition("FAILED! =>")[2]


@pytest.fixture
def two_hosts(tmp_path):
    """Two inventory hosts (both run locally), built binaries, and a stand-in mpirun."""
    binaries = tmp_path / "build"
    binaries.mkdir()
    (binaries / "all_reduce_perf").write_text("#!/bin/sh\nexit 99  # started by mpirun, never directly\n")
    (binaries / "all_reduce_perf").chmod(0o755)
    mpirun = tmp_path / "mpirun"
    mpirun.write_text(
        '#!/bin/sh\nprintf "%%s\\n" "$@" > "%s/mpirun.argv"\ncat "%s"\n' % (tmp_path, ALL_REDUCE)
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
            "nccl_tests_env": {"NCCL_IB_HCA": "mlx5"},
        },
    )
    assert run.rc == 0, run
    argv = (tmp_path / "mpirun.argv").read_text().splitlines()
    binary = str(tmp_path / "build" / "all_reduce_perf")
    assert argv == [
        "-np", "16", "-H", "10.1.0.11:8,10.1.0.12:8", "--bind-to", "none",
        "-x", "NCCL_DEBUG", "-x", "NCCL_IB_HCA",
        binary, "-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-c", "1",
    ]  # fmt: skip
    summary, run_dir = summary_of(tmp_path / "runs")
    (row,) = summary["collectives"]
    assert (row["collective"], row["ok"], row["nranks"], row["peak_busbw_gbyte_s"]) == (
        "all_reduce",
        True,
        16,
        338.82,
    )
    assert row["busbw_share"] == pytest.approx(338.82 / 200, abs=0.01)
    assert (run_dir / "all_reduce.log").read_text().startswith(ALL_REDUCE.read_text()[:200])
    # Only the first host launched: the second one ended before the run directory.
    assert "gpu-b" not in " ".join(line for line in run.output.splitlines() if "changed: [" in line)


def test_ssh_without_nccl_tests_on_the_first_host_stops_before_anything_runs(run_playbook, two_hosts):
    tmp_path, inventory = two_hosts
    (tmp_path / "build" / "all_reduce_perf").unlink()
    run = run_playbook(PLAYBOOK, inventory)
    assert run.rc != 0
    assert "nccl-tests binaries missing or not executable" in run.output and "all_reduce_perf" in run.output
    assert not (tmp_path / "mpirun.argv").exists() and not (tmp_path / "runs").exists()


class LauncherLogServer(threading.Thread):
    """Serve a log as the log of every MPIJob launcher pod of a namespace, as pods appear."""

    def __init__(self, cluster, namespace, log):
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.log = cluster, namespace, log
        self.served, self.errors = set(), []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            listing = self.cluster.kubectl(
                "get", "pods", "-n", self.namespace, "-l", "training.kubeflow.org/replica-type=launcher",
                "-o", "json", check=False,
            )  # fmt: skip
            if listing.returncode == 0:
                for pod in json.loads(listing.stdout)["items"]:
                    name = pod["metadata"]["name"]
                    if name not in self.served:
                        self.cluster.serve_pod_log(self.namespace, name, self.log)
                        self.served.add(name)
            else:
                self.errors.append(listing.stderr)
            self._halt.wait(0.3)

    def stop(self):
        self._halt.set()
        self.join(timeout=10)


@pytest.fixture
def mpijob_namespace(k8s_cluster):
    name = "nt-mpi"
    k8s_cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true", check=False)
    k8s_cluster.kubectl("create", "namespace", name)
    k8s_cluster.kubectl("wait", "--for=create", "--timeout=30s", "-n", name, "serviceaccount/default")
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def mpijob_vars(cluster, namespace, runs_dir, **extra):
    settings = {
        "nccl_tests_hosts": "localhost",
        "nccl_tests_launcher": "mpijob",
        "nccl_tests_kubeconfig": str(cluster.kubeconfig),
        "nccl_tests_namespace": namespace,
        "nccl_tests_image": "registry.example/nccl-tests:2.21",
        "nccl_tests_nodes": 2,
        "nccl_tests_gpus_per_node": 8,
        "nccl_tests_gpus_per_process": 1,
        "nccl_tests_cpu": "4",
        "nccl_tests_memory": "16Gi",
        "nccl_tests_shm_size": "4Gi",
        "nccl_tests_network": "rdma-net",
        "nccl_tests_runs_dir": str(runs_dir),
        "nccl_tests_poll_interval_s": 1,
        "nccl_tests_timeout_s": 120,
        # The launcher runs long enough for its log to be served; the pods stay for the test.
        "nccl_tests_pod_annotations": {"gpuops.test/run-duration": "3s"},
        "nccl_tests_delete_finished": False,
        "ansible_connection": "local",
        "ansible_python_interpreter": PYTHON,
    }
    settings.update(extra)
    return settings


def run_mpijob(run_playbook, cluster, namespace, settings):
    server = LauncherLogServer(cluster, namespace, ALL_REDUCE)
    server.start()
    try:
        return run_playbook(PLAYBOOK, "localhost,", settings, timeout=600), server
    finally:
        server.stop()


def test_mpijob_runs_on_the_cluster_and_its_launchers_log_is_judged(
    run_playbook, k8s_cluster, mpijob_namespace, tmp_path
):
    settings = mpijob_vars(
        k8s_cluster, mpijob_namespace, tmp_path / "runs",
        nccl_tests_line_rate=LINE_RATE, nccl_tests_min_busbw_share=0.8,
    )  # fmt: skip
    run, server = run_mpijob(run_playbook, k8s_cluster, mpijob_namespace, settings)
    assert run.rc == 0, run
    assert server.errors == [] and len(server.served) == 1
    summary, run_dir = summary_of(tmp_path / "runs")
    (row,) = summary["collectives"]
    assert (row["collective"], row["ok"], row["nranks"], row["peak_busbw_gbyte_s"]) == (
        "all_reduce",
        True,
        16,
        338.82,
    )
    assert "# Avg bus bandwidth" in (run_dir / "all_reduce.log").read_text()

    # What the server stores: a launcher running mpirun, two workers with the pod practices.
    (job,) = json.loads(k8s_cluster.kubectl("get", "mpijobs", "-n", mpijob_namespace, "-o", "json").stdout)[
        "items"
    ]
    assert job["spec"]["slotsPerWorker"] == 8
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][:3] == ["mpirun", "-np", "16"]
    assert launcher["command"][-15:-14] == ["/opt/nccl-tests/build/all_reduce_perf"]
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == 2
    worker = workers["template"]["spec"]["containers"][0]
    amounts = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
    assert worker["resources"] == {"requests": amounts, "limits": amounts}
    assert worker["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
    assert workers["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
    env = {item["name"]: item["value"] for item in worker["env"]}
    assert (env["NCCL_IB_DISABLE"], env["NCCL_SOCKET_IFNAME"]) == ("0", "net1")
    pods = json.loads(k8s_cluster.kubectl("get", "pods", "-n", mpijob_namespace, "-o", "json").stdout)[
        "items"
    ]
    qos = {pod["metadata"]["name"]: pod["status"]["qosClass"] for pod in pods}
    assert sorted(qos) == sorted(
        "%s-%s" % (job["metadata"]["name"], suffix) for suffix in ("launcher", "worker-0", "worker-1")
    )
    assert set(qos.values()) == {"Guaranteed"}


def test_mpijob_below_the_expected_bandwidth_fails_naming_the_share(
    run_playbook, k8s_cluster, mpijob_namespace, tmp_path
):
    settings = mpijob_vars(
        k8s_cluster, mpijob_namespace, tmp_path / "runs",
        nccl_tests_line_rate={"gbit_per_nic": 400, "nic_count": 8}, nccl_tests_min_busbw_share=0.9,
    )  # fmt: skip
    run, _server = run_mpijob(run_playbook, k8s_cluster, mpijob_namespace, settings)
    assert run.rc != 0
    message = failure(run.output)
    assert "all_reduce:" in message and "338.82" in message, message


def test_an_mpijob_whose_workers_never_schedule_ends_at_its_deadline_naming_the_pods(
    run_playbook, k8s_cluster, mpijob_namespace, tmp_path
):
    settings = mpijob_vars(
        k8s_cluster, mpijob_namespace, tmp_path / "runs",
        nccl_tests_gpus_per_node=16,  # the simulated nodes have 8
        nccl_tests_timeout_s=20,
        # mpirun waits for workers that never come: the launcher keeps running.
        nccl_tests_pod_annotations={"gpuops.test/run-duration": "3600s"},
    )  # fmt: skip
    run, _server = run_mpijob(run_playbook, k8s_cluster, mpijob_namespace, settings)
    assert run.rc != 0
    message = failure(run.output)
    assert "all_reduce_perf exited with code 124 (stopped after 20 s)" in message, message
    assert "did not finish within 20 s" in message, message
    assert "-worker-0: Pending" in message and "Insufficient nvidia.com/gpu" in message, message
    assert "-launcher: Running" in message, message

"""dataset_staging's wait for its Job (gpuops.training.training_job_wait), against the harness's real
API server, Job controller and scheduler, kwok running the pod:

- a dataset claim no volume can bind leaves the staging pod unschedulable: the run ends at
  dataset_staging_stuck_timeout, not at the Job's deadline, naming the pod, the scheduler's reason
  and the remedy, and the Job is removed;
- a claim bound to a volume: the pod runs and completes, its log (served by the harness: the
  stager's report line, as gpuops_trainer.stage prints it) is read and reported, and the run
  passes - the path the real node's staging tests take, through the same wait.

Both runs are launched at once, each in its namespace (module-scoped).
"""

from __future__ import annotations

import json
import re
import secrets
import threading

import pytest

pytestmark = pytest.mark.slow

STUCK_S = 10
REPORT = {
    "event": "stage",
    "files": 3,
    "copied_files": 3,
    "copied_bytes": 4096,
    "resumed_files": 0,
    "redone_files": 0,
    "skipped_files": 0,
    "skipped_bytes": 0,
    "missing": [],
    "changed": True,
}
STAGER_LOG = "gpuops-stage: 3/3 files: 3 copied\n%s\n" % json.dumps(REPORT)


def claim(namespace, volume=None):
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if volume:
        spec.update(storageClassName="manual", volumeName=volume)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "dataset", "namespace": namespace},
        "spec": spec,
    }


def volume(name, namespace, path):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual",
            "hostPath": {"path": str(path)},
            "claimRef": {"namespace": namespace, "name": "dataset"},
        },
    }


class StagerLogs(threading.Thread):
    """Serve the stager's output as the log of every pod of the namespace, as pods appear."""

    def __init__(self, cluster, namespace):
        super().__init__(daemon=True)
        self.cluster, self.namespace = cluster, namespace
        self.served, self.errors = set(), []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            try:
                listing = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-o", "json", check=False)
                for pod in json.loads(listing.stdout)["items"] if listing.returncode == 0 else []:
                    name = pod["metadata"]["name"]
                    if name not in self.served:
                        self.cluster.serve_pod_log(self.namespace, name, STAGER_LOG)
                        self.served.add(name)
            except Exception as error:  # the test reports it
                self.errors.append(repr(error))
            self._halt.wait(0.3)

    def stop(self):
        self._halt.set()
        self.join(timeout=10)


@pytest.fixture(scope="module")
def staged(k8s_cluster, run_role, tmp_path_factory):
    runs = {}
    for name in ("unbound", "bound"):
        namespace = "dsw-%s" % secrets.token_hex(3)
        k8s_cluster.kubectl("create", "namespace", namespace)
        k8s_cluster.kubectl(
            "wait", "--for=create", "--timeout=30s", "-n", namespace, "serviceaccount/default"
        )
        if name == "bound":
            pv = "%s-dataset" % namespace
            k8s_cluster.apply(volume(pv, namespace, tmp_path_factory.mktemp("dataset")), claim(namespace, pv))
        else:
            k8s_cluster.apply(claim(namespace))
        runs[name] = {"namespace": namespace}
    logs = StagerLogs(k8s_cluster, runs["bound"]["namespace"])
    logs.start()

    def stage(name):
        runs[name]["run"] = run_role(
            "dataset_staging",
            {
                "dataset_staging_kubeconfig": str(k8s_cluster.kubeconfig),
                "dataset_staging_namespace": runs[name]["namespace"],
                "dataset_staging_image": "gpuops-trainer:test",
                "dataset_staging_url": "http://datasets.invalid/coco/",
                "dataset_staging_subdir": "coco",
                "dataset_staging_timeout_s": 300,
                "dataset_staging_poll_interval_s": 1,
                "dataset_staging_stuck_timeout": STUCK_S,
            },
        )

    threads = [threading.Thread(target=stage, args=(name,)) for name in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    logs.stop()
    runs["bound"]["log_errors"] = logs.errors
    yield runs
    for entry in runs.values():
        k8s_cluster.kubectl("delete", "namespace", entry["namespace"], "--wait=false", check=False)
        k8s_cluster.kubectl(
            "delete", "persistentvolume", "%s-dataset" % entry["namespace"], "--wait=false", check=False
        )


def flat(run) -> str:
    return " ".join(run.output.split())


def test_a_claim_no_volume_binds_ends_the_staging_at_the_stuck_time_naming_the_pod_and_the_remedy(
    k8s_cluster, staged
):
    entry = staged["unbound"]
    run, namespace = entry["run"], entry["namespace"]
    assert run.rc != 0, run
    output = flat(run)
    assert (
        "Staging into %s/dataset failed (Job %s/dataset-staging is stuck: it has not gone on for "
        % (
            namespace,
            namespace,
        )
        in output
    ), output
    stuck_for = int(re.search(r"it has not gone on for (\d+) s \(stuck_timeout %d s\)" % STUCK_S, output)[1])
    assert STUCK_S <= stuck_for < STUCK_S + 30, output
    assert "did not finish within" not in output
    assert re.search(
        r"pod %s/dataset-staging-[a-z0-9]+: not scheduled for \d+ s \(Unschedulable: " % namespace, output
    )
    assert "unbound immediate PersistentVolumeClaims" in output, output
    assert "to go on, bind the PersistentVolumeClaims the pods mount to volumes the nodes can reach" in output
    assert "no log: the pod did not start" in output, output[-1500:]
    # The Job is removed: it does not stage later, unwatched.
    jobs = json.loads(k8s_cluster.kubectl("get", "jobs", "-n", namespace, "-o", "json").stdout)["items"]
    assert [job["metadata"]["name"] for job in jobs if not job["metadata"].get("deletionTimestamp")] == []


def test_a_job_that_completes_is_waited_for_and_its_report_read(staged):
    entry = staged["bound"]
    assert entry["log_errors"] == []
    run = entry["run"]
    assert run.rc == 0, run.output[-4000:]
    output = flat(run)
    assert (
        "%s/dataset:/coco: 3 file(s) copied (4096 bytes, 0 resumed, 0 redone), 0 already there (0 bytes), "
        "of 3" % entry["namespace"] in output
    ), output
    assert "is stuck" not in output


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            -1,
            "dataset_staging_stuck_timeout must be an integer of at least 0 (seconds; 0 waits to the "
            "deadline), got -1",
        ),
        # The argument spec's own check (type int).
        (
            "10m",
            "argument 'dataset_staging_stuck_timeout' is of type str and we were unable to convert to int",
        ),
    ],
    ids=["negative", "not-an-integer"],
)
def test_a_stuck_time_that_is_not_seconds_fails_before_anything_is_created(
    k8s_cluster, run_role, value, message
):
    run = run_role(
        "dataset_staging",
        {
            "dataset_staging_kubeconfig": str(k8s_cluster.kubeconfig),
            "dataset_staging_namespace": "dsw-never-created",
            "dataset_staging_image": "gpuops-trainer:test",
            "dataset_staging_url": "http://datasets.invalid/coco/",
            "dataset_staging_stuck_timeout": value,
        },
    )
    assert run.rc != 0, run
    output = flat(run)
    assert message in output, output
    assert "Look up the PVC" not in output and "Start the staging Job" not in output

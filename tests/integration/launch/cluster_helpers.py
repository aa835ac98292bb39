"""Helpers that play the parts of the cluster the harness does not run.

- :class:`PodLogServer` serves each pod of a run, as soon as it appears, the log its node
  would have written (kwok's pods run nothing).
- :class:`FakeTrainerController` stands in for the Kubeflow Trainer v2 controller, which the
  harness does not run (it installs the TrainJob and TrainingRuntime CRDs only): for a
  TrainJob that references a namespaced TrainingRuntime it creates the Indexed Job the
  runtime's ``node`` replicated job describes (kwok completes pods owned by a Job), with the
  ``PET_*`` variables the controller's torch plugin sets, and marks the TrainJob Complete or
  Failed when that Job ends. It does no more than that: JobSet, gang scheduling and the
  controller's validation are not simulated.
- :func:`create_launch_namespace` and :func:`create_checkpoint_pvc` make what a launch needs (the
  fixtures of conftest.py, and module-scoped runs that share one namespace per scenario).
"""

from __future__ import annotations

import json
import pathlib
import secrets
import threading
import time
from datetime import datetime, timezone

from fleet import COMPLETION_INDEX, node_index  # tests/harness: one reading of a pod's index

# Real NCCL logs people published (see its README.md and INDEX.jsonl).
REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
NCCL_FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures" / "nccl" / "published"


def nccl_lines_by_host(path):
    """The NCCL log's lines per host (NCCL's `host:pid:tid` prefix), in the order the hosts
    first appear; lines without a host prefix go with the first host."""
    hosts = {}
    order = []
    loose = []
    for line in pathlib.Path(path).read_text().splitlines(keepends=True):
        head = line.split(":", 1)[0]
        if ":" in line and head and " " not in head and line.split(":")[1].strip().isdigit():
            if head not in hosts:
                hosts[head] = []
                order.append(head)
            hosts[head].append(line)
        else:
            (hosts[order[0]] if order else loose).append(line)
    result = ["".join(hosts[host]) for host in order]
    if loose:
        result[0] = "".join(loose) + result[0]
    return result


def create_launch_namespace(cluster):
    """A fresh namespace with a short name: an Indexed Job's host FQDN must fit 64 characters."""
    name = "gl-%s" % secrets.token_hex(3)
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("wait", "--for=create", "--timeout=30s", "-n", name, "serviceaccount/default")
    return name


def delete_launch_namespace(cluster, name):
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    cluster.kubectl("delete", "persistentvolume", "%s-checkpoints" % name, "--wait=false", check=False)


def create_checkpoint_pvc(cluster, launch_namespace, path):
    """A bound PVC named "checkpoints" in the namespace (a hostPath PV at ``path``)."""
    volume = "%s-checkpoints" % launch_namespace
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "manual",
                "hostPath": {"path": str(path)},
                "claimRef": {"namespace": launch_namespace, "name": "checkpoints"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": launch_namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "manual",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    cluster.kubectl(
        "wait",
        "--for=jsonpath={.status.phase}=Bound",
        "--timeout=60s",
        "-n",
        launch_namespace,
        "pvc/checkpoints",
    )
    return "checkpoints"


class PodLogServer(threading.Thread):
    """Serve ``logs[index_of(pod)]`` as the log of every pod of the namespace, as pods appear
    (``index_of`` is :func:`node_index` unless given; pods it gives None are left alone)."""

    def __init__(self, cluster, namespace, logs, interval=0.3, index_of=node_index):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.namespace = namespace
        self.logs = logs
        self.interval = interval
        self.index_of = index_of
        self.served = {}
        self.errors = []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            try:
                listing = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-o", "json", check=False)
                pods = json.loads(listing.stdout).get("items", []) if listing.returncode == 0 else []
                for pod in pods:
                    name = pod["metadata"]["name"]
                    index = self.index_of(pod)
                    if name in self.served or index is None or index not in self.logs:
                        continue
                    self.cluster.serve_pod_log(self.namespace, name, self.logs[index])
                    self.served[name] = index
            except Exception as error:  # keep serving; the test reports what went wrong
                self.errors.append(repr(error))
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join(timeout=10)


def _now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeTrainerController(threading.Thread):
    """Turn each TrainJob of the namespace into an Indexed Job and report its end (see module doc)."""

    def __init__(self, cluster, namespace, interval=0.5):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.namespace = namespace
        self.interval = interval
        self.jobs = {}
        self.errors = []
        self._halt = threading.Event()

    def _get(self, *args):
        result = self.cluster.kubectl("get", *args, "-n", self.namespace, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def run(self):
        while not self._halt.is_set():
            try:
                for trainjob in (self._get("trainjobs.trainer.kubeflow.org") or {}).get("items", []):
                    name = trainjob["metadata"]["name"]
                    if name not in self.jobs:
                        self._create_job(trainjob)
                    else:
                        self._report(trainjob)
            except Exception as error:  # keep going; the test reports what went wrong
                self.errors.append(repr(error))
            self._halt.wait(self.interval)

    def _create_job(self, trainjob):
        name = trainjob["metadata"]["name"]
        ref = trainjob["spec"]["runtimeRef"]
        runtime = self._get("trainingruntimes.trainer.kubeflow.org", ref["name"])
        replicated = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
        job_spec = json.loads(json.dumps(replicated["template"]["spec"]))
        nodes = trainjob["spec"].get("trainer", {}).get("numNodes") or runtime["spec"]["mlPolicy"]["numNodes"]
        nproc = runtime["spec"]["mlPolicy"]["torch"]["numProcPerNode"]
        container = job_spec["template"]["spec"]["containers"][0]
        container.setdefault("env", []).extend(
            [
                {"name": "PET_NNODES", "value": str(nodes)},
                {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                {
                    "name": "PET_NODE_RANK",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['%s']" % COMPLETION_INDEX}},
                },
                {"name": "PET_MASTER_ADDR", "value": "%s-node-0-0.%s" % (name, name)},
                {"name": "PET_MASTER_PORT", "value": "29500"},
            ]
        )
        job_name = "%s-node-0" % name
        job_spec.update({"completionMode": "Indexed", "completions": nodes, "parallelism": nodes})
        job_spec["template"]["spec"]["subdomain"] = name
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name,
                "namespace": self.namespace,
                "labels": dict(trainjob["spec"].get("labels") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": trainjob["apiVersion"],
                        "kind": "TrainJob",
                        "name": name,
                        "uid": trainjob["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": job_spec,
        }
        self.cluster.apply(job)
        self.jobs[name] = job_name

    def _report(self, trainjob):
        conditions = {
            c["type"] for c in trainjob.get("status", {}).get("conditions", []) if c["status"] == "True"
        }
        if conditions & {"Complete", "Failed"}:
            return
        job = self._get("job", self.jobs[trainjob["metadata"]["name"]])
        if job is None:
            return
        done = {c["type"]: c for c in job.get("status", {}).get("conditions", []) if c["status"] == "True"}
        for job_type, trainjob_type, reason in (
            ("Complete", "Complete", "JobsCompleted"),
            ("Failed", "Failed", "JobsFailed"),
        ):
            if job_type in done:
                status = {
                    "conditions": [
                        {
                            "type": trainjob_type,
                            "status": "True",
                            "reason": reason,
                            "message": "%s (fake Trainer controller of the tests)"
                            % (done[job_type].get("message") or job_type),
                            "lastTransitionTime": _now(),
                        }
                    ]
                }
                self.cluster.kubectl(
                    "patch",
                    "trainjobs.trainer.kubeflow.org",
                    trainjob["metadata"]["name"],
                    "-n",
                    self.namespace,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    json.dumps({"status": status}),
                )
                return

    def stop(self):
        self._halt.set()
        self.join(timeout=10)


def wait_for(predicate, timeout=30, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()

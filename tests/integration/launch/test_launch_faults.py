"""Launcher faults against the harness: a job that hangs and a pod that crash-loops.

Each run must end by its own deadline (training_job_timeout_s), with a message that names
the pods and the state they were in, and stop the workload; no launcher waits forever.
(A pod that never schedules and a pod that fails are in test_launch_kubernetes.py.)
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from cluster_helpers import wait_for
from test_launch_kubernetes import INVENTORY, PLAYBOOK, get_json, launch_vars, only_run_dir

DEADLINE_S = 20


def one_line(output):
    return " ".join(output.split())


def failure(output):
    """The play's failure message (what an operator reads), on one line."""
    return one_line(output).rpartition("FAILED! =>")[2].partition(" PLAY RECAP")[0]


@pytest.mark.parametrize("launcher", ["indexed_job", "pytorchjob"])
def test_a_job_that_hangs_ends_at_its_deadline_naming_the_running_pods(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, tmp_path, launcher
):
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        tmp_path / "runs",
        launcher,
        training_job_timeout_s=DEADLINE_S,
        # Running for an hour: a training process stuck in a collective looks like this.
        training_job_pod_annotations={"gpuops.test/run-duration": "3600s"},
    )
    run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=600)
    assert run.rc != 0, run
    output = one_line(run.output)
    assert "did not finish within %d s" % DEADLINE_S in output, output
    names = sorted(
        pod["metadata"]["name"] for pod in get_json(k8s_cluster, "pods", "-n", launch_namespace)["items"]
    )
    unfinished = output.split("unfinished pods: ", 1)[1]
    # Every pod of the run is named with its phase (pods that are already being deleted included).
    for name in names:
        assert "%s: Running" % name in unfinished, (name, unfinished)
    # The workload was stopped so that it does not hold its GPUs.
    kind = "jobs" if launcher == "indexed_job" else "pytorchjobs"
    assert wait_for(lambda: not get_json(k8s_cluster, kind, "-n", launch_namespace)["items"], timeout=60)
    assert "Running" in (only_run_dir(tmp_path / "runs") / "launcher.log").read_text()


class NamespacePoller(threading.Thread):
    """Calls ``poll()`` every ``every`` seconds until stopped, keeping what went wrong in
    ``errors`` (the test reports them) instead of ending."""

    def __init__(self, cluster, namespace, every):
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.every = cluster, namespace, every
        self.errors = []
        self._halt = threading.Event()

    def poll(self):
        raise NotImplementedError

    def run(self):
        while not self._halt.is_set():
            try:
                self.poll()
            except Exception as error:  # keep going; the test reports what went wrong
                self.errors.append(repr(error))
            self._halt.wait(self.every)

    def stop(self):
        self._halt.set()
        self.join(timeout=10)


class CrashLooper(NamespacePoller):
    """Plays the kubelet of crash-looping containers: once a pod runs, its status says that
    its container keeps failing, one more restart every ``every`` seconds."""

    def __init__(self, cluster, namespace, every=2.0):
        super().__init__(cluster, namespace, every)
        self.restarts = {}

    def poll(self):
        for pod in get_json(self.cluster, "pods", "-n", self.namespace)["items"]:
            name = pod["metadata"]["name"]
            if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            restarts = self.restarts.get(name, 0) + 1
            patched = self.cluster.kubectl(
                "patch", "pod", name, "-n", self.namespace, "--subresource=status", "--type=merge",
                "-p", json.dumps(crash_loop_status(pod, restarts)), check=False,
            )  # fmt: skip
            if patched.returncode == 0:
                self.restarts[name] = restarts
                self.back_off_event(pod, restarts)
            elif "NotFound" not in patched.stderr:  # deleted when the run stopped it: fine
                self.errors.append(patched.stderr)

    def back_off_event(self, pod, restarts):
        """The kubelet's Warning Event of a crash loop (pkg/kubelet/kuberuntime), counted."""
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "%s.%d" % (name, restarts), "namespace": self.namespace},
            "type": "Warning",
            "reason": "BackOff",
            "message": "Back-off restarting failed container pytorch in pod %s_%s(%s)"
            % (name, self.namespace, uid),
            "count": restarts,
            "firstTimestamp": pod["status"].get("startTime") or now,
            "lastTimestamp": now,
            "involvedObject": {"kind": "Pod", "name": name, "namespace": self.namespace, "uid": uid},
            "source": {"component": "kubelet"},
        }
        created = self.cluster.kubectl("create", "-f", "-", input=json.dumps(event), check=False)
        if created.returncode != 0:
            self.errors.append(created.stderr)


def crash_loop_status(pod, restarts):
    containers = [
        {
            "name": container["name"],
            "image": container["image"],
            "ready": False,
            "started": False,
            "restartCount": restarts,
            "state": {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 40s restarting failed container=%s" % container["name"],
                }
            },
            "lastState": {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": pod["status"].get("startTime"),
                    "finishedAt": pod["status"].get("startTime"),
                }
            },
        }
        for container in pod["spec"]["containers"]
    ]
    ready = [
        {"type": kind, "status": "False", "reason": "ContainersNotReady"}
        for kind in ("Ready", "ContainersReady")
    ]
    return {"status": {"containerStatuses": containers, "conditions": ready}}


@pytest.mark.parametrize(
    ("backoff_limit", "ends_with"),
    [
        # The operator fails the job once the restarts pass backoffLimit, and deletes its pods:
        # the message still names them, as the wait last saw them.
        (3, "failed (PyTorchJobFailed"),
        # Restarts within the limit: the run's own deadline ends it.
        (1000, "did not finish within %d s" % DEADLINE_S),
    ],
)
def test_crash_looping_pods_end_the_run_naming_them_and_their_state(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, tmp_path, backoff_limit, ends_with
):
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        tmp_path / "runs",
        "pytorchjob",
        training_job_timeout_s=DEADLINE_S,
        training_job_backoff_limit=backoff_limit,
        training_job_pod_annotations={"gpuops.test/run-duration": "3600s"},
    )
    looper = CrashLooper(k8s_cluster, launch_namespace)
    looper.start()
    try:
        run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=600)
    finally:
        looper.stop()
    assert looper.errors == []
    assert looper.restarts, "no pod ever ran"
    assert run.rc != 0, run
    output = failure(run.output)
    assert ends_with in output, output
    for name in looper.restarts:
        assert name + ": " in output, (name, output)
        # The pod's own description runs to the next pod's name: its state as the wait saw it,
        # or, when the operator deleted the pods before the wait's first read (a loaded
        # machine), the kubelet's last Event about it.
        described = re.split(r"; (?=rn-)", output[output.index(name + ": ") :])[0]
        assert (
            "CrashLoopBackOff: container pytorch: back-off 40s restarting failed container=pytorch "
            "(last exit code 1, Error)"
            in described
            or "BackOff: Back-off restarting failed container pytorch in pod %s_" % name in described
        ), (name, output)


class ConditionWatcher(NamespacePoller):
    """Records every condition type the jobs (``resource``) of a namespace show while the run
    goes on, and the uids of their pods (a pod deleted and made again gets a new uid)."""

    def __init__(self, cluster, namespace, resource="pytorchjobs", every=0.5):
        super().__init__(cluster, namespace, every)
        self.resource = resource
        self.conditions, self.pod_uids = set(), set()

    def poll(self):
        for job in get_json(self.cluster, self.resource, "-n", self.namespace)["items"]:
            for condition in job.get("status", {}).get("conditions") or []:
                if condition.get("status") == "True":
                    self.conditions.add(condition["type"])
        for pod in get_json(self.cluster, "pods", "-n", self.namespace)["items"]:
            self.pod_uids.add(pod["metadata"]["uid"])


# The ExitCode policy of each launcher that has one: the role variable, the resource whose
# conditions are watched, and how the job reads when a permanent error fails it.
EXIT_CODE_POLICIES = {
    "pytorchjob": ("training_job_pytorchjob_restart_policy", "pytorchjobs", "failed (PyTorchJobFailed"),
    # The Training Operator's semantics through the Job controller's podFailurePolicy.
    "indexed_job": ("training_job_indexed_job_restart_policy", "jobs", "failed (PodFailurePolicy"),
}


@pytest.mark.parametrize("launcher", sorted(EXIT_CODE_POLICIES))
@pytest.mark.parametrize(("exit_code", "retried"), [("3", False), ("137", True)])
def test_the_exit_code_restart_policy_retries_a_kill_and_not_a_permanent_error(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, tmp_path, launcher, exit_code, retried
):
    # The pods' command is gpuops_trainer.launch, which exits with the rank's own code: 3 is
    # the trainer's data error (permanent), 137 a SIGKILL or an OOM kill (retryable).
    variable, resource, failed_permanently = EXIT_CODE_POLICIES[launcher]
    deadline = 2 * DEADLINE_S
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        tmp_path / "runs",
        launcher,
        # Room for the controller to recreate the killed pods at least once on a loaded machine.
        training_job_timeout_s=deadline,
        training_job_backoff_limit=6,
        training_job_pod_annotations={
            "gpuops.test/fail": "true",
            "gpuops.test/exit-code": exit_code,
            "gpuops.test/run-duration": "1s",
        },
        **{variable: "ExitCode"},
    )
    watcher = ConditionWatcher(k8s_cluster, launch_namespace, resource=resource)
    watcher.start()
    try:
        run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=600)
    finally:
        watcher.stop()
    assert watcher.errors == []
    assert run.rc != 0, run
    output = failure(run.output)
    if retried:
        # The killed pods were deleted and made again, until the run's deadline.
        assert len(watcher.pod_uids) > 2, watcher.pod_uids
        assert "did not finish within %d s" % deadline in output, output
        assert failed_permanently not in output, output
        if launcher == "pytorchjob":
            assert "Restarting" in watcher.conditions, watcher.conditions
    else:
        # A permanent error fails the job at once, naming the code: no pod is made again.
        assert "exited with code %s (Error)" % exit_code in output, output
        assert failed_permanently in output, output
        assert "Restarting" not in watcher.conditions, watcher.conditions
        assert "Failed" in watcher.conditions, watcher.conditions
        assert len(watcher.pod_uids) == 2, watcher.pod_uids

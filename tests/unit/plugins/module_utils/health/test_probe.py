"""The probe Job of a Kubernetes node (health.probe): its manifest, its container's command run
here as the pod runs it, the result read from a log, and the words for a node without one. The
Jobs on a real API server: tests/integration/cluster/test_node_health.py."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from ansible_collections.gpuops.training.plugins.module_utils import k8s_names
from ansible_collections.gpuops.training.plugins.module_utils.health import probe

REPO_ROOT = pathlib.Path(__file__).resolve().parents[5]
DEV_COLLECTIONS = REPO_ROOT / ".build" / "dev-collections"

PARAMS = {
    "run_id": "health-20261201T060000Z",
    "namespace": "gpuops-node-health",
    "image": "registry.example.com/ml/gpuops-training-ee:0.1.0",
    "image_pull_policy": "IfNotPresent",
    "image_pull_secrets": [],
    "nodes": [],
    "node_selector": "nvidia.com/gpu.present=true",
    "checks": ["nvidia_smi", "kernel_log", "infiniband"],
    "expected_gpus": 8,
    "expected_ib_rate_gbps": 400.0,
    "python": "python3",
    "collections_path": "/usr/share/ansible/collections",
    "service_account": "",
    "runtime_class_name": "",
    "cpu": "100m",
    "memory": "512Mi",
    "pod_annotations": {},
    "timeout": 600,
    "poll_interval": 2,
    "keep_jobs": False,
}


def params(**changes):
    return dict(PARAMS, **changes)


def test_the_job_is_bound_to_its_node_and_tolerates_every_taint():
    job = probe.probe_job("gpu-07.rack-3.example.com", params())
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "gpu-07.rack-3.example.com"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["hostPID"] is True and spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["ttlSecondsAfterFinished"] == probe.TTL_AFTER_FINISHED_S
    assert job["metadata"]["labels"][probe.RUN_LABEL] == "health-20261201T060000Z"
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        probe.NODE_ANNOTATION: "gpu-07.rack-3.example.com"
    }
    (container,) = spec["containers"]
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "512Mi"},
        "limits": {"memory": "512Mi"},
    }
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert env["PYTHONPATH"] == "/usr/share/ansible/collections"


def test_the_host_paths_are_read_only_and_only_those_the_checks_need():
    def mounts(checks):
        job = probe.probe_job("n", params(checks=checks))
        (container,) = job["spec"]["template"]["spec"]["containers"]
        volumes = {
            volume["name"]: volume["hostPath"] for volume in job["spec"]["template"]["spec"]["volumes"]
        }
        assert all(mount["readOnly"] for mount in container["volumeMounts"])
        return {mount["mountPath"]: volumes[mount["name"]]["path"] for mount in container["volumeMounts"]}

    assert mounts(["nvidia_smi"]) == {"/dev": "/dev"}
    assert mounts(["infiniband"]) == {"/dev": "/dev", "/host/sys": "/sys"}
    assert mounts(["kernel_log"]) == {
        "/dev": "/dev",
        "/var/log": "/var/log",
        "/etc/machine-id": "/etc/machine-id",
    }


def test_the_container_runs_the_collections_module_with_its_arguments_as_json():
    (container,) = probe.probe_job("n", params())["spec"]["template"]["spec"]["containers"]
    python, flag, module, arguments = container["command"]
    assert (python, flag, module) == (
        "python3",
        "-m",
        "ansible_collections.gpuops.training.plugins.modules.node_health_info",
    )
    assert json.loads(arguments) == {
        "ANSIBLE_MODULE_ARGS": {
            "checks": ["nvidia_smi", "kernel_log", "infiniband"],
            "sysfs_root": "/host/sys",
            "expected_gpus": 8,
            "expected_ib_rate_gbps": 400.0,
        }
    }
    no_ib = json.loads(
        probe.probe_job("n", params(checks=["kernel_log"], expected_gpus=0))["spec"]["template"]["spec"][
            "containers"
        ][0]["command"][3]
    )
    assert no_ib == {"ANSIBLE_MODULE_ARGS": {"checks": ["kernel_log"], "expected_ib_rate_gbps": 400.0}}


def run_container_here(checks):
    """The probe container's command and environment, run on this machine with this checkout as
    the image's collection: what the pod prints."""
    (container,) = probe.probe_job(
        "n", params(checks=checks, python=sys.executable, collections_path=str(DEV_COLLECTIONS))
    )["spec"]["template"]["spec"]["containers"]
    env = dict(os.environ, **{item["name"]: item["value"] for item in container["env"]})
    return subprocess.run(
        container["command"], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_containers_command_prints_a_result_the_log_reader_takes():
    completed = run_container_here(["kernel_log"])
    result = probe.result_of_log(completed.stderr + completed.stdout)
    assert completed.returncode == 0, completed.stderr
    assert result["verdict"] in ("healthy", "isolate", "reboot", "monitor")
    # Here the kernel log is read, or not run with why: never silently passed.
    assert result["sources"] or result["not_run"][0]["check"] == "kernel_log"
    assert "invocation" not in result


def test_a_module_failure_in_the_pod_is_named_as_such():
    # /host/sys is the host's /sys in the pod; here there is none.
    completed = run_container_here(["infiniband"])
    assert completed.returncode == 1
    entry = probe.outcome("n", "job", "failed", "", {"metadata": {"name": "p"}}, completed.stdout, 600)
    assert entry["result"] is None
    assert entry["error"] == "node_health_info failed on the node: sysfs_root: '/host/sys' is not a directory"


def test_job_names_are_dns_labels_unique_per_run_and_node():
    long_node = "gpu-node-" + "x" * 240 + ".example.com"
    names = {
        probe.job_name(run, node) for run in ("health-1", "health-2") for node in ("a", "A.B", long_node)
    }
    assert len(names) == 6
    assert all(k8s_names.dns_label_problem(name) is None and len(name) <= 57 for name in names)


def test_the_result_is_the_last_json_line_with_a_verdict():
    log = "\n".join(
        [
            "[WARNING]: something on stderr",
            '{"verdict": "reboot", "findings": [], "invocation": {"module_args": {}}}',
            '{"not": "a result"}',
            "Traceback-like noise",
        ]
    )
    assert probe.result_of_log(log) == {"verdict": "reboot", "findings": []}
    assert probe.result_of_log('{"failed": true, "msg": "boom"}') == {"failed": True, "msg": "boom"}
    assert probe.result_of_log("{broken json\n") is None and probe.result_of_log("") is None


POD_PULLING = {
    "metadata": {"name": "health-n-1-x"},
    "status": {
        "phase": "Pending",
        "containerStatuses": [
            {"state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "ee:1"'}}}
        ],
    },
}


@pytest.mark.parametrize(
    ("state", "message", "pod", "log", "error"),
    [
        (None, "", POD_PULLING, None,
         'the probe did not end within 600 s (pod Pending, ImagePullBackOff: Back-off pulling image "ee:1")'),
        (None, "", None, None, "the probe did not end within 600 s (pod not created: no pod yet)"),
        ("failed", "DeadlineExceeded: Job was active longer than specified deadline", None, None,
         "the probe's Job failed without a pod: DeadlineExceeded: Job was active longer than specified "
         "deadline"),
        ("succeeded", "", {"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}, "",
         "the probe ended but its log holds no node_health_info result (the log is empty)"),
    ],
)  # fmt: skip
def test_a_node_without_a_result_says_why(state, message, pod, log, error):
    entry = probe.outcome("n", "job", state, message, pod, log, 600)
    assert entry["result"] is None and entry["error"] == error


def test_a_node_that_is_not_ready_gets_no_job():
    node = {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                       "message": "Kubelet stopped posting node status."}]}}  # fmt: skip
    assert probe.ready_problem(node) == (
        "the node is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.): no probe ran"
    )
    assert probe.ready_problem({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}) is None


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"run_id": "health run"}, "run_id"),
        ({"run_id": ""}, "run_id"),
        ({"namespace": "Health"}, "namespace"),
        ({"image": "a b"}, "image"),
        ({"nodes": ["ok", "Not_A_Node"]}, "nodes[1]"),
        ({"checks": ["gpu"]}, "checks"),
        ({"checks": []}, "checks"),
        ({"expected_gpus": -1}, "expected_gpus"),
        ({"expected_ib_rate_gbps": float("nan")}, "expected_ib_rate_gbps"),
        ({"cpu": "lots"}, "cpu"),
        ({"memory": "0"}, "memory"),
        ({"collections_path": "relative/path"}, "collections_path"),
        ({"pod_annotations": {"bad key!": "x"}}, "pod_annotations"),
        ({"pod_annotations": {"ok": 1}}, "pod_annotations"),
        ({"timeout": 0}, "timeout"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"service_account": "Bad"}, "service_account"),
    ],
)
def test_each_setting_problem_names_its_option(changes, named):
    problems = probe.settings_problems(params(**changes))
    assert len(problems) == 1 and problems[0].startswith(named), problems


def test_the_defaults_are_valid():
    assert probe.settings_problems(params()) == []

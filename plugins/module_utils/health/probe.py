# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run node_health_info on Kubernetes nodes: a privileged Job per node, its log read, the Job removed.

Each Job's pod is bound to its node (``nodeName``: no scheduler, no room to find), tolerates
every taint (a cordoned or quarantined node is checked too), runs with the host's PID
namespace, the host's ``/dev`` read-only (the GPUs' device nodes, ``/dev/kmsg`` for dmesg) and,
where the checks need them, the host's ``/sys`` at ``/host/sys`` (the InfiniBand ports) and
``/var/log`` with ``/etc/machine-id`` (the host's journal). The container runs the collection's
module itself, ``python -m ansible_collections.gpuops.training.plugins.modules.node_health_info``
with its arguments as JSON, from an image that has the collection's module runtime (the
execution environment of ``execution-environment.yml``): its one JSON line on stdout, the
pod's log, is the node's result.

A node without a result says why (not Ready, the API server refused its Job, the pod did not
start or did not end within the deadline, the module failed, the log holds no result); it is
never a healthy node.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuops.training.plugins.module_utils import k8s_names
from ansible_collections.gpuops.training.plugins.module_utils.health.node import CHECKS
from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    MAX_SECONDS,
    ApiException,
    client,
    connection_error_message,
    poll,
)
from ansible_collections.gpuops.training.plugins.module_utils.quantities import QuantityError, parse_quantity

MODULE = "ansible_collections.gpuops.training.plugins.modules.node_health_info"
CONTAINER = "health"
RUN_LABEL = "gpuops.training/health-run"
NODE_ANNOTATION = "gpuops.training/node"
LABELS = {"app.kubernetes.io/name": "gpuops-node-health", "app.kubernetes.io/managed-by": "gpuops-training"}
HOST_SYS = "/host/sys"
# The pod's log is read from its end: the result is the module's one JSON line, the last one.
TAIL_LINES = 50
# A finished Job's log read too early can come back short: read again this often, a second apart.
LOG_READS = 3
# A Job the play could not delete (the play stopped) is removed by the TTL controller.
TTL_AFTER_FINISHED_S = 600
READ_PARALLEL = 8
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
WAITING_REASONS = re.compile(r"Err|BackOff|Invalid|CreateContainer|RunContainer")


class ProbeError(Exception):
    """A setting or an API answer that stops the whole pass; the message names the option."""


class NoAnswer(Exception):
    """A call the API server did not answer (connection refused, TLS, DNS, a timeout)."""

    def __init__(self, what, error):
        super().__init__("%s: %s" % (what, error))
        self.what, self.error = what, error


def _call(what, function, *args):
    """``function(*args)``; an API status passes as ApiException, anything else as NoAnswer."""
    try:
        return function(*args)
    except ApiException:
        raise
    except Exception as error:  # the client raises urllib3's and other unrelated types here
        raise NoAnswer(what, error) from error


# ---- settings


def settings_problems(params):
    """Every problem of the module's settings, each naming its option; empty when usable."""
    problems = []
    problem = k8s_names.label_value_problem(params["run_id"])
    if problem or not params["run_id"]:
        problems.append("run_id %s" % (problem or "must not be empty"))
    problem = k8s_names.dns_label_problem(params["namespace"])
    if problem:
        problems.append("namespace %s" % problem)
    if not params["image"].strip() or re.search(r"\s", params["image"]):
        problems.append(
            "image must name an image with the collection's module runtime, got %r" % params["image"]
        )
    for index, name in enumerate(params["nodes"]):
        problem = k8s_names.dns_subdomain_problem(name)
        if problem:
            problems.append("nodes[%d] %s" % (index, problem))
    checks = params["checks"]
    if not checks or any(check not in CHECKS for check in checks):
        problems.append("checks must name some of %s, got %r" % (", ".join(CHECKS), checks))
    if params["expected_gpus"] < 0:
        problems.append("expected_gpus must be 0 (not checked) or more, got %d" % params["expected_gpus"])
    rate = params["expected_ib_rate_gbps"]
    if not (rate == 0 or 0 < rate < float("inf")):
        problems.append("expected_ib_rate_gbps must be 0 (not checked) or a rate in Gb/s, got %r" % rate)
    for option in ("cpu", "memory"):
        try:
            if parse_quantity(params[option], option) <= 0:
                problems.append("%s must be above 0, got %r" % (option, params[option]))
        except QuantityError as error:
            problems.append(str(error))
    for option in ("python", "collections_path"):
        if not params[option].strip() or "\x00" in params[option]:
            problems.append("%s must not be empty, got %r" % (option, params[option]))
    if not params["collections_path"].startswith("/"):
        problems.append(
            "collections_path must be an absolute path in the image, got %r" % params["collections_path"]
        )
    for option in ("service_account", "runtime_class_name"):
        if params[option]:
            problem = k8s_names.dns_subdomain_problem(params[option])
            if problem:
                problems.append("%s %s" % (option, problem))
    for index, name in enumerate(params["image_pull_secrets"]):
        problem = k8s_names.dns_subdomain_problem(name)
        if problem:
            problems.append("image_pull_secrets[%d] %s" % (index, problem))
    for key, value in params["pod_annotations"].items():
        problem = k8s_names.qualified_name_problem(key)
        if problem:
            problems.append("pod_annotations: key %r %s" % (key, problem))
        if not isinstance(value, str):
            problems.append("pod_annotations: the value of %r must be a string, got %r" % (key, value))
    if not 1 <= params["timeout"] <= MAX_SECONDS:
        problems.append("timeout must be from 1 to %d seconds, got %d" % (MAX_SECONDS, params["timeout"]))
    if not 1 <= params["poll_interval"] <= MAX_SECONDS:
        problems.append(
            "poll_interval must be from 1 to %d seconds, got %d" % (MAX_SECONDS, params["poll_interval"])
        )
    return problems


def module_args(params):
    """node_health_info's arguments in the pod."""
    args = {"checks": [check for check in CHECKS if check in params["checks"]], "sysfs_root": HOST_SYS}
    if params["expected_gpus"]:
        args["expected_gpus"] = params["expected_gpus"]
    if params["expected_ib_rate_gbps"]:
        args["expected_ib_rate_gbps"] = params["expected_ib_rate_gbps"]
    if "infiniband" not in args["checks"]:
        del args["sysfs_root"]
    return args


def job_name(run_id, node):
    """``health-<node, shortened>-<hash of run and node>``: a DNS label of at most 57 characters."""
    slug = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:40].strip("-") or "node"
    digest = hashlib.sha256(("%s/%s" % (run_id, node)).encode("utf-8")).hexdigest()[:8]
    return "health-%s-%s" % (slug, digest)


def _host_path(name, path, kind):
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def probe_job(node, params):
    """The Job that runs node_health_info on ``node``."""
    checks = params["checks"]
    labels = dict(LABELS, **{RUN_LABEL: params["run_id"]})
    volumes = [_host_path("host-dev", "/dev", "Directory")]
    mounts = [{"name": "host-dev", "mountPath": "/dev", "readOnly": True}]
    if "infiniband" in checks:
        volumes.append(_host_path("host-sys", "/sys", "Directory"))
        mounts.append({"name": "host-sys", "mountPath": HOST_SYS, "readOnly": True})
    if "kernel_log" in checks:
        # journalctl -k -b reads the host's persistent journal of this boot (the machine id
        # names its directory); without it, dmesg reads /dev/kmsg.
        volumes += [
            _host_path("host-log", "/var/log", "Directory"),
            _host_path("host-machine-id", "/etc/machine-id", "File"),
        ]
        mounts += [
            {"name": "host-log", "mountPath": "/var/log", "readOnly": True},
            {"name": "host-machine-id", "mountPath": "/etc/machine-id", "readOnly": True},
        ]
    resources = {"cpu": params["cpu"], "memory": params["memory"]}
    container = {
        "name": CONTAINER,
        "image": params["image"],
        "imagePullPolicy": params["image_pull_policy"],
        "command": [params["python"], "-m", MODULE, json.dumps({"ANSIBLE_MODULE_ARGS": module_args(params)})],
        "env": [
            {"name": "PYTHONPATH", "value": params["collections_path"]},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            # The NVIDIA container runtime mounts nvidia-smi and the driver's libraries.
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "resources": {"requests": resources, "limits": {"memory": params["memory"]}},
        "securityContext": {"privileged": True, "runAsUser": 0},
        "volumeMounts": mounts,
    }
    spec = {
        "nodeName": node,
        "restartPolicy": "Never",
        # nvidia-smi names the processes on the GPUs by their host PIDs.
        "hostPID": True,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
        "volumes": volumes,
    }
    if params["service_account"]:
        spec["serviceAccountName"] = params["service_account"]
    if params["runtime_class_name"]:
        spec["runtimeClassName"] = params["runtime_class_name"]
    if params["image_pull_secrets"]:
        spec["imagePullSecrets"] = [{"name": name} for name in params["image_pull_secrets"]]
    job_spec = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": params["timeout"],
        "template": {
            "metadata": {
                "labels": labels,
                "annotations": dict(params["pod_annotations"], **{NODE_ANNOTATION: node}),
            },
            "spec": spec,
        },
    }
    if not params["keep_jobs"]:
        job_spec["ttlSecondsAfterFinished"] = TTL_AFTER_FINISHED_S
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(params["run_id"], node),
            "namespace": params["namespace"],
            "labels": labels,
            "annotations": {NODE_ANNOTATION: node},
        },
        "spec": job_spec,
    }


# ---- the API calls (module-level, one each, so that the tests can serve them)


def _plain(response):
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _status_message(error):
    try:
        return json.loads(error.body or "{}").get("message") or ""
    except (TypeError, ValueError):
        return ""


def refused(what, error):
    """One line for an API error: what was asked, the status and the server's message."""
    message = _status_message(error)
    return "cannot %s: %s %s%s" % (what, error.status, error.reason, (": " + message) if message else "")


def list_nodes(api, selector):
    return (
        _plain(client.CoreV1Api(api).list_node(label_selector=selector, _preload_content=False)).get("items")
        or []
    )


def read_node(api, name):
    """The node, or None when there is none of that name."""
    try:
        return _plain(client.CoreV1Api(api).read_node(name, _preload_content=False))
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def read_namespace(api, name):
    """The namespace, or None when there is none of that name."""
    try:
        return _plain(client.CoreV1Api(api).read_namespace(name, _preload_content=False))
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def create_job(api, namespace, body):
    return _plain(client.BatchV1Api(api).create_namespaced_job(namespace, body, _preload_content=False))


def list_jobs(api, namespace, selector):
    response = client.BatchV1Api(api).list_namespaced_job(
        namespace, label_selector=selector, _preload_content=False
    )
    return _plain(response).get("items") or []


def list_pods(api, namespace, selector):
    response = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=selector, _preload_content=False
    )
    return _plain(response).get("items") or []


def read_log(api, namespace, pod, container):
    response = client.CoreV1Api(api).read_namespaced_pod_log(
        pod,
        namespace,
        container=container,
        tail_lines=TAIL_LINES,
        _preload_content=False,
        _request_timeout=60,
    )
    try:
        return response.data.decode("utf-8", errors="replace")
    finally:
        response.release_conn()


def delete_job(api, namespace, name):
    try:
        client.BatchV1Api(api).delete_namespaced_job(
            name, namespace, propagation_policy="Background", _preload_content=False
        ).release_conn()
    except ApiException as error:
        if error.status != 404:
            raise


# ---- judging what the API server holds


def ready_problem(node):
    """Why a node cannot run the probe now (not Ready), or None."""
    conditions = ((node.get("status") or {}).get("conditions")) or []
    ready = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
    if ready and ready.get("status") == "True":
        return None
    if not ready:
        return "the node reports no Ready condition: no probe ran"
    detail = ": ".join(part for part in (ready.get("reason"), ready.get("message")) if part)
    return "the node is not Ready (%s): no probe ran" % (detail or "status %s" % ready.get("status"))


def job_state(job):
    """``succeeded``, ``failed`` or None (still going), and the condition's message."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", condition.get("message") or ""
        if condition.get("type") == "Failed":
            return "failed", ": ".join(
                part for part in (condition.get("reason"), condition.get("message")) if part
            )
    return None, ""


def pod_state(pod):
    """The pod's phase and, for its container, why it waits or how it ended, in words."""
    status = pod.get("status") or {}
    words = [status.get("phase") or "Unknown"]
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if state.get("waiting"):
            words.append(
                "%s: %s"
                % (state["waiting"].get("reason") or "waiting", state["waiting"].get("message") or "")
            )
        elif state.get("terminated"):
            ended = state["terminated"]
            words.append(
                "exit code %s%s"
                % (ended.get("exitCode"), (" (%s)" % ended["reason"]) if ended.get("reason") else "")
            )
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            words.append(
                "%s: %s" % (condition.get("reason") or "not scheduled", condition.get("message") or "")
            )
    if status.get("reason"):
        words.append("%s: %s" % (status["reason"], status.get("message") or ""))
    return ", ".join(word.rstrip(": ") for word in words)


def result_of_log(text):
    """node_health_info's result in a log: the last line that is a JSON object with a verdict
    (or the module's failure, ``failed`` and ``msg``); None when there is none."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and ("verdict" in value or ("failed" in value and "msg" in value)):
            value.pop("invocation", None)
            return value
    return None


def _last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def outcome(node, job_name_, state, message, pod, log, timeout):
    """The node's entry: ``result`` (node_health_info's) or ``error`` (why there is none)."""
    entry = {
        "node": node,
        "job": job_name_,
        "pod": (pod or {}).get("metadata", {}).get("name"),
        "result": None,
        "error": None,
    }
    result = result_of_log(log) if log is not None else None
    if result is not None and "verdict" in result and state == "succeeded":
        entry["result"] = result
        return entry
    if result is not None and result.get("failed"):
        entry["error"] = "node_health_info failed on the node: %s" % result.get("msg")
    elif state is None:
        entry["error"] = "the probe did not end within %d s (pod %s)" % (
            timeout,
            pod_state(pod) if pod else "not created: %s" % (message or "no pod yet"),
        )
    elif pod is None:
        entry["error"] = "the probe's Job %s without a pod%s" % (state, (": " + message) if message else "")
    elif state == "failed":
        entry["error"] = "the probe failed (%s%s) and printed no result%s" % (
            pod_state(pod),
            ("; " + message) if message else "",
            ("; its last line: " + _last_line(log)) if _last_line(log) else "",
        )
    else:
        entry["error"] = "the probe ended but its log holds no node_health_info result%s" % (
            ("; its last line: " + _last_line(log)) if _last_line(log) else " (the log is empty)"
        )
    return entry


# ---- the pass


def select_nodes(api, params):
    """The nodes to check, as the API server holds them, by name."""
    if params["nodes"]:
        found = {}
        for name in params["nodes"]:
            node = _call("node %s" % name, read_node, api, name)
            if node is None:
                raise ProbeError("nodes: there is no node %s" % name)
            found[name] = node
        return found
    nodes = _call("the nodes", list_nodes, api, params["node_selector"])
    if not nodes:
        raise ProbeError(
            "node_selector: no node matches %r" % params["node_selector"]
            if params["node_selector"]
            else "node_selector: the cluster has no node"
        )
    return {node["metadata"]["name"]: node for node in nodes}


def _latest(pods):
    return max(
        pods, key=lambda pod: (pod["metadata"].get("creationTimestamp") or "", pod["metadata"]["name"])
    )


def run_probes(params, api, sleep=None):
    """Create a Job on every node to check, wait for them (to ``timeout``), read each pod's
    log and delete the Jobs (unless ``keep_jobs``). ``{nodes: [{node, result, error, job,
    pod}], created}``: one entry per node, by name."""
    sleep = sleep or time.sleep
    if _call("namespace %s" % params["namespace"], read_namespace, api, params["namespace"]) is None:
        raise ProbeError(
            "namespace: there is no namespace %s (the node_health role creates it)" % params["namespace"]
        )
    nodes = select_nodes(api, params)
    entries = {}
    jobs = {}
    for name in sorted(nodes):
        problem = ready_problem(nodes[name])
        if problem:
            entries[name] = {"node": name, "job": None, "pod": None, "result": None, "error": problem}
        else:
            jobs[name] = probe_job(name, params)
    created = []
    try:
        for name, job in jobs.items():
            try:
                _call("the probe Jobs", create_job, api, params["namespace"], job)
            except ApiException as error:
                entries[name] = {
                    "node": name, "job": None, "pod": None, "result": None,
                    "error": refused("create the probe Job %s" % job["metadata"]["name"], error),
                }  # fmt: skip
                continue
            created.append(name)
        if created:
            _wait_and_read(api, params, jobs, created, entries, sleep)
    finally:
        if not params["keep_jobs"]:
            for name in created:
                _call("the probe Jobs", delete_job, api, params["namespace"], jobs[name]["metadata"]["name"])
    return {
        "nodes": [entries[name] for name in sorted(entries)],
        "created": [jobs[name]["metadata"]["name"] for name in created],
    }


def _wait_and_read(api, params, jobs, created, entries, sleep):
    namespace = params["namespace"]
    selector = "%s=%s" % (RUN_LABEL, params["run_id"])
    wanted = {jobs[name]["metadata"]["name"]: name for name in created}
    seen = {}

    def judge():
        seen.clear()
        for job in _call("the probe Jobs", list_jobs, api, namespace, selector):
            if job["metadata"]["name"] in wanted:
                seen[job["metadata"]["name"]] = job
        return [{"done": job in seen and job_state(seen[job])[0] is not None} for job in wanted]

    poll(judge, params["timeout"], params["poll_interval"], pause=sleep)
    pods_by_job = {}
    for pod in _call("the probe pods", list_pods, api, namespace, selector):
        labels = pod["metadata"].get("labels") or {}
        owner = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if owner in wanted:
            pods_by_job.setdefault(owner, []).append(pod)

    def read(job):
        state, message = job_state(seen[job]) if job in seen else (None, "")
        pod = _latest(pods_by_job[job]) if pods_by_job.get(job) else None
        log = None
        if pod is not None and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Running"):
            for attempt in range(LOG_READS):
                try:
                    log = _call(
                        "the probe logs", read_log, api, namespace, pod["metadata"]["name"], CONTAINER
                    )
                except ApiException as error:
                    unread = refused("read the log of pod %s" % pod["metadata"]["name"], error)
                    log, message = None, "; ".join(part for part in (message, unread) if part)
                    break
                if state != "succeeded" or result_of_log(log) is not None or attempt == LOG_READS - 1:
                    break
                sleep(1)
        return outcome(wanted[job], job, state, message, pod, log, params["timeout"])

    with ThreadPoolExecutor(max_workers=max(1, min(READ_PARALLEL, len(wanted)))) as pool:
        for entry in pool.map(read, list(wanted)):
            entries[entry["node"]] = entry


def run_module(module, connect):
    """The node_health_jobs module: check the settings, run the pass, exit with every node's
    entry. The Jobs are removed (no change) unless ``keep_jobs``; check mode runs them too."""
    params = module.params
    problems = settings_problems(params)
    if problems:
        module.fail_json(msg="; ".join(problems))
    api = connect(module, pool_size=READ_PARALLEL)
    try:
        result = run_probes(params, api)
    except ProbeError as error:
        module.fail_json(msg=str(error))
    except ApiException as error:
        module.fail_json(msg=refused("run the probes in namespace %s" % params["namespace"], error))
    except NoAnswer as error:
        module.fail_json(msg=connection_error_message(error.error, api, params["kubeconfig"], error.what))
    unchecked = [entry for entry in result["nodes"] if entry["result"] is None]
    module.exit_json(
        changed=bool(params["keep_jobs"] and result["created"]),
        nodes=result["nodes"],
        jobs=result["created"],
        unchecked=[entry["node"] for entry in unchecked],
        msg="%d node(s) checked, %d without a result%s"
        % (
            len(result["nodes"]),
            len(unchecked),
            (": " + "; ".join("%s: %s" % (entry["node"], entry["error"]) for entry in unchecked))
            if unchecked
            else "",
        ),
    )

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every pod's log of a workload, streamed to files with bounded parallelism.

The logs never pass through Ansible: each is streamed from the API server to
``<dest>/<pod>.log`` (the log of the container before its last restart to
``<dest>/<pod>.previous.log``) and the caller gets paths, sizes and a status per pod. A fleet of
128 pods with 10 MB logs costs the controller a buffer per stream, not 1.3 GB of variables.

Two passes, as the training_job role uses them:

- ``early``: while the run goes, each started pod's new lines are appended to
  ``<dest>/early/<pod>.log``. A read asks only for the lines since the last one saved
  (``sinceSeconds`` with a margin for the node's clock, then the lines' own timestamps decide
  what is new), so a window costs what the ranks printed since the last one, not the whole log.
- ``final``: every pod's log is read whole and joined to its early copy on the way to disk
  (:func:`pod_logs.write_joined`), so rotation on a run of days loses nothing the verdict needs.

A pod whose log cannot be read (deleted, refused, an API timeout) is named with the reason and
the others are still collected; one whose early copy survives is kept with that copy.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    ApiException,
    client,
    connection_error_message,
)
from ansible_collections.gpuops.training.plugins.module_utils.pod_logs import past_init, write_joined

CHUNK = 1 << 20
EARLY_DIR = "early"
EARLY_STATE = "state.json"
# The early pass asks for this many seconds more than the time since the last saved line: the
# node's clock may run ahead of the controller's by up to this much without a line being lost.
CLOCK_MARGIN_S = 300
_TIMESTAMP = re.compile(rb"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


class CollectError(Exception):
    """The pods themselves could not be listed: nothing was collected."""


def timestamp_ns(line):
    """``(nanoseconds since the epoch, length of the prefix)`` of a line the API server gave
    with ``timestamps=true`` (RFC 3339 with up to nine fraction digits), or ``(None, 0)``."""
    match = _TIMESTAMP.match(line)
    if not match:
        return None, 0
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    zone = match.group(8)
    if zone != b"Z":
        offset = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        seconds -= offset if zone[:1] == b"+" else -offset
    fraction = (match.group(7) or b"").ljust(9, b"0")
    return seconds * 10**9 + int(fraction), match.end()


def pod_node(pod):
    return (pod.get("spec") or {}).get("nodeName") or ""


def main_container(pod, container=None):
    """The container whose log is read: ``container`` when given, else the pod's first."""
    if container:
        return container
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return containers[0].get("name") or ""


def container_status(pod, container):
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return status
    return {}


def started(pod, container):
    """Whether the container has started once (it has a log to read)."""
    state = container_status(pod, container).get("state") or {}
    return "running" in state or "terminated" in state


def restarted(pod, container):
    return int(container_status(pod, container).get("restartCount") or 0) > 0


def api_reason(error, timeout):
    """One line for a log read that failed: the API status and its message, a timeout or the
    connection error."""
    if isinstance(error, ApiException):
        message = ""
        try:
            message = json.loads(error.body or "{}").get("message") or ""
        except ValueError:
            message = (error.body or "").strip()[:200] if isinstance(error.body, str) else ""
        if error.status == 404:
            return "the pod or its log is gone (404 Not Found%s)" % (": " + message if message else "")
        detail = ": " + message if message else ""
        return "the API server answered %s %s%s" % (error.status, error.reason, detail)
    name = type(error).__name__
    if "Timeout" in name or "timed out" in str(error):
        return "no answer from the API server within %s s (%s)" % (timeout, name)
    return "the read failed: %s: %s" % (name, error)


def _plain(response):
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def list_pods(api, namespace, selector):
    """The pods ``selector`` finds, as dicts, in one list call."""
    try:
        response = client.CoreV1Api(api).list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
    except ApiException as error:
        raise CollectError(
            "cannot list the pods %s in %s: %s %s" % (selector, namespace, error.status, error.reason)
        ) from error
    return _plain(response).get("items") or []


def node_allocatable(api, names):
    """``({node: status.allocatable}, problem)`` for the nodes ``names``, in one list call;
    without the right to list nodes, an empty dict and the reason."""
    if not names:
        return {}, ""
    try:
        nodes = _plain(client.CoreV1Api(api).list_node(_preload_content=False)).get("items") or []
    except ApiException as error:
        return {}, "cannot list the nodes (%s %s): their allocatable resources are not known" % (
            error.status,
            error.reason,
        )
    wanted = set(names)
    return {
        node["metadata"]["name"]: (node.get("status") or {}).get("allocatable") or {}
        for node in nodes
        if node["metadata"]["name"] in wanted
    }, ""


class LogCollector:
    """Streams the logs of one namespace's pods into ``dest`` with ``parallel`` reads at once."""

    def __init__(self, api, namespace, dest, parallel=8, timeout=300, container=None, clock=time.time):
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.dest = dest
        self.parallel = parallel
        self.timeout = timeout
        self.container = container
        self.clock = clock
        self._lock = threading.Lock()

    # ---- reading

    def _open(self, pod, container, previous=False, timestamps=False, since_seconds=None):
        options = {"container": container, "_preload_content": False, "_request_timeout": self.timeout}
        if previous:
            options["previous"] = True
        if timestamps:
            options["timestamps"] = True
        if since_seconds:
            options["since_seconds"] = since_seconds
        return self.core.read_namespaced_pod_log(pod["metadata"]["name"], self.namespace, **options)

    @staticmethod
    def _chunks(response):
        try:
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    return
                yield chunk
        finally:
            response.release_conn()

    def _map(self, function, items):
        if self.parallel <= 1 or len(items) <= 1:
            return [function(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(items))) as pool:
            return list(pool.map(function, items))

    # ---- the final pass

    def collect_final(self, pods):
        """Every pod's log joined to its early copy, and every restarted pod's previous log;
        pods that only have an early copy (deleted by now) keep it. One result per pod."""
        os.makedirs(self.dest, exist_ok=True)
        names = {pod["metadata"]["name"] for pod in pods}
        early_dir = os.path.join(self.dest, EARLY_DIR)
        orphans = []
        if os.path.isdir(early_dir):
            orphans = sorted(
                name[: -len(".log")]
                for name in os.listdir(early_dir)
                if name.endswith(".log") and name[: -len(".log")] not in names
            )
        gone = [{"metadata": {"name": name}, "spec": {}, "status": {}, "gone": True} for name in orphans]
        return self._map(self._final_one, list(pods) + gone)

    def _final_one(self, pod):
        name = pod["metadata"]["name"]
        container = main_container(pod, self.container)
        result = {
            "name": name,
            "node": pod_node(pod),
            "phase": (pod.get("status") or {}).get("phase") or ("Gone" if pod.get("gone") else ""),
            "container": container,
            "log": None,
            "bytes": 0,
            "source": None,
            "previous_log": None,
            "previous_bytes": 0,
            "status": "ok",
            "reason": "",
            "changed": False,
        }
        early_path = os.path.join(self.dest, EARLY_DIR, name + ".log")
        early = _read_file(early_path)
        previous_start = b""
        if not pod.get("gone") and restarted(pod, container):
            path = os.path.join(self.dest, name + ".previous.log")
            try:
                response = self._open(pod, container, previous=True)
                size, changed = _write_file(path, lambda out: _copy(self._chunks(response), out))
            except Exception as error:  # a failed read of one pod must not stop the others
                reason = "previous container: " + api_reason(error, self.timeout)
                result.update(status="partial", reason=reason)
            else:
                result.update(previous_log=path, previous_bytes=size, changed=changed)
                with open(path, "rb") as stream:
                    previous_start = stream.read(len(early))
        final = []
        failure = ""
        if pod.get("gone"):
            failure = "the pod is gone; its early copy is all there is"
        elif not started(pod, container):
            failure = "its container %s never started" % container
        else:
            try:
                final = self._chunks(self._open(pod, container))
            except Exception as error:  # named in the result; the other pods go on
                failure = api_reason(error, self.timeout)
        if failure and not early:
            result.update(status="unreadable", reason=failure)
            return result
        path = os.path.join(self.dest, name + ".log")
        try:
            (source, size), changed = _write_file(
                path, lambda out: write_joined(early, final, out, previous_start)
            )
        except Exception as error:  # the stream broke off: nothing half written is kept
            result.update(status="unreadable", reason=api_reason(error, self.timeout))
            return result
        result.update(log=path, bytes=size, source=source, changed=result["changed"] or changed)
        if failure:
            result.update(status="partial", reason=failure)
        return result

    # ---- the early pass

    def collect_early(self, pods):
        """Append each started pod's new lines to its early copy; one result per pod read."""
        early_dir = os.path.join(self.dest, EARLY_DIR)
        os.makedirs(early_dir, exist_ok=True)
        state_path = os.path.join(early_dir, EARLY_STATE)
        state = json.loads(_read_file(state_path) or b"{}")
        ready = [pod for pod in pods if started(pod, main_container(pod, self.container))]
        results = self._map(lambda pod: self._early_one(pod, state), ready)
        _write_file(state_path, lambda out: out.write(json.dumps(state, sort_keys=True).encode()))
        return results

    def _early_one(self, pod, state):
        name = pod["metadata"]["name"]
        container = main_container(pod, self.container)
        container_id = container_status(pod, container).get("containerID") or ""
        path = os.path.join(self.dest, EARLY_DIR, name + ".log")
        with self._lock:
            mine = dict(state.get(name) or {})
        if mine.get("container_id") != container_id:
            # A new container (a restart): its own init is what the copy must hold; the old
            # container's log is read at the end as the previous log.
            mine = {"container_id": container_id, "last_ns": None, "at_last": 0, "past_init": False}
            with open(path, "wb"):
                pass
        result = {"name": name, "node": pod_node(pod), "log": path, "status": "ok", "reason": ""}
        result["appended"] = 0
        since = None
        if mine["last_ns"] is not None:
            since = max(1, int(math.ceil(self.clock() - mine["last_ns"] / 1e9)) + CLOCK_MARGIN_S)
        try:
            response = self._open(pod, container, timestamps=True, since_seconds=since)
            with open(path, "ab") as out:
                result["appended"] = _append_new_lines(self._chunks(response), out, mine)
        except Exception as error:  # named in the result; the copy keeps what it had
            result.update(status="unreadable", reason=api_reason(error, self.timeout))
        result["bytes"] = os.path.getsize(path)
        result["past_init"] = mine["past_init"]
        with self._lock:
            state[name] = mine
        return result


def _append_new_lines(chunks, out, mine):
    """Write the lines newer than ``mine["last_ns"]`` without their timestamps; lines at that
    same instant are new after the ``at_last`` already saved. A last line without its newline
    is left for the next read. Returns the bytes appended and updates ``mine``."""
    pending = b""
    last, at_last, skipped_at_last = mine["last_ns"], mine["at_last"], 0
    appended = 0
    for chunk in chunks:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            stamp, end = timestamp_ns(line)
            if stamp is not None and last is not None:
                if stamp < last:
                    continue
                if stamp == last and skipped_at_last < at_last:
                    skipped_at_last += 1
                    continue
            text = line[end:] + b"\n"
            out.write(text)
            appended += len(text)
            if stamp is not None:
                at_last = at_last + 1 if stamp == last else 1
                skipped_at_last = at_last
                last = stamp
            if not mine["past_init"] and past_init(text):
                mine["past_init"] = True
    mine["last_ns"], mine["at_last"] = last, at_last
    return appended


def _read_file(path):
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except FileNotFoundError:
        return b""


def _copy(chunks, out):
    size = 0
    for chunk in chunks:
        out.write(chunk)
        size += len(chunk)
    return size


def _digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_file(path, write):
    """Run ``write(binary file)`` into a temporary file beside ``path`` and put it in place;
    ``(what write returned, changed)``, changed False when ``path`` already held those bytes.
    Nothing half written is left when ``write`` raises."""
    temporary = "%s.%d.%d.partial" % (path, os.getpid(), threading.get_ident())
    try:
        with open(temporary, "wb") as out:
            value = write(out)
        same_size = os.path.exists(path) and os.path.getsize(path) == os.path.getsize(temporary)
        if same_size and _digest(path) == _digest(temporary):
            os.unlink(temporary)
            return value, False
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return value, True


def options_problem(params):
    """A message for options out of range; empty when they are fine."""
    if params["parallel"] < 1:
        return "parallel must be a positive integer (logs read at once), got %s" % params["parallel"]
    if params["timeout"] < 1:
        return "timeout must be at least 1 second, got %s" % params["timeout"]
    if params["expected_pods"] < 0:
        return "expected_pods must be 0 or more, got %s" % params["expected_pods"]
    for option in ("namespace", "pod_selector"):
        if not params[option].strip():
            return "%s must not be empty" % option
    return ""


def run_collection(module, connect):
    """The training_job_logs module: list the pods and their nodes, stream their logs, exit."""
    params = module.params
    problem = options_problem(params)
    if problem:
        module.fail_json(msg=problem)
    began = time.time()
    api = connect(module, pool_size=params["parallel"])
    try:
        pods = list_pods(api, params["namespace"], params["pod_selector"])
    except CollectError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # no answer (connection refused, TLS, DNS)
        what = "the pods %s in %s" % (params["pod_selector"], params["namespace"])
        module.fail_json(msg=connection_error_message(error, api, params["kubeconfig"], what))
    pod_nodes = {pod["metadata"]["name"]: pod_node(pod) for pod in pods}
    allocatable, node_problem = node_allocatable(api, sorted(set(filter(None, pod_nodes.values()))))
    warnings = [node_problem] if node_problem else []
    result = {
        "changed": False,
        "pods": [],
        "unreadable": [],
        "pod_nodes": pod_nodes,
        "node_allocatable": allocatable,
        "bytes": 0,
        "all_past_init": False,
    }
    if not module.check_mode:
        os.makedirs(params["dest"], exist_ok=True)
        collector = LogCollector(
            api,
            params["namespace"],
            params["dest"],
            parallel=params["parallel"],
            timeout=params["timeout"],
            container=params["container"],
        )
        if params["mode"] == "early":
            read = collector.collect_early(pods)
            copies = [entry for entry in read if entry["bytes"] > 0]
            result["bytes"] = sum(entry["appended"] for entry in read)
            result["changed"] = result["bytes"] > 0
            result["all_past_init"] = len(copies) >= max(params["expected_pods"], 1) and all(
                entry["past_init"] for entry in copies
            )
        else:
            read = collector.collect_final(pods)
            result["bytes"] = sum(entry["bytes"] + entry["previous_bytes"] for entry in read)
            result["changed"] = any(entry["changed"] for entry in read)
        result["pods"] = read
        result["unreadable"] = [
            {
                "pod": entry["name"],
                "node": entry["node"],
                "status": entry["status"],
                "reason": entry["reason"],
            }
            for entry in read
            if entry["status"] != "ok"
        ]
    result["seconds"] = round(time.time() - began, 3)
    module.exit_json(warnings=warnings, **result)

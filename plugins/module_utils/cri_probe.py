# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask a CRI runtime (CRI-O) what limits a fresh container gets, and say why when it cannot.

A runtime's configuration is a claim; a container it starts is the proof. The probe starts
one pod on the host network (no CNI needed) with one container per uid, all running the
given image (by default CRI-O's pause image, which every node has), reads each container's
``/proc/PID/limits`` from the host, and removes the pod. It talks to the runtime through
``crictl`` and touches nothing else.

Also here: the daemon listening on the runtime's socket (the runtime that answers, even when
several run on one machine) and its limits, and the judgement of what a container got
against the limits configured, naming the host's hard limit and the runtime's reason when a
limit cannot be applied.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid

from ansible_collections.gpuops.training.plugins.module_utils.crio_config import (
    CrioConfigError,
    default_ulimits_entries,
    read_effective_settings,
)
from ansible_collections.gpuops.training.plugins.module_utils.preflight import (
    PreflightError,
    parse_proc_limits,
)
from ansible_collections.gpuops.training.plugins.module_utils.ulimits import (
    UNLIMITED,
    UlimitError,
    limit_text,
    parse_runtime_ulimit,
)

DEFAULT_ENDPOINT = "unix:///var/run/crio/crio.sock"
# Linux's resource numbers (asm-generic/resource.h), as runc names them in its errors.
RLIMIT_NAMES = {
    0: "cpu",
    1: "fsize",
    2: "data",
    3: "stack",
    4: "core",
    5: "rss",
    6: "nproc",
    7: "nofile",
    8: "memlock",
    9: "as",
    10: "locks",
    11: "sigpending",
    12: "msgqueue",
    13: "nice",
    14: "rtprio",
    15: "rttime",
}
CAP_SYS_RESOURCE = 24
# CRI namespace modes: the probe shares the host's network (no CNI needed) and gives each
# container its own pid namespace.
NAMESPACE_CONTAINER = 1
NAMESPACE_NODE = 2
PROBE_NAMESPACE = "gpuops-training"


class ProbeError(Exception):
    """The probe could not run; the message says why. ``reason`` holds the runtime's own words
    when it refused a pod or container (empty otherwise)."""

    def __init__(self, message, reason=""):
        super().__init__(message)
        self.reason = reason


# ---------------------------------------------------------------------------
# The daemon behind an endpoint
# ---------------------------------------------------------------------------


def socket_path(endpoint):
    """The unix socket of a CRI endpoint (unix:///path or /path); None for anything else."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :] or None
    return endpoint if endpoint.startswith("/") else None


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def listening_socket_inodes(net_unix_text, path):
    """Inodes of the listening unix sockets bound to ``path`` (a /proc/net/unix table)."""
    wanted = os.path.realpath(path)
    inodes = set()
    for line in net_unix_text.splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode [Path]; flag 0x10000 is a listening socket.
        if len(fields) < 8:
            continue
        try:
            listening = int(fields[3], 16) & 0x10000
        except ValueError:
            continue
        if listening and os.path.realpath(fields[7]) == wanted:
            inodes.add(fields[6])
    return inodes


def listener_pid(path, proc_root="/proc"):
    """The lowest pid holding a listening socket bound to ``path``, or None."""
    inodes = listening_socket_inodes(_read(os.path.join(proc_root, "net", "unix")) or "", path)
    if not inodes:
        return None
    targets = {"socket:[%s]" % inode for inode in inodes}
    pids = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc_root, entry, "fd")
        try:
            descriptors = os.listdir(fd_dir)
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(os.path.join(fd_dir, descriptor)) in targets:
                    pids.append(int(entry))
                    break
            except OSError:
                continue
    return min(pids) if pids else None


def has_capability(status_text, capability):
    """Whether the CapEff line of a /proc/PID/status text holds the capability."""
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)\s*$", status_text or "", re.MULTILINE)
    return bool(match) and bool(int(match.group(1), 16) >> capability & 1)


def daemon_facts(pid, proc_root="/proc"):
    """pid, limits ({name: {soft, hard, unit}}) and CAP_SYS_RESOURCE of a runtime daemon."""
    facts = {"pid": pid, "limits": {}, "cap_sys_resource": None, "error": ""}
    text = _read(os.path.join(proc_root, str(pid), "limits"))
    try:
        if text is None:
            raise PreflightError("cannot read %s/%s/limits" % (proc_root, pid))
        facts["limits"] = parse_proc_limits(text)
    except PreflightError as error:
        facts["error"] = str(error)
    status = _read(os.path.join(proc_root, str(pid), "status"))
    if status is not None and "CapEff:" in status:
        facts["cap_sys_resource"] = has_capability(status, CAP_SYS_RESOURCE)
    return facts


# ---------------------------------------------------------------------------
# crictl
# ---------------------------------------------------------------------------

# Where cri-tools installs crictl when it is not in the PATH a module runs with.
CRICTL_DIRS = ["/usr/local/bin", "/usr/bin"]


def find_crictl(get_bin_path, crictl):
    """The crictl to run: a path as given when it is executable, a name from the PATH first,
    then from CRICTL_DIRS; None when there is none. get_bin_path is AnsibleModule's."""
    if not crictl or crictl.startswith("-") or any(char.isspace() or char == "\x00" for char in crictl):
        return None
    if os.sep in crictl:
        return crictl if os.path.isfile(crictl) and os.access(crictl, os.X_OK) else None
    return get_bin_path(crictl) or get_bin_path(crictl, opt_dirs=CRICTL_DIRS)


_LOG_LINE = re.compile(r'(?:time="[^"]*" )?level=(\w+) msg="((?:[^"\\]|\\.)*)"')
_GO_ESCAPES = {"n": " ", "t": " ", '"': '"', "\\": "\\"}


def _unquote(text):
    return re.sub(r"\\(.)", lambda match: _GO_ESCAPES.get(match.group(1), match.group(1)), text)


def crictl_reason(output):
    """The runtime's words in crictl's output: the msg of its fatal log line, with the log lines
    quoted inside it (runc's, conmon's) reduced to their messages; else the text as it is."""
    fatal = [match for match in _LOG_LINE.finditer(output or "") if match.group(1) == "fatal"]
    if not fatal:
        return (output or "").strip()
    text = _unquote(fatal[-1].group(2))
    while True:
        inner = _LOG_LINE.sub(lambda match: _unquote(match.group(2)), text)
        if inner == text:
            return " ".join(text.split())
        text = inner


class Crictl:
    """crictl against one endpoint; run_command is AnsibleModule.run_command's shape."""

    def __init__(self, run_command, crictl, endpoint, timeout):
        self.run_command = run_command
        self.base = [
            crictl,
            "--runtime-endpoint",
            endpoint,
            "--image-endpoint",
            endpoint,
            "--timeout",
            "%ds" % max(int(timeout), 1),
        ]
        self.endpoint = endpoint

    def run(self, *args):
        rc, out, err = self.run_command(self.base + list(args))
        return rc, out or "", err or ""

    def check(self, what, *args):
        rc, out, err = self.run(*args)
        if rc != 0:
            reason = crictl_reason(err or out) or "crictl exited with %d" % rc
            raise ProbeError("%s failed: %s" % (what, reason), reason)
        return out


def wait_for_runtime(crictl, timeout, clock=time.monotonic, sleep=time.sleep):
    """Wait until the runtime answers `crictl version`; "" then, else crictl's last reason."""
    deadline = clock() + timeout
    while True:
        rc, out, err = crictl.run("version")
        if rc == 0:
            return ""
        if clock() >= deadline:
            return crictl_reason(err or out) or "crictl version exited with %d" % rc
        sleep(1)


def images_named_pause(images_json):
    """Tags of the images whose repository ends in /pause (`crictl images -o json`)."""
    try:
        images = json.loads(images_json).get("images") or []
    except (ValueError, AttributeError):
        return []
    tags = []
    for image in images:
        for tag in image.get("repoTags") or []:
            if tag.rsplit(":", 1)[0].endswith("/pause"):
                tags.append(tag)
    return sorted(tags)


def choose_image(crictl, configured_image, pause_image):
    """The probe's image: the one given, else CRI-O's pause_image, else an image the runtime
    has whose name ends in /pause (CRI-O's built-in pause image, on a node that ran pods)."""
    if configured_image:
        return configured_image, "given"
    if pause_image:
        return pause_image, "pause_image"
    rc, out, _err = crictl.run("images", "-o", "json")
    tags = images_named_pause(out) if rc == 0 else []
    if tags:
        return tags[0], "the runtime's images"
    raise ProbeError(
        "no image to probe with: CRI-O's configuration sets no pause_image and the runtime has no "
        "image named */pause; give one the node has (the probe image option)"
    )


def pod_config(name):
    return {
        "metadata": {"name": name, "namespace": PROBE_NAMESPACE, "uid": uuid.uuid4().hex, "attempt": 0},
        "labels": {"app.kubernetes.io/managed-by": "gpuops.training"},
        "linux": {
            "security_context": {"namespace_options": {"network": NAMESPACE_NODE, "pid": NAMESPACE_CONTAINER}}
        },
    }


def container_config(uid, image, command):
    config = {
        "metadata": {"name": "uid-%d" % uid, "attempt": 0},
        "image": {"image": image},
        "linux": {
            "security_context": {
                "run_as_user": {"value": uid},
                "namespace_options": {"network": NAMESPACE_NODE, "pid": NAMESPACE_CONTAINER},
            }
        },
    }
    if command:
        config["command"] = list(command)
    return config


def container_pid(inspect_json):
    try:
        return int((json.loads(inspect_json).get("info") or {}).get("pid") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0


# On a node whose kubelet runs, kubelet stops every pod sandbox it did not create (its
# housekeeping, every 2 s): a probe pod may vanish between two crictl calls. Those failures
# say nothing about the runtime's limits, so the probe starts again with a new pod.
SANDBOX_GONE = (
    "sandbox was stopped",
    "not found",
    "cannot start a container that has stopped",
    "stopped before its limits could be read",
)
PROBE_ATTEMPTS = 10


def probe_limits(crictl, image, command, uids, proc_root="/proc", attempts=PROBE_ATTEMPTS):
    """Start a pod with one container per uid; return [{uid, limits}] read from /proc/PID/limits.

    Raises ProbeError with the runtime's reason when the pod or a container cannot start. The
    pod is removed whatever happens; one removed under it by kubelet is started again.
    """
    rc, out, err = crictl.run("inspecti", image)
    if rc != 0:
        raise ProbeError(
            "the image %s is not on the node (%s); give one it has" % (image, crictl_reason(err or out))
        )
    attempt = 1
    while True:
        try:
            return _probe_once(crictl, image, command, uids, proc_root)
        except ProbeError as error:
            if attempt >= attempts or not any(marker in str(error) for marker in SANDBOX_GONE):
                raise
        attempt += 1


def _probe_once(crictl, image, command, uids, proc_root):
    workdir = tempfile.mkdtemp(prefix="gpuops-probe-")
    pod_id = ""
    try:
        pod_file = os.path.join(workdir, "pod.json")
        with open(pod_file, "w", encoding="utf-8") as handle:
            json.dump(pod_config("gpuops-limits-probe-%s" % uuid.uuid4().hex[:8]), handle)
        pod_id = crictl.check("starting a probe pod (crictl runp)", "runp", pod_file).strip()
        containers = []
        for uid in uids:
            container_file = os.path.join(workdir, "container-%d.json" % uid)
            with open(container_file, "w", encoding="utf-8") as handle:
                json.dump(container_config(uid, image, command), handle)
            container_id = crictl.check(
                "creating a probe container as uid %d (crictl create)" % uid,
                "create",
                pod_id,
                container_file,
                pod_file,
            ).strip()
            crictl.check("starting the probe container as uid %d (crictl start)" % uid, "start", container_id)
            pid = container_pid(
                crictl.check("inspecting the probe container", "inspect", "-o", "json", container_id)
            )
            text = _read(os.path.join(proc_root, str(pid), "limits")) if pid else None
            if text is None:
                raise ProbeError(
                    "the probe container as uid %d stopped before its limits could be read: give an "
                    "image whose command keeps running" % uid
                )
            try:
                limits = parse_proc_limits(text)
            except PreflightError as error:
                raise ProbeError("the limits of the probe container as uid %d: %s" % (uid, error)) from error
            containers.append({"uid": uid, "limits": limits})
        return containers
    finally:
        if pod_id:
            crictl.run("stopp", pod_id)
            crictl.run("rmp", "--force", pod_id)
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Judgement
# ---------------------------------------------------------------------------


def _limit_value(value):
    return "unlimited" if value in (UNLIMITED, "unlimited") else value


def _rank(value):
    return float("inf") if value == "unlimited" else value


def memlock_kib(limits):
    """Soft and hard memlock of a limits table in KiB (or unlimited); None without memlock."""
    memlock = limits.get("memlock")
    if not memlock:
        return None

    def kib(value):
        return value if value == "unlimited" else value // 1024

    return {"soft": kib(memlock["soft"]), "hard": kib(memlock["hard"])}


def mismatches(expected, containers):
    """One line per configured limit a container did not get (expected: Ulimit objects)."""
    lines = []
    for container in containers:
        for limit in expected:
            got = container["limits"].get(limit.name)
            want = (_limit_value(limit.soft), _limit_value(limit.hard))
            if got is None:
                lines.append(
                    "%s: configured %s, but /proc/PID/limits of the container as uid %d has no %s line"
                    % (limit.name, limit, container["uid"], limit.name)
                )
            elif (got["soft"], got["hard"]) != want:
                lines.append(
                    "%s: configured %s:%s, a new container as uid %d gets %s:%s"
                    % (
                        limit.name,
                        limit_text(limit.soft),
                        limit_text(limit.hard),
                        container["uid"],
                        limit_text(got["soft"]),
                        limit_text(got["hard"]),
                    )
                )
    return lines


def summary_lines(expected, containers):
    """One line per container: the limits it got, for the names configured (memlock when none)."""
    names = [limit.name for limit in expected] or ["memlock"]
    lines = []
    for container in containers:
        got = []
        for name in names:
            limit = container["limits"].get(name)
            shown = "%s:%s" % (limit_text(limit["soft"]), limit_text(limit["hard"])) if limit else "none"
            got.append("%s %s" % (name, shown))
        lines.append("as uid %d: %s" % (container["uid"], ", ".join(got)))
    return lines


def rlimit_named(reason):
    """The limit a runtime error names ("error setting rlimit type 8" -> memlock), or ""."""
    match = re.search(r"rlimit type (\d+)", reason or "")
    return RLIMIT_NAMES.get(int(match.group(1)), "") if match else ""


def above_host_hard_limit(expected, daemon):
    """The configured limits above the daemon's hard limit: [(Ulimit, the daemon's hard, unit)]."""
    found = []
    for limit in expected:
        daemon_limit = (daemon.get("limits") or {}).get(limit.name)
        if not daemon_limit:
            continue
        if _rank(_limit_value(limit.hard)) > _rank(daemon_limit["hard"]):
            found.append((limit, daemon_limit["hard"], daemon_limit.get("unit", "")))
    return found


def explain_unapplied(expected, reason, daemon):
    """Why a container could not start with the configured limits: one line per limit above the
    host's hard limit (what runc can reach without CAP_SYS_RESOURCE: the daemon's hard limit),
    the limit the runtime named first, then the runtime's own words."""
    named = rlimit_named(reason)
    lines = []
    over = sorted(above_host_hard_limit(expected, daemon), key=lambda item: item[0].name != named)
    lacks_capability = daemon.get("cap_sys_resource") is not True
    for limit, hard, unit in over:
        ceiling = "%s:%s" % (hard, hard) if hard != "unlimited" else "-1:-1"
        lines.append(
            "%s cannot be applied: this host's hard %s limit is %s%s, the CRI-O daemon's, and runc cannot "
            "raise a limit above it %s; set %s=%s or lower, or raise the hard limit CRI-O starts with "
            "(Limit%s= in its systemd unit)"
            % (
                limit,
                limit.name,
                hard,
                " " + unit if unit and hard != "unlimited" else "",
                "without CAP_SYS_RESOURCE, which the daemon lacks here"
                if lacks_capability
                else "for this container",
                limit.name,
                ceiling,
                limit.name.upper(),
            )
        )
    if named and named not in [limit.name for limit, _hard, _unit in over]:
        lines.append("the runtime could not set %s" % named)
    lines.append("CRI-O said: %s" % reason)
    return lines


# ---------------------------------------------------------------------------
# CRI-O as a whole: its configuration, its daemon and a fresh container
# ---------------------------------------------------------------------------


def crio_facts(
    endpoint,
    crictl,
    config_file,
    config_dir,
    image="",
    command=(),
    uids=(),
    wait_timeout=60,
    proc_root="/proc",
):
    """What decides the limits of CRI-O's containers, and what a fresh one gets.

    default_ulimits as CRI-O reads it (the last of its files that sets it wins), the daemon
    listening at the endpoint and its limits (containers inherit those default_ulimits does
    not set), and, for each uid, the limits of a probe container. With crictl None (not
    installed) or no uids nothing is probed. A problem is recorded in config_error or error
    (and reason, the runtime's words), never raised.
    """
    facts = {
        "endpoint": endpoint,
        "answering": False,
        "daemon": {},
        "config_files": [],
        "config_error": "",
        "default_ulimits": [],
        "default_ulimits_source": "",
        "image": "",
        "containers": [],
        "error": "",
        "reason": "",
    }
    pause_image = pause_command = ""
    try:
        settings = read_effective_settings(config_file, config_dir)
        facts["config_files"] = settings["files"]
        facts["default_ulimits"] = default_ulimits_entries(settings["default_ulimits"])
        facts["default_ulimits_source"] = settings["default_ulimits"]["source"]
        pause_image = settings["pause_image"]["value"]
        pause_command = settings["pause_command"]["value"]
    except CrioConfigError as error:
        facts["config_error"] = str(error)
    reason = wait_for_runtime(crictl, wait_timeout) if crictl is not None else ""
    path = socket_path(endpoint)
    pid = listener_pid(path, proc_root) if path else None
    if pid is not None:
        facts["daemon"] = daemon_facts(pid, proc_root)
    if crictl is None:
        if uids:
            facts["error"] = (
                "crictl is not installed on this node, so no container could be probed "
                "(install cri-tools, or set probe_uids to [] to skip the probe)"
            )
        return facts
    if reason:
        facts["error"] = "CRI-O does not answer at %s: %s" % (endpoint, reason)
        return facts
    facts["answering"] = True
    if not uids:
        return facts
    try:
        chosen, origin = choose_image(crictl, image, pause_image if isinstance(pause_image, str) else "")
        facts["image"] = chosen
        if not command and origin == "pause_image" and isinstance(pause_command, str) and pause_command:
            command = [pause_command]
        facts["containers"] = probe_limits(crictl, chosen, command, uids, proc_root)
        for container in facts["containers"]:
            container["memlock_kib"] = memlock_kib(container["limits"])
    except ProbeError as error:
        facts["error"] = str(error)
        facts["reason"] = error.reason
    return facts


def container_memlock(facts):
    """The memlock CRI-O gives a container by its configuration: (soft:hard in KiB or None, where
    from). default_ulimits when it sets memlock, otherwise the daemon's own limit, inherited."""
    for entry in facts.get("default_ulimits") or []:
        try:
            limit = parse_runtime_ulimit(entry)
        except UlimitError:
            continue
        if limit.name == "memlock":

            def kib(value):
                return "unlimited" if value == UNLIMITED else value // 1024

            return {"soft": kib(limit.soft), "hard": kib(limit.hard)}, "default_ulimits in %s" % (
                facts.get("default_ulimits_source") or "CRI-O's configuration"
            )
    daemon_memlock = memlock_kib((facts.get("daemon") or {}).get("limits") or {})
    if facts.get("default_ulimits"):
        where = "the daemon's own, inherited: default_ulimits sets no memlock"
    else:
        where = "the daemon's own, inherited: default_ulimits is empty"
    return daemon_memlock, where


def judge_expected(expected_entries, facts):
    """Problems with the limits a fresh container got against those configured (entries in
    name=soft:hard form); an empty list when every container got every one."""
    expected = [parse_runtime_ulimit(entry) for entry in expected_entries]
    if facts["error"]:
        if facts["reason"]:
            return [
                "a new container cannot start: "
                + "; ".join(explain_unapplied(expected, facts["reason"], facts["daemon"]))
            ]
        return [facts["error"]]
    lines = mismatches(expected, facts["containers"])
    if lines:
        lines.append(
            "CRI-O's default_ulimits is %s, from %s (the last file CRI-O reads that sets it)"
            % (facts["default_ulimits"], facts["default_ulimits_source"] or "no file")
        )
    return lines


def crio_preflight_entry(probed):
    """The runtimes.crio entry of node_preflight_info from crio_facts (with its daemon found)."""
    daemon = probed["daemon"]
    entry = {"running": True, "pid": daemon["pid"]}
    if daemon["error"]:
        entry["error"] = daemon["error"]
    else:
        entry["memlock_kib"] = memlock_kib(daemon["limits"])
    entry.update(
        default_ulimits=probed["default_ulimits"],
        default_ulimits_source=probed["default_ulimits_source"],
        config_files=probed["config_files"],
        containers=[
            {"uid": item["uid"], "memlock_kib": item["memlock_kib"]} for item in probed["containers"]
        ],
        probe_error=probed["error"],
    )
    if probed["config_error"]:
        entry["config_error"] = probed["config_error"]
        entry["container_memlock_kib"] = None
    else:
        entry["container_memlock_kib"], entry["judged_by"] = container_memlock(probed)
    if probed["reason"] and rlimit_named(probed["reason"]):
        # CRI-O cannot apply its own default_ulimits: say which limit, the host's ceiling and why.
        configured = []
        for item in probed["default_ulimits"]:
            try:
                configured.append(parse_runtime_ulimit(item))
            except UlimitError:
                continue
        entry["probe_error"] = "CRI-O cannot start a container: " + "; ".join(
            explain_unapplied(configured, probed["reason"], daemon)
        )
    return entry

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Node preflight: parse what a GPU node exposes and judge it against thresholds.

Pure functions on strings and plain data, so every parser is unit tested on fixture text;
node_preflight_info does the reading (files, sysfs, commands) and calls these.
"""

from __future__ import annotations

import re

UNLIMITED = "unlimited"

# /proc/PID/limits row titles and the names used in reports (those of ulimit and CRI-O).
PROC_LIMIT_NAMES = {
    "Max cpu time": "cpu",
    "Max file size": "fsize",
    "Max data size": "data",
    "Max stack size": "stack",
    "Max core file size": "core",
    "Max resident set": "rss",
    "Max processes": "nproc",
    "Max open files": "nofile",
    "Max locked memory": "memlock",
    "Max address space": "as",
    "Max file locks": "locks",
    "Max pending signals": "sigpending",
    "Max msgqueue size": "msgqueue",
    "Max nice priority": "nice",
    "Max realtime priority": "rtprio",
    "Max realtime timeout": "rttime",
}

# What each runtime's memlock is fixed with, named in the failure message.
RUNTIME_REMEDIES = {
    "crio": "apply gpuops.training.crio_limits (or machineconfig_limits on OpenShift)",
    "containerd": "apply gpuops.training.containerd_limits",
    "dockerd": "set default-ulimits memlock in /etc/docker/daemon.json",
}
LOGIN_REMEDY = "apply gpuops.training.host_limits"
SHM_REMEDY = (
    "enlarge /dev/shm (mount -o remount,size=...) on the node, or mount an emptyDir with "
    "medium Memory at /dev/shm in the pods"
)
GPU_REMEDY = (
    "install the NVIDIA driver (nvidia-smi must list the GPUs) or check the GPU operator's driver pods"
)
IB_REMEDY = (
    "check the cables and the subnet manager (opensm) or the RoCE switch ports, and load the RDMA "
    "modules with gpuops.training.rdma_modules"
)

NVIDIA_SMI_FIELDS = ("index", "name", "uuid", "memory.total", "driver_version", "pci.bus_id")


class PreflightError(ValueError):
    """Input that cannot be parsed or a threshold that makes no sense."""


def _limit_value(text):
    text = text.strip()
    if text == UNLIMITED:
        return UNLIMITED
    if re.match(r"^[0-9]+$", text):
        return int(text)
    raise PreflightError("not a limit value: %r" % text)


def parse_proc_limits(text):
    """Parse /proc/PID/limits into {name: {"soft", "hard", "unit"}}; values are ints or 'unlimited'."""
    limits = {}
    for line in text.splitlines():
        for title, name in PROC_LIMIT_NAMES.items():
            if line.startswith(title + " "):
                fields = line[len(title) :].split()
                if len(fields) < 2:
                    raise PreflightError("short limits line: %r" % line)
                limits[name] = {
                    "soft": _limit_value(fields[0]),
                    "hard": _limit_value(fields[1]),
                    "unit": fields[2] if len(fields) > 2 else "",
                }
                break
    if not limits:
        raise PreflightError("no limits found in the text (is it /proc/PID/limits?)")
    return limits


def bytes_to_kib(value):
    return value if value == UNLIMITED else value // 1024


def memlock_kib_from_proc_limits(text):
    """Soft and hard memlock in KiB (or 'unlimited') from /proc/PID/limits text."""
    memlock = parse_proc_limits(text).get("memlock")
    if memlock is None:
        raise PreflightError("no 'Max locked memory' line in the limits")
    return {"soft": bytes_to_kib(memlock["soft"]), "hard": bytes_to_kib(memlock["hard"])}


def parse_ulimit_lines(text):
    """Parse the output of ``ulimit -S -l; ulimit -H -l`` (KiB or 'unlimited') into soft and hard."""
    values = [line.strip() for line in text.splitlines() if line.strip()]
    if len(values) != 2:
        raise PreflightError("expected two lines (soft and hard), got %r" % text)
    return {"soft": _limit_value(values[0]), "hard": _limit_value(values[1])}


def parse_nvidia_smi_csv(text, fields=NVIDIA_SMI_FIELDS):
    """Parse ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`` output."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise PreflightError("expected %d fields per GPU line, got %r" % (len(fields), line))
        gpu = dict(zip(fields, values, strict=True))
        if "index" in gpu and gpu["index"].isdigit():
            gpu["index"] = int(gpu["index"])
        if "memory.total" in gpu:
            memory = gpu.pop("memory.total")
            gpu["memory_total_mib"] = int(memory) if memory.isdigit() else None
        gpus.append({key.replace(".", "_"): value for key, value in gpu.items()})
    return gpus


def parse_ib_port(device, port, state_text, link_layer_text, rate_text):
    """One InfiniBand/RoCE port from its sysfs files (state '4: ACTIVE', rate '200 Gb/sec (4X HDR)')."""
    state = state_text.strip()
    state = state.split(":", 1)[1].strip() if ":" in state else state
    rate = rate_text.strip()
    match = re.match(r"^([0-9.]+)\s*Gb/sec", rate)
    return {
        "device": device,
        "port": int(port) if str(port).isdigit() else port,
        "state": state.upper(),
        "link_layer": link_layer_text.strip(),
        "rate": rate,
        "rate_gbps": float(match.group(1)) if match else None,
    }


def nccl_environment(environ):
    """The NCCL_* variables of an environment, sorted by name."""
    return {key: environ[key] for key in sorted(environ) if key.startswith("NCCL_")}


def parse_nccl_conf(text):
    """``/etc/nccl.conf`` lines ``NAME=value`` (comments and blanks skipped)."""
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        settings[key.strip()] = value.strip()
    return settings


def parse_threshold_kib(value):
    """A memlock threshold: 'unlimited', an int (KiB), or ''/None/0 for no check."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("", "0"):
        return None
    if text in ("unlimited", "infinity", "-1"):
        return UNLIMITED
    if re.match(r"^[0-9]+$", text):
        return int(text)
    raise PreflightError("memlock threshold must be 'unlimited' or a number of KiB, got %r" % (value,))


def limit_meets(actual, needed):
    if needed == UNLIMITED:
        return actual == UNLIMITED
    return actual == UNLIMITED or actual >= needed


def describe_kib(value):
    return UNLIMITED if value == UNLIMITED else "%d KiB" % value


def runtime_memlock_checks(name, runtime, needed):
    """The memlock checks of one running runtime.

    A runtime is judged by what its containers get: for CRI-O, ``container_memlock_kib``, worked
    out from its effective default_ulimits (the daemon's own limit only when default_ulimits
    sets no memlock; ``judged_by`` says which), then each fresh probe container in
    ``containers``; for the others (containerd), the daemon's own ``memlock_kib``, which their
    containers inherit.
    """
    remedy = RUNTIME_REMEDIES.get(name, "raise its service's LimitMEMLOCK")
    checks = []
    if "container_memlock_kib" in runtime:
        memlock = runtime.get("container_memlock_kib")
        subject = "memlock of %s's containers" % name
        source = " (%s)" % runtime["judged_by"] if runtime.get("judged_by") else ""
        error = runtime.get("config_error") or runtime.get("error") or "unknown error"
    else:
        memlock = runtime.get("memlock_kib")
        subject = "memlock of %s" % name
        source = ""
        error = runtime.get("error", "unknown error")
    if memlock is None:
        checks.append(
            {
                "name": "memlock_%s" % name,
                "ok": False,
                "message": "%s could not be read (%s), need %s" % (subject, error, describe_kib(needed)),
            }
        )
    else:
        ok = limit_meets(memlock["soft"], needed)
        checks.append(
            {
                "name": "memlock_%s" % name,
                "ok": ok,
                "message": ""
                if ok
                else "%s is %s%s, need %s: %s"
                % (subject, describe_kib(memlock["soft"]), source, describe_kib(needed), remedy),
            }
        )
    if runtime.get("probe_error"):
        checks.append(
            {
                "name": "memlock_%s_fresh_container" % name,
                "ok": False,
                "message": "a fresh %s container could not be probed, need memlock %s: %s"
                % (name, describe_kib(needed), runtime["probe_error"]),
            }
        )
    for container in runtime.get("containers") or []:
        memlock = container.get("memlock_kib")
        ok = memlock is not None and limit_meets(memlock["soft"], needed)
        checks.append(
            {
                "name": "memlock_%s_container_uid_%s" % (name, container.get("uid")),
                "ok": ok,
                "message": ""
                if ok
                else "memlock of a fresh %s container as uid %s is %s, need %s: %s"
                % (
                    name,
                    container.get("uid"),
                    "unknown" if memlock is None else describe_kib(memlock["soft"]),
                    describe_kib(needed),
                    remedy,
                ),
            }
        )
    return checks


def evaluate(facts, thresholds):
    """Judge the facts; return a list of checks {name, ok, message}, message set when not ok.

    facts: runtimes ({name: {running, memlock_kib}}, for CRI-O also container_memlock_kib,
    judged_by, containers and probe_error: see runtime_memlock_checks), login ({user, memlock_kib}), shm
    ({size_mib}), gpus (list), gpu_query_error, ib_ports (list).
    thresholds: min_memlock_kib, min_shm_mib, min_gpus, min_ib_ports_active.
    """
    checks = []
    needed_memlock = parse_threshold_kib(thresholds.get("min_memlock_kib"))
    if needed_memlock is not None:
        for name, runtime in sorted(facts.get("runtimes", {}).items()):
            if runtime.get("running"):
                checks.extend(runtime_memlock_checks(name, runtime, needed_memlock))
        login = facts.get("login")
        if login:
            memlock = login.get("memlock_kib")
            if memlock is None:
                ok = False
                message = "memlock of a login shell of %s could not be read (%s), need %s" % (
                    login.get("user"),
                    login.get("error", "unknown error"),
                    describe_kib(needed_memlock),
                )
            else:
                ok = limit_meets(memlock["soft"], needed_memlock)
                message = (
                    ""
                    if ok
                    else "memlock of a login shell of %s is %s, need %s: %s"
                    % (
                        login.get("user"),
                        describe_kib(memlock["soft"]),
                        describe_kib(needed_memlock),
                        LOGIN_REMEDY,
                    )
                )
            checks.append({"name": "memlock_login", "ok": ok, "message": message})

    min_shm = int(thresholds.get("min_shm_mib") or 0)
    if min_shm > 0:
        size = (facts.get("shm") or {}).get("size_mib")
        ok = size is not None and size >= min_shm
        shown = "missing" if size is None else "%d MiB" % size
        checks.append(
            {
                "name": "shm",
                "ok": ok,
                "message": ""
                if ok
                else "/dev/shm is %s, need at least %d MiB: %s" % (shown, min_shm, SHM_REMEDY),
            }
        )

    min_gpus = int(thresholds.get("min_gpus") or 0)
    if min_gpus > 0:
        count = len(facts.get("gpus") or [])
        ok = count >= min_gpus
        reason = facts.get("gpu_query_error")
        checks.append(
            {
                "name": "gpus",
                "ok": ok,
                "message": ""
                if ok
                else "found %d GPUs%s, need at least %d: %s"
                % (count, " (%s)" % reason if reason else "", min_gpus, GPU_REMEDY),
            }
        )

    min_active = int(thresholds.get("min_ib_ports_active") or 0)
    if min_active > 0:
        ports = facts.get("ib_ports") or []
        active = [port for port in ports if port["state"] == "ACTIVE"]
        ok = len(active) >= min_active
        inactive = ", ".join(
            "%s/%s is %s" % (port["device"], port["port"], port["state"])
            for port in ports
            if port["state"] != "ACTIVE"
        )
        checks.append(
            {
                "name": "ib_ports",
                "ok": ok,
                "message": ""
                if ok
                else "found no InfiniBand/RoCE ports under /sys/class/infiniband, need %d ACTIVE: %s"
                % (min_active, IB_REMEDY)
                if not ports
                else "%d of %d InfiniBand/RoCE ports are ACTIVE%s, need %d: %s"
                % (len(active), len(ports), " (%s)" % inactive if inactive else "", min_active, IB_REMEDY),
            }
        )
    return checks


def failures(checks):
    return [check["message"] for check in checks if not check["ok"]]

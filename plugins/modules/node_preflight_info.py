#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_preflight_info
short_description: Check that a node is ready for distributed GPU training over RDMA
description:
  - Reads, without changing anything, what decides whether NCCL can use RDMA on a node
    and reports it.
  - The GPUs that C(nvidia-smi --query-gpu) lists, when it is installed.
  - The InfiniBand and RoCE ports under C(/sys/class/infiniband/*/ports/*) with their state,
    link layer and rate.
  - The memlock limit containers get from each running runtime, and that of a fresh login shell
    of O(login_user) (C(su -l)). CRI-O gives its containers the limits of its effective
    C(default_ulimits) (O(crio_config_file), then every file under O(crio_config_dir) in lexical
    order; the last that sets it wins), so it is judged by those, and by its daemon's own limit
    (C(/proc/PID/limits), which containers inherit) only when C(default_ulimits) sets no
    memlock. Other runtimes (containerd) are judged by their daemon's limit.
  - The memlock a fresh CRI-O container gets, as root and as a non-root uid (O(probe_uids)).
    Through C(crictl), a probe pod on the host network runs one container per uid, whose
    C(/proc/PID/limits) is read from the node; the pod is removed at once. The image is
    CRI-O's own pause image unless O(probe_image) names another the node has.
  - The size of C(/dev/shm), the C(NCCL_*) variables of the environment the module runs in and
    the settings of C(/etc/nccl.conf).
  - Checks them against the thresholds given and fails with one line per unmet check, each
    saying what to apply. Thresholds left at their defaults are not checked.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only

options:
  runtimes:
    description:
      - Container runtime processes (by their command name) whose limits are read when they run.
        CRI-O is the daemon listening at O(crio_runtime_endpoint), or else the lowest pid named C(crio).
    type: list
    elements: str
    default: [crio, containerd]
  crio_runtime_endpoint:
    description: CRI-O's CRI endpoint (C(unix://) and its socket's path).
    type: str
    default: unix:///var/run/crio/crio.sock
  crio_config_file:
    description: CRI-O's main configuration file (its C(--config)); a missing file is skipped, as CRI-O does.
    type: path
    default: /etc/crio/crio.conf
  crio_config_dir:
    description: CRI-O's drop-in directory (its C(--config-dir)); CRI-O reads every file under it.
    type: path
    default: /etc/crio/crio.conf.d
  crictl:
    description: The crictl command that probes CRI-O, a name looked up in the PATH (and C(/usr/local/bin)) or a path.
    type: str
    default: crictl
  probe_image:
    description:
      - Image of the probe containers, which must be on the node (nothing is pulled). Empty takes
        CRI-O's C(pause_image), or else its image whose name ends in C(/pause).
    type: str
    default: ""
  probe_uids:
    description:
      - A fresh CRI-O container is probed as each of these uids when CRI-O runs. Empty probes nothing.
    type: list
    elements: int
    default: [0, 65534]
  login_user:
    description:
      - User whose fresh login shell's memlock limit is read and checked (the limits
        C(/etc/security/limits.d/) gives bare-metal C(torchrun) users). Empty skips it.
    type: str
    default: ""
  min_memlock_kib:
    description:
      - Memlock (soft limit) the running runtimes and the login shell must have, in KiB, or
        V(unlimited). Empty skips the check.
    type: str
    default: ""
  min_shm_mib:
    description: Size C(/dev/shm) must have at least, in MiB; V(0) skips the check.
    type: int
    default: 0
  min_gpus:
    description: GPUs C(nvidia-smi) must list at least; V(0) skips the check.
    type: int
    default: 0
  min_ib_ports_active:
    description: InfiniBand or RoCE ports that must be C(ACTIVE) at least; V(0) skips the check.
    type: int
    default: 0
  fail_on_unmet:
    description:
      - Fail when a check does not hold. With V(false) the module reports the checks in
        RV(failures) and succeeds.
    type: bool
    default: true
notes:
  - A drop-in written since the runtime last started does not count until it restarts; the
    fresh container shows what the running runtime gives.
  - The probe needs C(crictl) (cri-tools) and root; without crictl the CRI-O probe check fails
    saying so (set O(probe_uids=[]) to skip it).
seealso:
  - module: gpuops.training.nccl_log_info
"""

EXAMPLES = r"""
- name: Check that the node can register memory for RDMA and sees its GPUs and ports
  gpuops.training.node_preflight_info:
    login_user: trainer
    min_memlock_kib: unlimited
    min_shm_mib: 1024
    min_gpus: 8
    min_ib_ports_active: 4
  register: preflight

- name: Only report
  gpuops.training.node_preflight_info:
    fail_on_unmet: false
  register: preflight
"""

RETURN = r"""
ok:
  description: Whether every check held.
  returned: always
  type: bool
failures:
  description: One line per unmet check, saying what to apply.
  returned: always
  type: list
  elements: str
  sample:
    - "memlock of crio's containers is 64 KiB (the daemon's own, inherited: default_ulimits is empty), need unlimited:
      apply gpuops.training.crio_limits (or machineconfig_limits on OpenShift)"
checks:
  description: Every check made, with C(name), C(ok) and C(message) (empty when it held).
  returned: always
  type: list
  elements: dict
gpus:
  description: The GPUs nvidia-smi lists (index, name, uuid, memory_total_mib, driver_version, pci_bus_id).
  returned: always
  type: list
  elements: dict
gpu_driver:
  description: First line of C(/proc/driver/nvidia/version); empty when no NVIDIA driver is loaded.
  returned: always
  type: str
gpu_query_error:
  description: Why the GPUs could not be listed; empty when they were.
  returned: always
  type: str
ib_ports:
  description: InfiniBand and RoCE ports (device, port, state, link_layer, rate, rate_gbps).
  returned: always
  type: list
  elements: dict
  sample: [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "InfiniBand", "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0}]
runtimes:
  description:
    - Per runtime in O(runtimes), whether it runs, its pid and its daemon's memlock in KiB
      (C(memlock_kib), with C(soft) and C(hard), each an integer or V(unlimited)).
    - For CRI-O also C(default_ulimits) and C(default_ulimits_source) (the last file that sets
      it), C(config_files) in CRI-O's order, C(container_memlock_kib) (what its configuration
      gives a container) with C(judged_by) (where from), C(containers) (C(uid) and
      C(memlock_kib) of each fresh probe container) and C(probe_error) (why none could be
      probed; empty when they were).
  returned: always
  type: dict
  sample:
    crio:
      running: true
      pid: 812
      memlock_kib: {"soft": 64, "hard": 8192}
      default_ulimits: ["memlock=-1:-1"]
      default_ulimits_source: /etc/crio/crio.conf.d/99-ulimits.conf
      container_memlock_kib: {"soft": "unlimited", "hard": "unlimited"}
      judged_by: default_ulimits in /etc/crio/crio.conf.d/99-ulimits.conf
      containers: [{"uid": 0, "memlock_kib": {"soft": "unlimited", "hard": "unlimited"}}]
      probe_error: ""
login:
  description: The login shell's user and memlock in KiB; empty when O(login_user) is empty.
  returned: always
  type: dict
shm:
  description: Size of C(/dev/shm) in MiB (C(size_mib)); C(size_mib) is null when it is missing.
  returned: always
  type: dict
nccl_env:
  description: C(NCCL_*) variables of the environment the module runs in.
  returned: always
  type: dict
nccl_conf:
  description: Settings from C(/etc/nccl.conf), which NCCL reads at start.
  returned: always
  type: dict
"""

import glob
import os
import re

from ansible_collections.gpuops.training.plugins.module_utils.cri_probe import (
    Crictl,
    crio_facts,
    crio_preflight_entry,
    daemon_facts,
    find_crictl,
    listener_pid,
    socket_path,
)
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module
from ansible_collections.gpuops.training.plugins.module_utils.preflight import (
    PreflightError,
    evaluate,
    failures,
    memlock_kib_from_proc_limits,
    nccl_environment,
    parse_ib_port,
    parse_nccl_conf,
    parse_nvidia_smi_csv,
    parse_threshold_kib,
    parse_ulimit_lines,
)

# Where the facts are read; module-level so the unit tests can point them at fixtures.
PROC_ROOT = "/proc"
INFINIBAND_ROOT = "/sys/class/infiniband"
SHM_PATH = "/dev/shm"
NCCL_CONF = "/etc/nccl.conf"
NVIDIA_DRIVER_VERSION = "/proc/driver/nvidia/version"
NVIDIA_SMI_QUERY = "index,name,uuid,memory.total,driver_version,pci.bus_id"
# A login name su takes as one (no option, no whitespace or NUL): what useradd accepts.
USER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,255}[$]?$")


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def find_process(command_name):
    """Lowest pid whose command name is command_name (the daemon, not its children)."""
    pids = []
    for comm_path in glob.glob(os.path.join(PROC_ROOT, "[0-9]*", "comm")):
        if (read_text(comm_path) or "").strip() == command_name:
            pids.append(int(os.path.basename(os.path.dirname(comm_path))))
    return min(pids) if pids else None


# How long the probe waits for CRI-O to answer, and crictl's timeout per call.
PROBE_TIMEOUT = 30


def crio_runtime_facts(module, params):
    """CRI-O judged by what its containers get: its configuration, its daemon, a fresh container."""
    endpoint = params["crio_runtime_endpoint"]
    path = socket_path(endpoint)
    pid = (listener_pid(path, PROC_ROOT) if path else None) or find_process("crio")
    if pid is None:
        return {"running": False}
    crictl_path = find_crictl(module.get_bin_path, params["crictl"])
    probed = crio_facts(
        endpoint,
        Crictl(module.run_command, crictl_path, endpoint, PROBE_TIMEOUT) if crictl_path else None,
        params["crio_config_file"],
        params["crio_config_dir"],
        image=params["probe_image"],
        uids=params["probe_uids"],
        wait_timeout=PROBE_TIMEOUT,
        proc_root=PROC_ROOT,
    )
    if not probed["daemon"]:
        probed["daemon"] = daemon_facts(pid, PROC_ROOT)
    return crio_preflight_entry(probed)


def runtime_facts(module, params):
    runtimes = {}
    for name in params["runtimes"]:
        if name == "crio":
            runtimes[name] = crio_runtime_facts(module, params)
            continue
        pid = find_process(name)
        if pid is None:
            runtimes[name] = {"running": False}
            continue
        entry = {"running": True, "pid": pid}
        text = read_text(os.path.join(PROC_ROOT, str(pid), "limits"))
        try:
            if text is None:
                raise PreflightError("cannot read %s/%s/limits" % (PROC_ROOT, pid))
            entry["memlock_kib"] = memlock_kib_from_proc_limits(text)
        except PreflightError as error:
            entry["error"] = str(error)
        runtimes[name] = entry
    return runtimes


def login_facts(module, user):
    # A login shell goes through PAM, so it gets what limits.d gives a new session.
    su = module.get_bin_path("su")
    if su is None:
        return {"user": user, "error": "su not found"}
    rc, out, err = module.run_command([su, "-s", "/bin/sh", "-l", user, "-c", "ulimit -S -l; ulimit -H -l"])
    if rc != 0:
        return {"user": user, "error": "su -l %s failed with %d: %s" % (user, rc, (err or out).strip())}
    try:
        return {"user": user, "memlock_kib": parse_ulimit_lines(out)}
    except PreflightError as error:
        return {"user": user, "error": str(error)}


def gpu_facts(module):
    driver = (read_text(NVIDIA_DRIVER_VERSION) or "").strip().splitlines()
    facts = {"gpus": [], "gpu_driver": driver[0] if driver else "", "gpu_query_error": ""}
    nvidia_smi = module.get_bin_path("nvidia-smi")
    if nvidia_smi is None:
        facts["gpu_query_error"] = "nvidia-smi not found"
        return facts
    rc, out, err = module.run_command(
        [nvidia_smi, "--query-gpu=" + NVIDIA_SMI_QUERY, "--format=csv,noheader,nounits"]
    )
    if rc != 0:
        facts["gpu_query_error"] = "nvidia-smi failed with %d: %s" % (rc, (err or out).strip())
        return facts
    try:
        facts["gpus"] = parse_nvidia_smi_csv(out, tuple(NVIDIA_SMI_QUERY.split(",")))
    except PreflightError as error:
        facts["gpu_query_error"] = str(error)
    return facts


def ib_port_facts():
    ports = []
    for port_dir in sorted(glob.glob(os.path.join(INFINIBAND_ROOT, "*", "ports", "*"))):
        device = os.path.basename(os.path.dirname(os.path.dirname(port_dir)))
        ports.append(
            parse_ib_port(
                device,
                os.path.basename(port_dir),
                read_text(os.path.join(port_dir, "state")) or "UNKNOWN",
                read_text(os.path.join(port_dir, "link_layer")) or "",
                read_text(os.path.join(port_dir, "rate")) or "",
            )
        )
    return ports


def shm_facts():
    try:
        stats = os.statvfs(SHM_PATH)
    except OSError:
        return {"size_mib": None}
    return {"size_mib": stats.f_blocks * stats.f_frsize // (1024 * 1024)}


def main():
    module = build_module(
        argument_spec={
            "runtimes": {"type": "list", "elements": "str", "default": ["crio", "containerd"]},
            "crio_runtime_endpoint": {"type": "str", "default": "unix:///var/run/crio/crio.sock"},
            "crio_config_file": {"type": "path", "default": "/etc/crio/crio.conf"},
            "crio_config_dir": {"type": "path", "default": "/etc/crio/crio.conf.d"},
            "crictl": {"type": "str", "default": "crictl"},
            "probe_image": {"type": "str", "default": ""},
            "probe_uids": {"type": "list", "elements": "int", "default": [0, 65534]},
            "login_user": {"type": "str", "default": ""},
            "min_memlock_kib": {"type": "str", "default": ""},
            "min_shm_mib": {"type": "int", "default": 0},
            "min_gpus": {"type": "int", "default": 0},
            "min_ib_ports_active": {"type": "int", "default": 0},
            "fail_on_unmet": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["login_user"] and not USER_NAME.match(params["login_user"]):
        module.fail_json(msg="login_user: %r is not a user name" % params["login_user"])
    try:
        parse_threshold_kib(params["min_memlock_kib"])
    except PreflightError as error:
        module.fail_json(msg="min_memlock_kib: %s" % error)
    if any(not 0 <= uid < 2**32 for uid in params["probe_uids"]):
        module.fail_json(
            msg="probe_uids: a uid is an integer from 0 to 4294967295, got %s" % params["probe_uids"]
        )

    facts = {
        "runtimes": runtime_facts(module, params),
        "login": login_facts(module, params["login_user"]) if params["login_user"] else {},
        "ib_ports": ib_port_facts(),
        "shm": shm_facts(),
        "nccl_env": nccl_environment(os.environ),
        "nccl_conf": parse_nccl_conf(read_text(NCCL_CONF) or ""),
    }
    facts.update(gpu_facts(module))
    checks = evaluate(facts, params)
    unmet = failures(checks)
    result = dict(facts, changed=False, ok=not unmet, checks=checks, failures=unmet)
    if unmet and params["fail_on_unmet"]:
        module.fail_json(msg="node preflight failed:\n" + "\n".join(unmet), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

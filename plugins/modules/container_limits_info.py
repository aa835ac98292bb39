#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_limits_info
short_description: Start a probe container through CRI-O and report the limits it gets
description:
  - Proves what limits a fresh container gets on a node, rather than trusting a configuration
    file. Through C(crictl), starts one pod on the host network (no CNI needed) with one
    container per uid in O(uids), reads each container's C(/proc/PID/limits) from the node, and
    removes the pod.
  - Reports CRI-O's effective C(default_ulimits) as CRI-O reads it (O(crio_config_file), then
    every file under O(crio_config_dir) in lexical order; the last file that sets it wins) and
    the limits of the daemon answering at O(runtime_endpoint), which containers inherit for
    every limit C(default_ulimits) does not set.
  - With O(expect_ulimits), checks that every container got exactly those limits. When a
    container cannot start, the failure names each limit above the host's hard limit (that of
    the CRI-O daemon, which runc cannot exceed without C(CAP_SYS_RESOURCE)) and the reason
    CRI-O gave.
  - M(gpuops.training.crio_limits) runs it after CRI-O restarts with a new drop-in;
    M(gpuops.training.node_preflight_info) runs the same probe.
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
options:
  runtime_endpoint:
    description: The CRI endpoint of the runtime (C(unix://) and the socket's path).
    type: str
    default: unix:///var/run/crio/crio.sock
  crictl:
    description: The crictl command, a name looked up in the PATH (and C(/usr/local/bin)) or a path.
    type: str
    default: crictl
  crio_config_file:
    description: CRI-O's main configuration file (its C(--config)); a missing file is skipped, as CRI-O does.
    type: path
    default: /etc/crio/crio.conf
  crio_config_dir:
    description: CRI-O's drop-in directory (its C(--config-dir)); CRI-O reads every file under it.
    type: path
    default: /etc/crio/crio.conf.d
  image:
    description:
      - Image of the probe containers; it must be on the node (nothing is pulled) and its command
        must keep running.
      - Empty takes CRI-O's C(pause_image) from its configuration, or else the image of the
        runtime whose name ends in C(/pause).
    type: str
    default: ""
  command:
    description:
      - Command of the probe containers. Empty runs the image's own, or C(pause_command) from
        CRI-O's configuration when the image is its C(pause_image).
    type: list
    elements: str
    default: []
  uids:
    description:
      - One probe container runs as each of these uids. Runtimes give every uid the same limits;
        a non-root uid is probed because that is what a hardened pod runs as. Empty probes nothing
        (the configuration and the daemon are still reported).
    type: list
    elements: int
    default: [0, 65534]
  expect_ulimits:
    description:
      - Limits every probe container must have, as C(name=soft:hard) (V(-1) is unlimited). Empty
        checks only that the containers start.
    type: list
    elements: str
    default: []
  wait_timeout:
    description: Seconds to wait for the runtime to answer (it may be starting); also crictl's timeout per call.
    type: int
    default: 60
  fail_on_problems:
    description: Fail when the runtime does not answer, a probe container cannot start, or one lacks an expected limit.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: The probe pod is removed before the module returns, so it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to show.
notes:
  - Needs root on the node (crictl talks to the runtime's socket; the containers' limits are read from C(/proc)).
  - Runs against any CRI runtime given an O(image); the defaults are CRI-O's.
seealso:
  - module: gpuops.training.node_preflight_info
"""

EXAMPLES = r"""
- name: Prove that new containers get the limits of the drop-in
  gpuops.training.container_limits_info:
    expect_ulimits: [memlock=-1:-1, nofile=65536:65536]
  become: true

- name: Report what a fresh container gets, as root and as uid 1000, without failing
  gpuops.training.container_limits_info:
    uids: [0, 1000]
    fail_on_problems: false
  become: true
  register: fresh_container
"""

RETURN = r"""
ok:
  description: Whether the runtime answered, every probe container started and got every expected limit.
  returned: always
  type: bool
problems:
  description: One line per problem; for a limit that cannot be applied, the host's hard limit and CRI-O's reason.
  returned: always
  type: list
  elements: str
  sample:
    - "a new container cannot start with these limits:"
    - "memlock=-1:-1 cannot be applied: this host's hard memlock limit is 8388608 bytes, ..."
endpoint:
  description: The runtime endpoint probed.
  returned: always
  type: str
answering:
  description: Whether the runtime answered within O(wait_timeout).
  returned: always
  type: bool
daemon:
  description:
    - The process listening on the endpoint's socket, C(pid), C(limits) (name to C(soft), C(hard)
      and C(unit); values in the units of C(/proc/PID/limits), or V(unlimited)) and
      C(cap_sys_resource); empty when none was found.
  returned: always
  type: dict
config_files:
  description: The files CRI-O reads, in its order.
  returned: always
  type: list
  elements: str
config_error:
  description: Why CRI-O's configuration could not be read; empty when it was.
  returned: always
  type: str
default_ulimits:
  description: CRI-O's effective C(default_ulimits).
  returned: always
  type: list
  elements: str
  sample: ["memlock=-1:-1", "nofile=65536:65536"]
default_ulimits_source:
  description: The last file that sets C(default_ulimits); empty when none does.
  returned: always
  type: str
image:
  description: The image the probe containers ran.
  returned: always
  type: str
containers:
  description: Per probe container, its C(uid), C(limits) (as for RV(daemon)) and C(memlock_kib) (C(soft), C(hard)).
  returned: always
  type: list
  elements: dict
  sample: [{"uid": 65534, "memlock_kib": {"soft": "unlimited", "hard": "unlimited"}, "limits": {}}]
error:
  description: Why the probe could not run; empty when it ran.
  returned: always
  type: str
reason:
  description: The runtime's own words when it refused the probe pod or a container; empty otherwise.
  returned: always
  type: str
summary:
  description: One line per probe container with the limits it got, for the names in O(expect_ulimits) (memlock when empty).
  returned: always
  type: list
  elements: str
  sample: ["as uid 0: memlock unlimited:unlimited, nofile 65536:65536"]
"""


from ansible_collections.gpuops.training.plugins.module_utils.cri_probe import (
    Crictl,
    crio_facts,
    find_crictl,
    judge_expected,
    summary_lines,
)
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module
from ansible_collections.gpuops.training.plugins.module_utils.ulimits import (
    parse_runtime_ulimit,
    ulimit_problems,
)

# Where container limits are read; module-level so the unit tests can point it at fixtures.
PROC_ROOT = "/proc"


def main():
    module = build_module(
        argument_spec={
            "runtime_endpoint": {"type": "str", "default": "unix:///var/run/crio/crio.sock"},
            "crictl": {"type": "str", "default": "crictl"},
            "crio_config_file": {"type": "path", "default": "/etc/crio/crio.conf"},
            "crio_config_dir": {"type": "path", "default": "/etc/crio/crio.conf.d"},
            "image": {"type": "str", "default": ""},
            "command": {"type": "list", "elements": "str", "default": []},
            "uids": {"type": "list", "elements": "int", "default": [0, 65534]},
            "expect_ulimits": {"type": "list", "elements": "str", "default": []},
            "wait_timeout": {"type": "int", "default": 60},
            "fail_on_problems": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    problems = ulimit_problems(params["expect_ulimits"])
    if problems:
        module.fail_json(msg="expect_ulimits: " + "; ".join(problems))
    if any(not 0 <= uid < 2**32 for uid in params["uids"]):
        module.fail_json(msg="uids: a uid is an integer from 0 to 4294967295, got %s" % params["uids"])
    if params["wait_timeout"] < 1:
        module.fail_json(msg="wait_timeout: must be at least 1 second, got %d" % params["wait_timeout"])
    crictl_path = find_crictl(module.get_bin_path, params["crictl"])
    if crictl_path is None:
        module.fail_json(
            msg="crictl: %s is not an executable on this node; install cri-tools, or name where crictl is"
            % params["crictl"]
        )

    crictl = Crictl(module.run_command, crictl_path, params["runtime_endpoint"], params["wait_timeout"])
    facts = crio_facts(
        params["runtime_endpoint"],
        crictl,
        params["crio_config_file"],
        params["crio_config_dir"],
        image=params["image"],
        command=params["command"],
        uids=params["uids"],
        wait_timeout=params["wait_timeout"],
        proc_root=PROC_ROOT,
    )
    problems = judge_expected(params["expect_ulimits"], facts)
    summary = summary_lines(
        [parse_runtime_ulimit(entry) for entry in params["expect_ulimits"]], facts["containers"]
    )
    result = dict(facts, changed=False, ok=not problems, problems=problems, summary=summary)
    if problems and params["fail_on_problems"]:
        module.fail_json(msg="\n".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

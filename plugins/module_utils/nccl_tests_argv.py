# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The command line of one nccl-tests collective, for each launcher of the nccl_tests role.

- ``local``: ``timeout --kill-after=30 T <binaries_dir>/<collective>_perf -b -e -f -g -n -w -c``;
- ``ssh``: the same ``timeout`` around ``mpirun -np N -H host1:slots,host2:slots --bind-to none
  -x NCCL_DEBUG -x <every env name> <extra args> <binary and its arguments>``, where slots is
  ``gpus_per_node / gpus_per_process`` ranks on each host and N their sum;
- ``mpijob``: that ``mpirun`` without ``-H`` (the Training Operator's hostfile names the
  workers) and without ``timeout`` (the wait and the MPIJob's deadline stop it), over
  ``nnodes`` workers.

The settings are the role's variables without their ``nccl_tests_`` prefix, plus
``collective`` and, for ssh, ``hosts`` (the addresses mpirun starts ranks on, in order). Pure
functions: the filter plugin calls them, the unit tests exercise them directly.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.training.plugins.module_utils.setting_values import ENV_NAME
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_bool as _bool
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int

PREFIX = "nccl_tests_"
LAUNCHERS = ("local", "ssh", "mpijob")
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
    "sendrecv",
    "scatter",
    "gather",
    "hypercube",
)
# What timeout gives a collective that ignores SIGTERM before SIGKILL.
KILL_AFTER_S = 30
DEFAULTS = {
    "launcher": "local",
    "collective": "all_reduce",
    "binaries_dir": "/opt/nccl-tests/build",
    "min_bytes": "8",
    "max_bytes": "8G",
    "step_factor": 2,
    "gpus_per_process": 8,
    "iters": 20,
    "warmup_iters": 5,
    "check": True,
    "timeout_s": 1800,
    "env": {},
    "gpus_per_node": 8,
    "mpirun": "mpirun",
    "mpirun_extra_args": [],
    "hosts": [],
    "nnodes": 2,
}
# nccl-tests' sizes: a number with an optional K, M or G (powers of 1024).
_SIZE = re.compile(r"^[0-9]+[KMG]?$")


class ArgvError(ValueError):
    """Settings that cannot be rendered; the message lists every problem."""


def _var(key):
    return PREFIX + key


def settings_with_defaults(settings):
    if settings is not None and not isinstance(settings, dict):
        raise ArgvError(
            "the settings must be a mapping of nccl_tests_* variables (without the prefix), got %s"
            % type(settings).__name__
        )
    merged = dict(DEFAULTS)
    merged.update(settings or {})
    return merged


def _check_int(found, s, key, minimum):
    value = _int(s.get(key))
    if value is None or value < minimum:
        found.append("%s must be an integer of at least %d, got %r" % (_var(key), minimum, s.get(key)))
        return None
    return value


def _strings(value):
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def problems(settings):
    """Every problem with the settings, each naming its role variable; empty when valid."""
    try:
        s = settings_with_defaults(settings)
    except ArgvError as error:
        return [str(error)]
    found = []
    launcher = s.get("launcher")
    if launcher not in LAUNCHERS:
        found.append("%s must be one of %s, got %r" % (_var("launcher"), ", ".join(LAUNCHERS), launcher))
    if s.get("collective") not in COLLECTIVES:
        found.append(
            "%s: %r is not a collective nccl-tests builds (%s)"
            % (_var("collectives"), s.get("collective"), ", ".join(COLLECTIVES))
        )
    if not (isinstance(s.get("binaries_dir"), str) and s["binaries_dir"].strip()):
        found.append("%s must name the directory of the nccl-tests binaries" % _var("binaries_dir"))
    for key in ("min_bytes", "max_bytes"):
        if not _SIZE.match(str(s.get(key)).strip()):
            found.append(
                "%s must be a size in nccl-tests' syntax (a number, optionally with K, M or G), got %r"
                % (_var(key), s.get(key))
            )
    _check_int(found, s, "step_factor", 2)
    per_process = _check_int(found, s, "gpus_per_process", 1)
    _check_int(found, s, "iters", 1)
    _check_int(found, s, "warmup_iters", 0)
    if launcher != "mpijob":
        _check_int(found, s, "timeout_s", 1)
    env = s.get("env")
    if not isinstance(env, dict):
        found.append("%s must be a mapping, got %r" % (_var("env"), env))
    else:
        for name in env:
            if not ENV_NAME.match(str(name)):
                found.append("%s: %r is not a valid environment variable name" % (_var("env"), name))
    if launcher in ("ssh", "mpijob"):
        per_node = _check_int(found, s, "gpus_per_node", 1)
        if per_node and per_process and per_node % per_process:
            found.append(
                "%s (%d) must be a multiple of %s (%d): every node runs the same number of ranks"
                % (_var("gpus_per_node"), per_node, _var("gpus_per_process"), per_process)
            )
        if not (isinstance(s.get("mpirun"), str) and s["mpirun"].strip()):
            found.append("%s must name the mpirun command" % _var("mpirun"))
        if not _strings(s.get("mpirun_extra_args")):
            found.append(
                "%s must be a list of strings, got %r"
                % (_var("mpirun_extra_args"), s.get("mpirun_extra_args"))
            )
    if launcher == "ssh":
        hosts = s.get("hosts")
        if not (_strings(hosts) and hosts and all(host.strip() for host in hosts)):
            found.append(
                "the ssh launcher needs the hosts of the play (addresses mpirun reaches), got %r" % hosts
            )
        elif any(re.search(r"[\s,:]", host) for host in hosts):
            found.append(
                "the ssh launcher's host addresses (ansible_host) must be host names or IPv4 addresses "
                "for mpirun's -H host:slots, without spaces, ',' or ':', got %r" % hosts
            )
    if launcher == "mpijob":
        _check_int(found, s, "nnodes", 1)
    return found


def _checked(settings):
    s = settings_with_defaults(settings)
    found = problems(s)
    if found:
        raise ArgvError("\n".join(found))
    return s


def binary(settings):
    """The collective's binary: <binaries_dir>/<collective>_perf."""
    return "%s/%s_perf" % (str(settings["binaries_dir"]).rstrip("/"), settings["collective"])


def benchmark_argv(settings):
    """The binary and the benchmark's arguments, the same under every launcher."""
    s = _checked(settings)
    return [
        binary(s),
        "-b", str(s["min_bytes"]).strip(),
        "-e", str(s["max_bytes"]).strip(),
        "-f", str(_int(s["step_factor"])),
        "-g", str(_int(s["gpus_per_process"])),
        "-n", str(_int(s["iters"])),
        "-w", str(_int(s["warmup_iters"])),
        "-c", "1" if _bool(s["check"]) else "0",
    ]  # fmt: skip


def ranks_per_node(settings):
    return _int(settings["gpus_per_node"]) // _int(settings["gpus_per_process"])


def exported_env(settings):
    """The variables mpirun passes on to every rank with -x: NCCL_DEBUG, then every env name."""
    names = ["NCCL_DEBUG"]
    for name in settings.get("env") or {}:
        if str(name) not in names:
            names.append(str(name))
    return names


def mpirun_argv(settings):
    """mpirun over the ssh hosts (-H) or the MPIJob's workers (the operator's hostfile)."""
    s = _checked(settings)
    per_node = ranks_per_node(s)
    if s["launcher"] == "ssh":
        nodes = len(s["hosts"])
        placement = ["-H", ",".join("%s:%d" % (host.strip(), per_node) for host in s["hosts"])]
    else:
        nodes = _int(s["nnodes"])
        placement = []
    argv = [s["mpirun"].strip(), "-np", str(nodes * per_node)] + placement + ["--bind-to", "none"]
    for name in exported_env(s):
        argv += ["-x", name]
    return argv + list(s["mpirun_extra_args"]) + benchmark_argv(s)


def timeout_argv(settings):
    return ["timeout", "--kill-after=%d" % KILL_AFTER_S, str(_int(settings["timeout_s"]))]


def nccl_tests_argv(settings):
    """The whole command line of one collective under the launcher the settings name."""
    s = _checked(settings)
    if s["launcher"] == "local":
        return timeout_argv(s) + benchmark_argv(s)
    if s["launcher"] == "ssh":
        return timeout_argv(s) + mpirun_argv(s)
    return mpirun_argv(s)

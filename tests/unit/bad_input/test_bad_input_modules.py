"""Every module, driven with random and adversarial arguments, in check mode and for real.

Each module runs in-process (the run_module helper of the module tests) in a fresh sandbox
directory that is also the working directory, HOME and the only place paths point to. A
module must end through exit_json or fail_json - never with another exception - and a
failure must say what is wrong naming the argument (or be the module's own verdict, such as
"NCCL check failed"). Check mode creates nothing; a real run creates files only where the
module writes (run_report's dest, original_file's copy) and nothing outside the sandbox.

The Kubernetes modules run three ways: with a kubeconfig that does not exist, with one whose
server refuses connections (the message must name the kubeconfig and the server, not be a
traceback), and against served objects (the tests' fixtures) so the arguments reach the
wait loop, where a sleep ends the example after checking its length.

The options come from each module's DOCUMENTATION (doc fragments included), so a new option
is driven without a change here; a new module without an entry in CASES fails the suite.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import math
import os
import pathlib
import re
import sys
import tempfile
import threading
import time

import pytest
import yaml
from bad_input_values import SETTINGS, TALLY, anything, names_one_of, replace_one, text
from hypothesis import example, given
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils import k8s_client

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE = "ansible_collections.gpuops.training.plugins."
FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures"
# Where a path argument points; replaced by the sandbox directory before each run.
WS = "@WS@"
# The working directory is this deep inside the sandbox, so '..' chains stay inside it.
DEPTH = ("a", "b", "c", "d", "e", "f", "g", "h")
UNREACHABLE = "https://127.0.0.1:1"
MAX_SLEEP = threading.TIMEOUT_MAX


def discovered_modules():
    """The modules that run as modules; one that only documents an action (plugins/action
    holds its code and runs it on the controller) has its bad-input test beside the action's."""
    actions = {path.stem for path in (REPO_ROOT / "plugins" / "action").glob("*.py")}
    return sorted(
        path.stem for path in (REPO_ROOT / "plugins" / "modules").glob("*.py") if path.stem not in actions
    )


def module_options(name):
    """The module's options from its DOCUMENTATION and the doc fragments it extends."""
    module = importlib.import_module(PACKAGE + "modules." + name)
    doc = yaml.safe_load(module.DOCUMENTATION)
    options = dict(doc.get("options") or {})
    for fragment in doc.get("extends_documentation_fragment") or []:
        # gpuops.training.NAME, or gpuops.training.NAME.VARIABLE for a fragment's other part.
        name, _dot, variable = fragment.split(".", 2)[2].partition(".")
        fragment_module = importlib.import_module(PACKAGE + "doc_fragments." + name)
        text = getattr(fragment_module.ModuleDocFragment, (variable or "documentation").upper())
        options.update(yaml.safe_load(text).get("options") or {})
    return module, options


# --------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------

# Paths inside the sandbox: relative to the working directory, '..' chains that stay inside,
# absolute ones under it, and the files set up there. Never anything outside the sandbox, so
# a module that writes or removes (run_report, original_file) cannot touch the machine.
SANDBOX_FILES = [
    "logs/rank0.log",
    "logs/rank1.log",
    "logs/empty.log",
    "etc/crio/99-ulimits.conf",
    "etc/crio/ours.conf",
    "etc/crio/ours.conf.gpuops-original",
    "etc/crio/crio.conf",
    "etc/crio/crio.conf.d/99-ulimits.conf",
    "etc/link.conf",
]
sandbox_path = st.one_of(
    st.sampled_from(
        [
            WS,
            WS + "/",
            WS + "/logs",
            WS + "/logs/*.log",
            WS + "/**/*.log",
            WS + "/nothing/*.log",
            WS + "/report",
            WS + "/etc",
            WS + "/etc/crio/new.conf",
            WS + "/etc/link.conf",
            "../../etc",
            "../../../../../../etc/passwd",
            "..",
            ".",
            "~",
            "~/logs/rank0.log",
            "a\x00b",
            "x" * 300,
            "é漢字",
            "",
            " ",
            "-rf",
        ]
        + [WS + "/" + name for name in SANDBOX_FILES]
    ),
    # Random relative paths: a leading '/' would leave the sandbox, '**' could walk the disk.
    st.text(max_size=16).map(lambda value: value.lstrip("/").replace("*", "")),
)
sandbox_paths = st.lists(sandbox_path, max_size=3)


def typed(option):
    """A value of the option's documented type, valid or not."""
    kind = option.get("type", "str")
    if option.get("choices"):
        valid = st.sampled_from(option["choices"])
        if kind == "list":
            valid = st.lists(valid, max_size=3)
    elif kind == "int":
        valid = st.one_of(
            st.integers(min_value=-5, max_value=120),
            st.sampled_from([0, 1, 10**30, -(10**30), 10**400, 2**63]),
            st.sampled_from(["10", "-1", "0x10", "1e3", "1.5"]),
        )
    elif kind == "float":
        valid = st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from(["nan", "inf", "-inf", "1e309", "12.5"]),
        )
    elif kind == "bool":
        valid = st.one_of(st.booleans(), st.sampled_from(["yes", "no", "maybe", 2, ""]))
    elif kind == "path":
        valid = sandbox_path
    elif kind == "list":
        element = {"type": option.get("elements", "str")}
        valid = st.lists(typed(element), max_size=3)
    elif kind == "dict":
        suboptions = option.get("suboptions")
        if suboptions:
            valid = st.fixed_dictionaries(
                {}, optional={key: typed(value) for key, value in suboptions.items()}
            )
        else:
            valid = st.dictionaries(text, anything, max_size=3)
    elif kind == "raw":
        valid = anything
    else:
        valid = text
    if kind == "path" or (kind == "list" and option.get("elements") == "path"):
        # A path option never gets arbitrary values: they could point outside the sandbox.
        return valid
    return st.one_of(valid, valid, anything)


def arguments(options, overrides, base):
    """Arguments: a plausible base with options added, dropped or set to adversarial values."""
    strategies = {key: overrides.get(key, typed(option)) for key, option in options.items()}
    return st.tuples(
        st.fixed_dictionaries({}, optional=strategies),
        st.sampled_from(sorted(base) or [None]),
        st.booleans(),
    ).map(lambda parts: _merge(base, *parts))


def _merge(base, extra, dropped, drop):
    result = dict(base)
    if drop and dropped is not None:
        result.pop(dropped, None)
    result.update(extra)
    return result


# --------------------------------------------------------------------------------------
# what each module gets and may do
# --------------------------------------------------------------------------------------


def load(relative):
    return yaml.safe_load((FIXTURES / relative).read_text())


NCCL_LOG = (FIXTURES / "nccl" / "socket-fallback-ib-profile.log").read_text()
METRICS = (
    '{"schema":"gpuops.metrics/v1","event":"run_start","rank":0,"world_size":1,"host":"h","attempt":0,'
    '"backend":"gloo"}\n'
    '{"schema":"gpuops.metrics/v1","event":"epoch","rank":0,"world_size":1,"epoch":0,"step":2,"loss":1.5}\n'
)
pod_logs = st.lists(
    st.one_of(
        st.sampled_from([{"log": NCCL_LOG}, {"name": "p", "log_lines": ["a", 1, None]}, METRICS]),
        replace_one({"name": "pod-0", "log": METRICS}),
        anything,
    ),
    max_size=3,
)
log_content = st.one_of(st.sampled_from([NCCL_LOG, METRICS, NCCL_LOG[:300]]), text)
LOG_OVERRIDES = {
    "paths": sandbox_paths,
    "base_dir": sandbox_path,
    "content": log_content,
    "pod_logs": pod_logs,
}

SUMMARY = {
    "schema": "gpuops.run-summary/v1",
    "verdict": "passed",
    "failures": [],
    "run_id": "r1",
    "ranks": [{"rank": 0, "host": "h", "status": "ok"}],
    "epochs": [{"epoch": 0, "ranks": 1, "loss": 1.5}],
    "steps": [{"step": 2, "ranks": 1, "loss": 1.5}],
    "loss": {"first": 1.5, "last": 1.5},
    "throughput": {},
    "checkpoints": {"count": 0, "last": None},
    "nccl": {"used": False, "statement": "NCCL was not used", "errors": [], "ranks": []},
    "logs": [WS + "/logs/*.log"],
}


# The CRI modules run the tests' fake crictl (tests/unit/fixtures/cri), never a real one.
CRICTL_NAMES = st.sampled_from(
    ["crictl", WS + "/bin/crictl", "/nonexistent/crictl", "", "-x", "a b", "a\x00b"]
)
PROBE_IMAGES = st.one_of(st.sampled_from(["", "localhost/site/pause:3.10", "localhost/absent:1"]), text)
PROBE_UIDS = st.lists(st.one_of(st.sampled_from([0, 65534, -1, 2**32, 10**30]), st.integers()), max_size=3)


# A health pass's nodes as node_health_jobs returns them, and a quarantine's result.
HEALTH_RESULT = {
    "verdict": "isolate",
    "summary": "isolate: 1 isolate; checked nvidia_smi",
    "complete": True,
    "findings": [
        {"device": "GPU 0", "check": "xid_48", "class": "isolate", "reason": "a DBE", "remedy": "drain it"}
    ],
    "not_run": [],
}
HEALTH_NODES = [
    {"node": "gpu-1", "result": HEALTH_RESULT},
    {"node": "gpu-2", "result": None, "error": "the node is not Ready"},
]
health_nodes = st.one_of(
    st.just(HEALTH_NODES),
    st.lists(
        st.one_of(
            replace_one(HEALTH_NODES[0]),
            st.builds(lambda result: {"node": "gpu-3", "result": result}, replace_one(HEALTH_RESULT)),
            anything,
        ),
        max_size=3,
    ),
    anything,
)
QUARANTINE_RESULT = {
    "nodes": [{"node": "gpu-1", "action": "quarantine", "check": "xid_48", "reason": "r", "was": None}],
    "max_percent": 10,
    "allowed": 1,
    "over_cap": False,
    "message": "Quarantine: quarantined gpu-1.",
}
READY_NODE = {
    "metadata": {"name": "gpu-1", "resourceVersion": "7"},
    "spec": {"taints": [{"key": "gpuops.training/unhealthy", "value": "xid_48", "effect": "NoSchedule"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


class Case:
    """What a module gets (``base`` arguments, ``overrides`` per option) and how it may end.

    ``verdict``: a regex for failures that are the module's answer rather than bad input.
    ``writes``: the sandbox paths (relative) a real run may create, given the arguments.
    ``kube``: the module talks to Kubernetes; ``served`` the reads to fake with fixtures, names
    of the module's own or of ``served_from`` (the module_utils it calls).
    """

    def __init__(
        self, base=None, overrides=None, verdict=None, writes=None, served=None, served_from=None, examples=50
    ):
        self.base = base or {}
        self.overrides = overrides or {}
        self.verdict = re.compile(verdict) if verdict else None
        self.writes = writes
        self.served = served
        self.served_from = served_from
        self.kube = served is not None
        self.examples = examples


def run_report_writes(args, workspace, cwd):
    dest = args.get("dest")
    if not isinstance(dest, str) or not dest:
        return set()
    return {os.path.abspath(os.path.join(cwd, os.path.expanduser(dest)))}


def logs_writes(args, workspace, cwd):
    dest = args.get("dest")
    if not isinstance(dest, str) or not dest:
        return set()
    return {os.path.abspath(os.path.join(cwd, os.path.expanduser(dest)))}


class ServedLogs:
    """The kubernetes client's CoreV1Api as training_job_logs uses it, serving one short log."""

    class CoreV1Api:
        def __init__(self, _api):
            pass

        def read_namespaced_pod_log(self, name, namespace, **options):
            stamped = b"2026-11-22T05:00:00.000000001Z NCCL INFO init\n"
            return ServedLogs.Response(stamped if options.get("timestamps") else b"log\n")

    class Response(io.BytesIO):
        def release_conn(self):
            pass


def history_writes(args, workspace, cwd):
    directory = args.get("dir")
    if not isinstance(directory, str) or not directory:
        return set()
    return {os.path.abspath(os.path.join(cwd, os.path.expanduser(directory)))}


HISTORY_RECORD = {"node": "gpu-1", "source": "nccl_tests", "metric": "busbw_gbps", "value": 480.0}


def original_file_writes(args, workspace, cwd):
    path = args.get("path")
    if not isinstance(path, str) or not path:
        return set()
    full = os.path.abspath(os.path.join(cwd, os.path.expanduser(path)))
    suffix = str(args.get("suffix", ".gpuops-original"))
    return {full, full + suffix, full + suffix + ".tmp"}


CASES = {
    "nccl_log_info": Case(
        base={"content": NCCL_LOG}, overrides=LOG_OVERRIDES, verdict=r"^NCCL check failed:\n"
    ),
    "nccl_tests_info": Case(
        base={"content": NCCL_LOG}, overrides=LOG_OVERRIDES, verdict=r"^nccl-tests check failed:\n"
    ),
    # An isolate run's plan and verdict from tests whose logs are the sandbox's (or nowhere).
    "nccl_tests_isolate": Case(
        base={
            "nodes": ["gpu-1", "gpu-2", "gpu-3"],
            "tests": [
                {
                    "id": "r0-00",
                    "round": 0,
                    "kind": "single",
                    "nodes": ["gpu-1"],
                    "log": WS + "/logs/rank0.log",
                },
                {
                    "id": "r0-01",
                    "round": 0,
                    "kind": "single",
                    "nodes": ["gpu-2"],
                    "log": WS + "/logs/empty.log",
                },
                {"id": "r0-02", "round": 0, "kind": "single", "nodes": ["gpu-3"], "log": WS + "/no-such.log"},
            ],
        },
        overrides={
            "tests": st.one_of(
                st.lists(
                    replace_one(
                        {"id": "r1-00", "round": 1, "kind": "pair", "nodes": ["gpu-1", "gpu-2"], "log": "l"}
                    ),
                    max_size=3,
                ),
                anything,
            ),
            "fabric_profile": st.one_of(
                replace_one(
                    {
                        "name": "ib_ndr",
                        "description": "d",
                        "gbit_per_nic": 400,
                        "nics_per_node": 8,
                        "expected_share": 0.96,
                        "sources": {"gbit_per_nic": "a", "nics_per_node": "b", "expected_share": "c"},
                    }
                ),
                anything,
            ),
        },
    ),
    "training_log_info": Case(
        base={"content": METRICS}, overrides=LOG_OVERRIDES, verdict=r"^training run check failed:\n"
    ),
    # Live mode reads the sandbox's sysfs and runs the fake nvidia-smi and journalctl of its
    # bin directory (make_sandbox), never the machine's.
    "node_health_info": Case(
        base={"sysfs_root": WS + "/sys"},
        overrides={
            "checks": st.one_of(
                st.lists(st.sampled_from(["nvidia_smi", "kernel_log", "infiniband", "gpu", ""]), max_size=4),
                anything,
            ),
        },
    ),
    "node_health_report": Case(
        base={"run_id": "health-1", "platform": "ssh", "dest": WS + "/report", "nodes": HEALTH_NODES},
        overrides={
            "nodes": health_nodes,
            "quarantine": st.one_of(
                st.just({}), st.just(QUARANTINE_RESULT), replace_one(QUARANTINE_RESULT), anything
            ),
        },
        writes=run_report_writes,
    ),
    # The Jobs' API calls are served (health.probe's readers); the wait ends the example at its first sleep.
    "node_health_jobs": Case(
        base={"run_id": "health-1", "namespace": "gpuops-node-health", "image": "registry.example/ee:1"},
        overrides={
            "nodes": st.one_of(st.just(["gpu-1"]), st.lists(text, max_size=2)),
            "pod_annotations": st.one_of(
                st.just({"a.example/b": "c"}), st.dictionaries(text, anything, max_size=2)
            ),
            "cpu": st.one_of(st.sampled_from(["100m", "0", "-1", "1e3", "lots"]), text),
            "memory": st.one_of(st.sampled_from(["512Mi", "0", "1.5Gi", "Mi"]), text),
        },
        served={
            "read_namespace": lambda *args: {"metadata": {"name": "gpuops-node-health"}},
            "list_nodes": lambda *args: [READY_NODE],
            "read_node": lambda *args: READY_NODE,
            "create_job": lambda *args: {},
            "list_jobs": lambda *args: [],
            "list_pods": lambda *args: [],
            "read_log": lambda *args: "",
            "delete_job": lambda *args: None,
        },
        served_from="module_utils.health.probe",
    ),
    "node_health_quarantine": Case(
        base={"nodes": HEALTH_NODES, "run_id": "health-1"},
        overrides={"nodes": health_nodes},
        served={"read_node": lambda *args: READY_NODE, "patch_node": lambda *args: READY_NODE},
        served_from="module_utils.health.quarantine",
    ),
    "node_preflight_info": Case(
        base={
            "crio_runtime_endpoint": "unix://" + WS + "/run/crio.sock",
            "crio_config_file": WS + "/etc/crio/crio.conf",
            "crio_config_dir": WS + "/etc/crio/crio.conf.d",
        },
        overrides={
            "login_user": st.one_of(st.sampled_from(["root", "trainer", "-c", "--help", "a b"]), text),
            "min_memlock_kib": st.one_of(st.sampled_from(["unlimited", "65536", "-1", "1Gi"]), text),
            "crictl": CRICTL_NAMES,
            "probe_image": PROBE_IMAGES,
            "probe_uids": PROBE_UIDS,
        },
        verdict=r"^node preflight failed:\n",
    ),
    "container_limits_info": Case(
        base={
            "runtime_endpoint": "unix://" + WS + "/run/crio.sock",
            "crio_config_file": WS + "/etc/crio/crio.conf",
            "crio_config_dir": WS + "/etc/crio/crio.conf.d",
            "wait_timeout": 1,
        },
        overrides={
            "crictl": CRICTL_NAMES,
            "image": PROBE_IMAGES,
            "uids": PROBE_UIDS,
            "expect_ulimits": st.lists(
                st.one_of(
                    st.sampled_from(
                        ["memlock=-1:-1", "memlock=65536:65536", "memlock=-1", "noproc=1:1", "nofile=2:1"]
                    ),
                    text,
                ),
                max_size=3,
            ),
            "wait_timeout": st.one_of(st.integers(-3, 3), st.just(10**30)),
        },
        verdict=r"(a new container cannot start|: configured |CRI-O does not answer|is not on the node"
        r"|no image to probe with|stopped before its limits)",
    ),
    "original_file": Case(
        base={"path": WS + "/etc/crio/99-ulimits.conf", "marker": "(gpuops.training.crio_limits)"},
        overrides={"suffix": st.one_of(st.sampled_from([".keep", "/x", ".conf", "", "..", "a\x00"]), text)},
        writes=original_file_writes,
    ),
    "node_history": Case(
        base={"dir": WS + "/history", "records": [HISTORY_RECORD]},
        overrides={
            "records": st.one_of(
                st.just([HISTORY_RECORD]),
                st.lists(st.one_of(replace_one(HISTORY_RECORD), anything), max_size=3),
                anything,
            ),
            "drop_percent": st.one_of(st.sampled_from([15, 0, 100, -1, 99.9]), anything),
            "window": st.one_of(st.integers(-1, 12), anything),
            "min_samples": st.one_of(st.integers(-1, 12), anything),
            "keep": st.one_of(st.integers(-1, 12), anything),
            "dir": st.one_of(st.sampled_from([WS + "/history", WS + "/a/../h", ""]), text),
        },
        writes=history_writes,
    ),
    "run_report": Case(
        base={"summary": SUMMARY, "dest": WS + "/report", "plots": False},
        overrides={
            "summary": st.one_of(
                replace_one(SUMMARY), replace_one(SUMMARY, st.lists(anything, max_size=2)), anything
            ),
            "plots": st.one_of(st.just(False), st.just(False), anything),
        },
        writes=run_report_writes,
        examples=40,
    ),
    "training_job_logs": Case(
        base={"namespace": "training", "pod_selector": "run=rn", "dest": WS + "/runs/rn/logs"},
        overrides={
            "mode": st.one_of(st.sampled_from(["early", "final"]), anything),
            "parallel": st.one_of(st.integers(-2, 4), anything),
            "dest": st.one_of(st.sampled_from([WS + "/logs", WS + "/a/../b", ""]), text),
        },
        served={
            "list_pods": lambda *args: [load("jobs/pod-running.yaml"), load("jobs/pod-unschedulable.yaml")],
            "node_allocatable": lambda *args: ({}, ""),
            "client": ServedLogs,
        },
        served_from="module_utils.pod_log_collect",
        writes=logs_writes,
    ),
    "mcp_wait": Case(
        base={"pools": ["worker"], "timeout": 0},
        served={"read_pool": lambda *args: load("mcp/updating.yaml")},
        verdict=r"MachineConfigPool \S+ (did not finish rolling out|not found)",
    ),
    "operator_wait": Case(
        base={"crds": ["pytorchjobs.kubeflow.org"], "deployments": ["kubeflow/training-operator"]},
        overrides={
            "deployments": st.lists(
                st.one_of(st.sampled_from(["ns/name", "/x", "a/b/c", "x"]), text), max_size=3
            ),
            "subscriptions": st.lists(st.one_of(st.just("ns/gpu-operator"), text), max_size=2),
        },
        served={
            "read_crd": lambda *args: load("operators/crd-established.yaml"),
            "read_deployment": lambda *args: load("operators/deployment-rolling.yaml"),
            "list_pods": lambda *args: [load("operators/pod-unschedulable.yaml")],
            "read_subscription": lambda *args: load("operators/subscription-installed.yaml"),
            "read_csv": lambda *args: load("operators/csv-installing.yaml"),
            "read_cluster_policy": lambda *args: load("operators/clusterpolicy-not-ready.yaml"),
        },
        verdict=r"(is not ready after|will not become ready)",
    ),
    "training_job_wait": Case(
        base={"kind": "PyTorchJob", "name": "rn", "namespace": "training", "pod_selector": "run=rn"},
        overrides={
            "seen_pods": st.one_of(
                st.lists(replace_one({"name": "p-0", "phase": "Pending", "age_s": 5}), max_size=2), anything
            ),
        },
        served={
            "read_workload": lambda *args: load("jobs/pytorchjob-running.yaml"),
            "list_pods": lambda *args: [load("jobs/pod-running.yaml"), load("jobs/pod-unschedulable.yaml")],
            "list_events": lambda *args: load("stuck/job-unschedulable-events.yaml"),
        },
        # The unschedulable pod has been so since 2026-11-22: a stuck time ends the wait at once.
        verdict=r"(failed|did not finish within|is stuck: it has not gone on for)",
    ),
}


def test_every_module_has_a_case():
    assert sorted(set(discovered_modules()) - set(CASES)) == [], "modules without a bad-input case in CASES"
    assert sorted(set(CASES) - set(discovered_modules())) == [], "CASES for modules that no longer exist"


# --------------------------------------------------------------------------------------
# the sandbox
# --------------------------------------------------------------------------------------

PROC_LIMITS = "Limit  Soft Limit  Hard Limit  Units\nMax locked memory  65536  65536  bytes\n"
FAKE_CRICTL = FIXTURES / "cri" / "fake_crictl.py"
FAKE_SU = "#!/bin/sh\nprintf '64\\nunlimited\\n'\n"


def make_sandbox(root):
    workspace = pathlib.Path(root) / "ws"
    cwd = workspace.joinpath(*DEPTH)
    cwd.mkdir(parents=True)
    for relative in SANDBOX_FILES:
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
    (workspace / "logs" / "rank0.log").write_text(NCCL_LOG)
    (workspace / "logs" / "rank1.log").write_text(METRICS)
    (workspace / "logs" / "empty.log").write_text("")
    (workspace / "etc" / "crio" / "99-ulimits.conf").write_text("[crio.runtime]\n# the node's own\n")
    (workspace / "etc" / "crio" / "ours.conf").write_text("# (gpuops.training.crio_limits)\n")
    (workspace / "etc" / "crio" / "ours.conf.gpuops-original").write_text("# the node's own\n")
    os.symlink("crio/ours.conf", workspace / "etc" / "link.conf")
    (workspace / "report").mkdir()
    (workspace / "proc" / "812").mkdir(parents=True)
    (workspace / "proc" / "812" / "comm").write_text("crio\n")
    (workspace / "proc" / "812" / "limits").write_text(PROC_LIMITS)
    (workspace / "bin").mkdir()
    (workspace / "bin" / "su").write_text(FAKE_SU)
    (workspace / "bin" / "su").chmod(0o755)
    (workspace / "etc" / "crio" / "crio.conf").write_text(
        '[crio.image]\npause_image = "localhost/site/pause:3.10"\n'
    )
    (workspace / "etc" / "crio" / "crio.conf.d" / "99-ulimits.conf").write_text(
        '[crio.runtime]\ndefault_ulimits = ["memlock=-1:-1"]\n'
    )
    # The fake crictl's scenario and call logs exist beforehand: appending creates nothing.
    (workspace / "cri").mkdir()
    (workspace / "cri" / "calls.log").write_text("")
    (workspace / "cri" / "calls.log.containers").write_text("")
    (workspace / "cri" / "scenario.json").write_text(
        json.dumps(
            {
                "images": ["localhost/site/pause:3.10"],
                "pids": {"0": 812, "65534": 812},
                "log": str(workspace / "cri" / "calls.log"),
            }
        )
    )
    # node_health_info's live mode: a GPU report and a kernel log with an Xid, and one port.
    for tool, fixture in (
        ("nvidia-smi", "nvidia-smi-tesla-p100-r510.xml"),
        ("journalctl", "journal-xid79-fallen-off-bus.log"),
    ):
        (workspace / "bin" / tool).write_text("#!/bin/sh\nexec cat '%s'\n" % (FIXTURES / "health" / fixture))
        (workspace / "bin" / tool).chmod(0o755)
    port = workspace / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for attribute, value in (
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("rate", "400 Gb/sec (4X NDR)"),
    ):
        (port / attribute).write_text(value + "\n")
    crictl = '#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, FAKE_CRICTL)
    (workspace / "bin" / "crictl").write_text(crictl)
    (workspace / "bin" / "crictl").chmod(0o755)
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": UNREACHABLE, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    (workspace / "unreachable.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    return workspace, cwd


def tree(root):
    found = set()
    for directory, subdirectories, files in os.walk(root):
        for name in subdirectories + files:
            found.add(os.path.join(directory, name))
    return found


def substitute(value, workspace):
    if isinstance(value, str):
        return value.replace(WS, str(workspace))
    if isinstance(value, list):
        return [substitute(item, workspace) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, workspace) for key, item in value.items()}
    return value


class Waiting(Exception):
    """Raised by the fake sleep: the module would wait (the example ends there)."""


def checked_sleep(seconds):
    assert isinstance(seconds, (int, float)) and math.isfinite(seconds), seconds
    assert 0 <= seconds <= MAX_SLEEP, "time.sleep(%r) would fail or never end" % (seconds,)
    raise Waiting()


@pytest.fixture(autouse=True)
def quiet_retries():
    """urllib3 logs each retry against the refusing server; that is expected here."""
    logger = logging.getLogger("urllib3.connectionpool")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@contextlib.contextmanager
def environment(name, case, module, workspace, cwd, kube_mode):
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        patch.setenv("HOME", str(workspace))
        patch.setenv("PATH", "%s:/usr/bin:/bin" % (workspace / "bin"))
        for variable in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "KUBERNETES_SERVICE_HOST"):
            patch.delenv(variable, raising=False)
        patch.setenv("FAKE_CRICTL_SCENARIO", str(workspace / "cri" / "scenario.json"))
        if name == "container_limits_info":
            patch.setattr(module, "PROC_ROOT", str(workspace / "proc"))
        if name == "node_preflight_info":
            patch.setattr(module, "PROBE_TIMEOUT", 1)
            patch.setattr(module, "PROC_ROOT", str(workspace / "proc"))
            patch.setattr(module, "INFINIBAND_ROOT", str(workspace / "infiniband"))
            patch.setattr(module, "NCCL_CONF", str(workspace / "nccl.conf"))
            patch.setattr(module, "NVIDIA_DRIVER_VERSION", str(workspace / "absent"))
        if case.kube:
            if kube_mode == "missing":
                patch.setenv("K8S_AUTH_KUBECONFIG", str(workspace / "no-such.kubeconfig"))
            elif kube_mode == "unreachable":
                patch.setenv("K8S_AUTH_KUBECONFIG", str(workspace / "unreachable.kubeconfig"))
            else:
                # Every wait module connects through k8s_client.connect.
                patch.setattr(k8s_client, "api_client", lambda kubeconfig, context, pool_size=None: object())
                target = importlib.import_module(PACKAGE + case.served_from) if case.served_from else module
                for reader, serve in case.served.items():
                    patch.setattr(target, reader, serve)
            # The time module itself: the wait modules sleep in their own loop or in k8s_client.poll.
            patch.setattr(time, "sleep", checked_sleep)
        yield


# --------------------------------------------------------------------------------------
# the check
# --------------------------------------------------------------------------------------

PYTHON_ERRORS = re.compile(
    r"Traceback \(most recent|object has no attribute|unhashable type|is not iterable|not subscriptable"
    r"|unsupported operand|embedded null (byte|character)|MaxRetryError|OverflowError"
)


# ansible-core's own messages for a string given to a dict option with suboptions: they do
# not name the option (ansible/module_utils/common/validation.py, check_type_dict).
CORE_MESSAGES = ("dictionary requested, could not parse JSON or key=value",)


def run_case(run_module, name, args, check_mode, kube_mode="unreachable"):
    case = CASES[name]
    module, options = module_options(name)
    if case.kube and kube_mode in ("missing", "unreachable") and "kubeconfig" in args:
        # The kubeconfig option, when given, points where the mode says.
        args = dict(
            args,
            kubeconfig=WS + ("/no-such.kubeconfig" if kube_mode == "missing" else "/unreachable.kubeconfig"),
        )
    with tempfile.TemporaryDirectory(prefix="gpuops-bad-input-") as root:
        workspace, cwd = make_sandbox(root)
        args = substitute(args, workspace)
        outside_before = set(os.listdir(root))
        before = tree(workspace)
        with environment(name, case, module, workspace, cwd, kube_mode):
            try:
                run = run_module(module.main, args, check_mode=check_mode)
            except Waiting:
                run = None
            allowed = case.writes(args, workspace, str(cwd)) if case.writes and not check_mode else set()
        created = tree(workspace) - before
        assert set(os.listdir(root)) == outside_before, "%s created files outside the sandbox" % name
        unexpected = sorted(
            path
            for path in created
            # the place, what is in it, and the directories created to hold it
            if not any(
                path == place or path.startswith(place.rstrip("/") + "/") or place.startswith(path + "/")
                for place in allowed
            )
        )
        assert not unexpected, "%s (check_mode=%s) created %s" % (name, check_mode, unexpected)
    TALLY["module calls"] += 1
    if run is None:
        TALLY["module calls stopped while waiting"] += 1
        return None
    assert run.exit_code in (0, 1), run.result
    if run.failed:
        message = run.result.get("msg")
        assert isinstance(message, str) and message.strip(), run.result
        assert "Traceback (most recent" not in message and "exception" not in run.result, run.result
        if PYTHON_ERRORS.search(message):
            # A Python error's text only inside a message the module wrote, "option: what is wrong (...)".
            leading = message.split(":", 1)[0]
            assert leading in options, "%s failed with a bare Python error: %s" % (name, message[:600])
        if not (case.verdict and case.verdict.search(message)) and message not in CORE_MESSAGES:
            assert names_one_of(message, list(options)), "%s: the message names none of its options: %s" % (
                name,
                message[:600],
            )
        TALLY["module calls with a clean error"] += 1
    else:
        assert run.exit_code == 0
        TALLY["module calls accepted"] += 1
    return run


# Arguments the suite found a bare exception (or an endless wait) with, replayed first.
REGRESSIONS = {
    "mcp_wait": [
        ({"pools": ["worker"], "timeout": 10**400}, False, "unreachable"),
        ({"pools": ["worker"], "timeout": float("inf")}, False, "unreachable"),
    ],
    "operator_wait": [
        ({"crds": ["a"], "timeout": 10**400}, False, "unreachable"),
        ({"crds": ["a"], "timeout": [10**30, None]}, False, "missing"),
    ],
    "training_job_wait": [
        ({"kind": "Job", "name": " ", "namespace": "t", "pod_selector": "a=b"}, False, "unreachable"),
        ({"kind": "Job", "name": "rn", "namespace": "t", "pod_selector": "a=b"}, False, "unreachable"),
        (
            {"kind": "Job", "name": "rn", "namespace": "t", "pod_selector": "a=b", "started": "nan"},
            False,
            "served",
        ),
        (
            {"kind": "Job", "name": "rn", "namespace": "t", "pod_selector": "a=b", "timeout": 10**400},
            True,
            "served",
        ),
    ],
    "nccl_log_info": [
        ({"content": "x", "expect": False}, False, None),
        ({"content": "x", "expect": {"nranks": float("inf")}}, False, None),
    ],
    # A valid pass, served: the Jobs are made and the wait begins; the quarantine patches (not in check mode).
    "node_health_jobs": [
        (
            {"run_id": "health-1", "namespace": "gpuops-node-health", "image": "registry.example/ee:1"},
            False,
            "served",
        )
    ],
    "node_health_quarantine": [
        ({"nodes": HEALTH_NODES, "run_id": "health-1"}, False, "served"),
        ({"nodes": HEALTH_NODES, "run_id": "health-1", "max_percent": 0}, True, "served"),
    ],
    "node_preflight_info": [({"login_user": "a\x00b"}, False, None)],
    "original_file": [({"path": WS + "/etc/a\x00b", "marker": "m"}, False, None)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_module_fails_naming_the_argument_and_changes_nothing(run_module, name):
    case = CASES[name]
    _module, options = module_options(name)

    def run(args, check_mode, kube_mode):
        run_case(run_module, name, args, check_mode, kube_mode)

    for args, check_mode, kube_mode in REGRESSIONS.get(name, []):
        run = example(args, check_mode, kube_mode)(run)
    strategy = arguments(options, case.overrides, case.base)
    kube_modes = st.sampled_from(["missing", "unreachable", "served"]) if case.kube else st.none()
    SETTINGS.__class__(SETTINGS, max_examples=case.examples)(
        given(strategy, st.booleans(), kube_modes)(run)
    )()

"""The health gate before a launch (health.gate and the health_gate filters): which nodes a run
may use, what a pass concludes - enough passed, too few, the quarantine cap, a check that did not
run - the node affinity that avoids the rest, and the gate's settings against the launcher.
The results are node_health_info's own on the published outputs in tests/unit/fixtures/health."""

from __future__ import annotations

import pathlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.health_gate import health_gate, health_gate_candidates
from ansible_collections.gpuops.training.plugins.module_utils import training_checks
from ansible_collections.gpuops.training.plugins.module_utils.health import fleet, gate
from ansible_collections.gpuops.training.plugins.module_utils.health.node import judge_saved

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "health"
A100_FAULT = FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml"
P100 = FIXTURES / "nvidia-smi-tesla-p100-r510.xml"
XID79 = FIXTURES / "journal-xid79-fallen-off-bus.log"


@pytest.fixture(scope="module")
def results():
    return {
        "isolate": judge_saved([str(A100_FAULT), str(XID79)], ["nvidia_smi", "kernel_log"]),
        "reboot": judge_saved([str(P100), str(XID79)], ["nvidia_smi", "kernel_log"]),
        "healthy": judge_saved([str(P100)], ["nvidia_smi"]),
        # No kernel log among the files: kernel_log did not run.
        "incomplete": judge_saved([str(P100)], ["nvidia_smi", "kernel_log"]),
    }


def items(results, **kinds):
    return [
        {"node": name, "result": results[kind] if kind else None, "error": None if kind else "unreachable"}
        for name, kind in kinds.items()
    ]


def kube_node(name, labels=None, taints=(), unschedulable=False):
    spec = {"taints": list(taints)}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec}


# ---- which nodes the run may use


def test_the_candidates_are_the_selected_schedulable_nodes_whose_taints_the_run_tolerates():
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    pool = {"gpuops.test/pool": "a"}
    nodes = [
        kube_node("n1", pool, [gpu]),
        kube_node("n2", pool, [{"key": "dedicated", "value": "infra", "effect": "NoExecute"}]),
        kube_node("n3", pool, unschedulable=True),
        kube_node("n4", pool, [{"key": fleet.TAINT_KEY, "value": "xid_79", "effect": "NoSchedule"}]),
        kube_node("n5", pool, [{"key": "soft", "effect": "PreferNoSchedule"}]),
        kube_node("other", {"gpuops.test/pool": "b"}),
    ]
    settings = {
        "node_selector": pool,
        "tolerations": [],
        "gpu_toleration": True,
        "gpus_per_node": 1,
        "gpu_resource": "nvidia.com/gpu",
    }
    scope = health_gate_candidates(nodes, settings)
    # n1's GPU taint is tolerated as the pods get it; n4 is judged again (and released if healthy).
    assert scope["candidates"] == ["n1", "n4", "n5"]
    assert scope["excluded"] == [
        {"node": "n2", "reason": "the run does not tolerate its taint dedicated=infra:NoExecute"},
        {"node": "n3", "reason": "cordoned (unschedulable)"},
    ]
    tolerating = dict(settings, tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infra"}])
    assert health_gate_candidates(nodes, tolerating)["candidates"] == ["n1", "n2", "n4", "n5"]
    # A CPU run gets no GPU toleration, and YAML's true matches the label "true".
    cpu = dict(settings, gpus_per_node=0, node_selector={"gpu": True})
    assert health_gate_candidates([kube_node("n1", {"gpu": "true"}, [gpu])], cpu)["candidates"] == []


# ---- the decision


def test_enough_remain_the_failed_node_is_named_and_avoided_and_the_run_goes_on(results):
    quarantine = {"nodes": [{"node": "a", "action": fleet.QUARANTINE}]}
    decision = health_gate(
        items(results, a="isolate", b="healthy", c="healthy", d="reboot"),
        ["a", "b", "c", "d"], classes=["isolate"], needed=3, quarantine=quarantine,
    )  # fmt: skip
    assert decision["enough"] is True and decision["passed"] == ["b", "c", "d"]
    (failed,) = decision["failed"]
    assert failed["node"] == "a"
    assert failed["reason"].startswith("isolate ecc_uncorrectable_volatile on GPU 0")
    assert failed["quarantine"] == "tainted gpuops.training/unhealthy:NoSchedule"
    # A reboot finding is not a fencing class here: d is used, with a warning.
    assert [item["node"] for item in decision["warned"]] == ["d"]
    assert decision["lines"][0] == "Health gate: PASSED - 3 of 4 node(s) passed, the run needs 3"
    assert decision["lines"][1].startswith("a: FAILED - isolate ecc_uncorrectable_volatile")
    assert decision["lines"][-1] == "The run avoids: a"
    not_a = {"key": "metadata.name", "operator": "NotIn", "values": ["a"]}
    assert decision["node_affinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [not_a]}]}
    }


def test_too_few_remain_the_gate_stops_naming_each_node_and_why(results):
    passes = items(results, a="isolate", b="healthy", c=None)
    decision = health_gate(passes, ["a", "b", "c"], classes=["isolate", "reboot"], needed=2)
    assert decision["enough"] is False and decision["passed"] == ["b"]
    assert decision["lines"][0] == (
        "Health gate: STOPPED - 1 of 3 node(s) passed, the run needs 2; nothing was launched"
    )
    assert "c: UNVERIFIED - not checked: unreachable" in decision["lines"]
    assert decision["avoid"] == ["a", "c"]


def test_a_check_that_did_not_run_is_never_a_pass(results):
    decision = health_gate(items(results, a="incomplete", b="healthy"), ["a", "b"], needed=1)
    assert decision["passed"] == ["b"]
    (unverified,) = decision["unverified"]
    assert unverified["node"] == "a"
    assert unverified["reason"].startswith("not verified, a check did not run (never a pass): kernel_log (")
    # The same for a further check whose tool is missing, and a further check that failed.
    more = {
        "b": {"outcome": "not_run", "check": "nccl_tests", "reason": "nccl-tests binaries missing"},
        "a": {"outcome": "failed", "check": "nccl_tests", "reason": "busbw 3 GB/s"},
    }
    decision = health_gate(items(results, a="healthy", b="healthy"), ["a", "b"], needed=1, more_checks=more)
    assert decision["passed"] == [] and decision["enough"] is False
    assert decision["failed"] == [{"node": "a", "reason": "nccl_tests: busbw 3 GB/s"}]
    (unverified,) = decision["unverified"]
    assert unverified == {
        "node": "b",
        "reason": "not verified, nccl_tests: nccl-tests binaries missing did not run (never a pass)",
    }


def test_a_node_the_quarantine_cap_kept_back_is_named_so_and_still_avoided(results):
    quarantine = {"nodes": [{"node": "a", "action": fleet.LEFT}, {"node": "b", "action": fleet.LEFT}]}
    decision = health_gate(
        items(results, a="isolate", b="isolate", c="healthy", d="healthy"),
        ["a", "b", "c", "d"], needed=2, quarantine=quarantine,
        affinity={"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
        ]}},
    )  # fmt: skip
    assert decision["enough"] is True
    assert [item["quarantine"] for item in decision["failed"]] == [
        "not tainted (the quarantine cap); this run avoids it all the same"
    ] * 2
    # Each of the user's terms keeps its own requirements and leaves out both nodes.
    terms = decision["node_affinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [term["matchExpressions"][0]["values"] for term in terms] == [["z1"], ["z2"]]
    assert all([field["values"] for field in term["matchFields"]] == [["a"], ["b"]] for term in terms)


def test_every_node_passed_leaves_the_affinity_as_it_was(results):
    decision = health_gate(items(results, a="healthy"), ["a"], needed=1)
    assert decision["node_affinity"] == {} and decision["lines"] == [
        "Health gate: PASSED - 1 of 1 node(s) passed, the run needs 1"
    ]


# ---- bad input


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"classes": ["isolate", "fatal"]}, "classes: unknown class 'fatal'"),
        ({"needed": 0}, "needed: a number of nodes of at least 1"),
        ({"order": "a,b"}, "order must be a list of node names"),
        ({"quarantine": ["a"]}, "quarantine must be a mapping"),
        ({"affinity": {"nodeSelectorTerms": []}}, "affinity has unknown fields"),
    ],
)
def test_the_filter_refuses_bad_arguments_naming_them(results, kwargs, words):
    arguments = dict({"order": ["a"], "needed": 1}, **kwargs)
    with pytest.raises(AnsibleFilterError, match="health_gate") as raised:
        health_gate(items(results, a="healthy"), **arguments)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"launcher": "runai", "gate": "quick", "image": "x"}, "training_job_gate is quick, but the runai"),
        ({"launcher": "pytorchjob", "gate": "full", "image": "x"}, "training_job_gate is full, whose"),
        ({"launcher": "local", "gate": "quick", "gate_min_nodes": -1}, "training_job_gate_min_nodes must"),
        ({"launcher": "local", "gate": "sometimes"}, "training_job_gate must be one of none, quick, full"),
    ],
)
def test_the_gate_settings_are_refused_before_anything_starts_naming_the_variable(settings, message):
    found = training_checks.problems(settings)
    assert [line for line in found if line.startswith(message)], found
    assert len([line for line in found if "training_job_gate " in line or "training_job_gate_" in line]) == 1


def test_no_gate_is_no_problem_whatever_the_launcher():
    assert gate.gate_problems({"launcher": "runai", "gate": "none"}, lambda key: "training_job_" + key) == []

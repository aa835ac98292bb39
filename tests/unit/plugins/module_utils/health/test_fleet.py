"""A health pass over many nodes (health.fleet): each node's entry from node_health_info's real
results on the published fixtures, the quarantine plan and its cap, the patches, the summary and
the report."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.health import fleet
from ansible_collections.gpuops.training.plugins.module_utils.health.node import judge_saved

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "health"
A100_FAULT = FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml"
P100 = FIXTURES / "nvidia-smi-tesla-p100-r510.xml"
XID79 = FIXTURES / "journal-xid79-fallen-off-bus.log"
BOTH = ("nvidia_smi", "kernel_log")


def result(*paths, checks=BOTH):
    """What node_health_info returns for these saved outputs."""
    return judge_saved([str(path) for path in paths], list(checks))


@pytest.fixture(scope="module")
def results():
    return {
        "isolate": result(A100_FAULT, XID79),  # ECC errors (isolate) and Xid 79 (reboot)
        "reboot": result(P100, XID79),
        "healthy": result(P100, checks=["nvidia_smi"]),
        "incomplete": result(P100),  # no kernel log among the files: kernel_log not run
    }


def node(name, taint=None, resource_version="7", others=()):
    taints = [dict(item) for item in others]
    if taint:
        taints.append({"key": fleet.TAINT_KEY, "value": taint, "effect": "NoSchedule"})
    annotations = {fleet.REASON_ANNOTATION: "earlier", fleet.RUN_ANNOTATION: "health-0"} if taint else {}
    return {
        "metadata": {"name": name, "resourceVersion": resource_version, "annotations": annotations},
        "spec": {"taints": taints},
    }


# ---- entries


def test_a_real_result_becomes_an_entry_with_its_verdict_findings_and_completeness(results):
    entry = fleet.node_entry({"node": "gpu-1", "result": results["isolate"]})
    assert (entry["verdict"], entry["complete"], entry["needs_action"], entry["error"]) == (
        "isolate",
        True,
        True,
        None,
    )
    assert [(f["check"], f["class"]) for f in entry["findings"]][-2:] == [
        ("clock_hardware_slowdown", "monitor"),
        ("xid_79", "reboot"),
    ]
    assert set(entry["findings"][0]) == {"device", "check", "class", "reason", "remedy"}
    healthy = fleet.node_entry({"node": "gpu-2", "result": results["healthy"]})
    assert (healthy["verdict"], healthy["needs_action"]) == ("healthy", False)


def test_a_check_that_did_not_run_needs_action_even_on_a_healthy_node(results):
    entry = fleet.node_entry({"node": "gpu-3", "result": results["incomplete"]})
    assert entry["verdict"] == "healthy" and entry["complete"] is False and entry["needs_action"] is True
    assert entry["not_run"] == [{"check": "kernel_log", "reason": "no file in paths is a kernel log"}]


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ({"node": "n"}, "no result"),
        (
            {"node": "n", "result": None, "error": "the node is not Ready (KubeletNotReady)"},
            "the node is not Ready",
        ),
        (
            {"node": "n", "result": {"unreachable": True, "msg": "ssh: connect to host n port 22: No route"}},
            "the host was unreachable: ssh: connect to host n port 22: No route",
        ),
        (
            # node_health_info failed, registered with failed_when: false (failed is then False).
            {"node": "n", "result": {"failed": False, "msg": "sysfs_root: '/x' is not a directory"}},
            "node_health_info failed: sysfs_root: '/x' is not a directory",
        ),
        ({"node": "n", "result": {"skipped": True}}, "the check was skipped on this host"),
        ({"node": "n", "result": ["not", "a", "dict"]}, "the result is not node_health_info's (a list)"),
        (
            {"node": "n", "result": {"verdict": "isolate", "findings": [{"class": "fatal"}], "not_run": []}},
            "its verdict, findings or not_run cannot be read",
        ),
        ({"node": "n", "result": {"verdict": "grand", "findings": [], "not_run": []}}, "cannot be read"),
    ],
)
def test_a_node_without_a_usable_result_is_unchecked_never_healthy(item, why):
    entry = fleet.node_entry(item)
    assert entry["verdict"] == "unchecked" and entry["needs_action"] is True and entry["complete"] is False
    assert why in entry["error"]
    assert entry["summary"] == "unchecked: " + entry["error"]


def test_entries_come_worst_first_and_each_node_once(results):
    items = [
        {"node": "d", "result": results["healthy"]},
        {"node": "c", "result": None},
        {"node": "b", "result": results["reboot"]},
        {"node": "a", "result": results["isolate"]},
        {"node": "e", "result": results["incomplete"]},
    ]
    assert [entry["node"] for entry in fleet.entries_of(items)] == ["a", "b", "c", "e", "d"]
    # With reboot no cause to fail, the rebooting node moves behind the unchecked and incomplete ones.
    assert [entry["node"] for entry in fleet.entries_of(items, fail_classes=["isolate"])] == [
        "a",
        "c",
        "e",
        "b",
        "d",
    ]
    with pytest.raises(fleet.HealthFleetError, match="^nodes: each node once, got a more than once"):
        fleet.entries_of(items + [{"node": "a"}])
    with pytest.raises(fleet.HealthFleetError, match="^nodes: each entry needs node"):
        fleet.entries_of([{"result": results["healthy"]}])


# ---- the quarantine plan


def plan(results, cases, max_percent=100, classes=("isolate",), check_mode=False):
    """cases: (name, result key or None, node object or None)."""
    entries = fleet.entries_of([{"node": name, "result": results.get(key)} for name, key, _obj in cases])
    objects = {name: obj for name, _key, obj in cases}
    return fleet.plan_quarantine(entries, objects, list(classes), max_percent, check_mode)


def actions(planned):
    return {row["node"]: row["action"] for row in planned["nodes"]}


def test_each_node_gets_the_action_its_result_and_its_taint_call_for(results):
    planned = plan(
        results,
        [
            ("new", "isolate", node("new")),
            ("same", "isolate", node("same", taint="ecc_uncorrectable_volatile")),
            ("other", "isolate", node("other", taint="xid_48")),
            ("healed", "healthy", node("healed", taint="xid_48")),
            ("unsure", "incomplete", node("unsure", taint="xid_48")),
            ("silent", None, node("silent", taint="xid_48")),
            ("gone", "isolate", None),
            ("fine", "reboot", node("fine")),
        ],
    )
    assert actions(planned) == {
        "new": "quarantine",
        "same": "keep",
        "other": "update",
        "healed": "release",
        "unsure": "hold",
        "silent": "hold",
        "gone": "missing",
        "fine": "none",
    }
    assert planned["over_cap"] is False
    rows = {row["node"]: row for row in planned["nodes"]}
    assert rows["new"]["check"] == "ecc_uncorrectable_volatile" and rows["other"]["was"] == "xid_48"
    assert rows["new"]["reason"].startswith("isolate ecc_uncorrectable_volatile on GPU 0 (0000:01:00.0): ")


def test_reboot_findings_quarantine_when_the_classes_say_so(results):
    planned = plan(results, [("b", "reboot", node("b"))], classes=("isolate", "reboot"))
    assert actions(planned) == {"b": "quarantine"}
    assert planned["nodes"][0]["check"] == "xid_79"


@pytest.mark.parametrize(
    ("max_percent", "checked", "allowed"),
    [
        (10, 9, 0),
        (10, 10, 1),
        (10, 64, 6),
        (33.3, 3, 0),
        (100 / 3, 3, 1),
        (50, 3, 1),
        (0, 100, 0),
        (100, 7, 7),
    ],
)
def test_the_cap_is_the_percentage_of_the_nodes_checked_rounded_down(max_percent, checked, allowed):
    assert fleet.allowed_quarantined(max_percent, checked) == allowed


def test_over_the_cap_none_is_quarantined_and_the_message_names_each_node_left(results):
    cases = [
        ("a", "isolate", node("a")),
        ("b", "isolate", node("b")),
        ("c", "healthy", node("c", taint="xid_48")),
    ]
    cases += [("n%d" % index, "healthy", node("n%d" % index)) for index in range(3)]
    planned = plan(results, cases, max_percent=20)  # 20 % of 6: 1
    assert planned["allowed"] == 1 and planned["over_cap"] is True
    assert actions(planned)["a"] == actions(planned)["b"] == "left"
    assert actions(planned)["c"] == "release"  # releases are never held back
    message = planned["message"]
    assert "none of the 2 node(s) with isolate findings was quarantined (a, b)" in message
    assert "that would be 2 of the 6 nodes checked, above the cap of 20 % (max_percent" in message
    assert "which allows 1" in message and "broken check" in message
    assert "released (healthy, every check ran): c" in message


def test_the_nodes_staying_quarantined_count_against_the_cap(results):
    cases = [("a", "isolate", node("a")), ("b", "isolate", node("b", taint="ecc_uncorrectable_volatile"))]
    cases += [("n%d" % index, "healthy", node("n%d" % index)) for index in range(8)]
    planned = plan(results, cases, max_percent=10)  # 10 % of 10: 1, and b stays
    assert actions(planned)["a"] == "left" and actions(planned)["b"] == "keep"
    assert "with the 1 staying quarantined that would be 2 of the 10 nodes checked" in planned["message"]
    within = plan(results, cases, max_percent=20)
    assert actions(within)["a"] == "quarantine" and within["over_cap"] is False


def test_check_mode_says_would_be(results):
    planned = plan(
        results, [("a", "isolate", node("a")), ("c", "healthy", node("c", taint="x"))], check_mode=True
    )
    assert planned["message"] == (
        "Quarantine: would be quarantined (tainted gpuops.training/unhealthy=<check>:NoSchedule): "
        "a (ecc_uncorrectable_volatile); would be released (healthy, every check ran): c."
    )


@pytest.mark.parametrize(
    ("classes", "max_percent", "message"),
    [
        (
            ["isolate", "fatal"],
            10,
            "^classes: unknown class 'fatal'; the classes are isolate, reboot, monitor$",
        ),
        ("isolate", 10, "^classes: expected a list of classes"),
        (["isolate"], 101, "^max_percent: a percentage from 0 to 100 is expected, got 101$"),
        (["isolate"], -1, "^max_percent: a percentage from 0 to 100"),
        (["isolate"], float("nan"), "^max_percent: a percentage from 0 to 100"),
        (["isolate"], True, "^max_percent: a percentage from 0 to 100"),
    ],
)
def test_unknown_classes_and_a_percentage_outside_0_to_100_are_refused_naming_them(
    classes, max_percent, message
):
    with pytest.raises(fleet.HealthFleetError, match=message):
        fleet.plan_quarantine([], {}, classes, max_percent)


# ---- the patches


def test_a_quarantine_patch_adds_the_taint_and_annotations_and_keeps_other_taints(results):
    entry = fleet.node_entry({"node": "a", "result": results["isolate"]})
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    findings = fleet.fenced_findings(entry, ["isolate"])
    patch = fleet.node_patch("quarantine", node("a", others=[gpu_taint]), findings, "health-1")
    assert patch["spec"]["taints"] == [
        gpu_taint,
        {"key": "gpuops.training/unhealthy", "value": "ecc_uncorrectable_volatile", "effect": "NoSchedule"},
    ]
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["annotations"][fleet.RUN_ANNOTATION] == "health-1"
    assert patch["metadata"]["annotations"][fleet.REASON_ANNOTATION] == fleet.reason_text(findings)


def test_a_release_patch_removes_only_the_collections_taint_and_annotations():
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    patch = fleet.node_patch("release", node("a", taint="xid_48", others=[gpu_taint]), [], "health-2")
    assert patch["spec"]["taints"] == [gpu_taint]
    assert patch["metadata"]["annotations"] == {fleet.REASON_ANNOTATION: None, fleet.RUN_ANNOTATION: None}


@pytest.mark.parametrize(
    ("text", "value"),
    [("xid_79", "xid_79"), ("a b/c", "a-b-c"), ("-x-", "x"), ("é", "unhealthy"), ("x" * 80, "x" * 63)],
)
def test_a_check_name_becomes_a_valid_taint_value(text, value):
    assert fleet.label_value(text) == value


def test_a_long_reason_is_cut_to_the_annotation_limit():
    finding = {"class": "isolate", "check": "c", "device": "d", "reason": "r" * 5000}
    assert len(fleet.reason_text([finding])) == fleet.REASON_LIMIT


# ---- the summary and the report


def test_the_summary_and_the_report_put_the_nodes_needing_action_first(results):
    entries = fleet.entries_of(
        [
            {"node": "ok-1", "result": results["healthy"]},
            {"node": "bad-1", "result": results["isolate"]},
            {"node": "lost-1", "error": "the probe did not end within 600 s (pod Pending, ImagePullBackOff)"},
        ]
    )
    objects = {"ok-1": node("ok-1"), "bad-1": node("bad-1"), "lost-1": node("lost-1")}
    planned = fleet.plan_quarantine(entries, objects, ["isolate"], 50)
    summary = fleet.build_summary(
        "health-9",
        "kubernetes",
        entries,
        ["isolate", "reboot"],
        ["isolate"],
        planned,
        {"bad-1": "nodes/bad-1.json"},
    )
    assert summary["verdict"] == "failed"
    assert summary["headline"] == "Node health health-9: FAILED (2 of 3 nodes need action)"
    assert summary["counts"] == {
        "isolate": 1, "reboot": 0, "unchecked": 1, "monitor": 0, "healthy": 1, "incomplete": 0,
    }  # fmt: skip
    assert [(n["node"], n["quarantine"]) for n in summary["nodes"]] == [
        ("bad-1", "quarantine"),
        ("lost-1", "none"),
        ("ok-1", "none"),
    ]
    assert summary["quarantine"]["quarantined"] == ["bad-1"] and summary["unhealthy_hosts"] == ["bad-1"]
    assert fleet.hosts_file_text(summary) == "bad-1\n"
    assert summary["lines"][1].startswith(
        "bad-1: ISOLATE - ecc_uncorrectable_volatile on GPU 0 (0000:01:00.0)"
    )
    assert (
        summary["lines"][2]
        == "lost-1: UNCHECKED - the probe did not end within 600 s (pod Pending, ImagePullBackOff)"
    )
    report = fleet.render_markdown(summary)
    assert (
        report.index("### bad-1: ISOLATE")
        < report.index("### lost-1: UNCHECKED")
        < report.index("## Quarantine")
    )
    assert "### ok-1" not in report and "| ok-1 | healthy | 0 | - | none | - |" in report
    assert "| bad-1 | isolate | 5 | - | quarantine | [nodes/bad-1.json](nodes/bad-1.json) |" in report
    assert "No result: the probe did not end within 600 s" in report


def test_a_pass_with_nothing_to_act_on_passes(results):
    entries = fleet.entries_of([{"node": "ok", "result": results["healthy"]}])
    summary = fleet.build_summary("health-1", "ssh", entries, ["isolate"], ["isolate"])
    assert summary["verdict"] == "passed" and summary["lines"] == [
        "Node health health-1: PASSED (0 of 1 node need action)"
    ]
    assert summary["quarantine"] == {"enabled": False} and fleet.hosts_file_text(summary) == ""
    assert "| Quarantine | off |" in fleet.render_markdown(summary)


def test_node_file_names_are_safe_and_unique():
    taken = set()
    assert [fleet.details_name(name, taken) for name in ("gpu-1", "gpu/1", "gpu:1", ".hidden")] == [
        "gpu-1.json",
        "gpu_1.json",
        "gpu_1-2.json",
        "_.hidden.json",
    ]

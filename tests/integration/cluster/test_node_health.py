"""playbooks/node_health.yml on Kubernetes, on the harness's real API server: a privileged Job per
node, each pod's log node_health_info's JSON, the summary and report, and the quarantine - a taint
and its annotations added, changed nothing in check mode, removed by a later healthy pass, and
held back by the cap.

The Jobs are real (the Job controller makes their pods, bound to three kwok nodes of this module);
kwok serves each pod the log its node's probe would print. Those logs are what the real module
prints when it runs as the pod runs it (``python -m ...node_health_info '<args>'``), judging the
published outputs in tests/unit/fixtures/health: an A100 report with uncorrectable ECC errors and
a journal with Xid 79 (isolate), a P100 report with a kernel log of real lines without an Xid
(healthy), and an image without the collection (the pod fails, no result: unchecked).

Three playbook runs share the nodes, in order: a pass that quarantines, a check-mode pass that
would release one node and quarantine another, and a pass that releases and, with two nodes to
quarantine where the cap allows one, quarantines none.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import subprocess
import sys

import pytest
from fleet import FleetLogServer, pod_node
from k8s_harness import fenced_gpu_nodes
from playbook_runner import DEV_COLLECTIONS, ansible_playbook

from ansible_collections.gpuops.training.plugins.module_utils.health import fleet, quarantine

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "unit" / "fixtures" / "health"
MODULE = "ansible_collections.gpuops.training.plugins.modules.node_health_info"
TAINT = "gpuops.training/unhealthy"
RUN_ANNOTATION = "gpuops.training/unhealthy-run"
TEST_KEY = "gpuops.test/health"


def module_output(tmp_path, name, *fixtures):
    """What node_health_info prints in a probe pod, run the way the pod runs it, on saved outputs."""
    args = {"paths": [str(path) for path in fixtures], "checks": ["nvidia_smi", "kernel_log"]}
    completed = subprocess.run(
        [sys.executable, "-m", MODULE, json.dumps({"ANSIBLE_MODULE_ARGS": args})],
        env=dict(os.environ, PYTHONPATH=str(DEV_COLLECTIONS)),
        capture_output=True,
        text=True,
        check=True,
    )
    path = tmp_path / (name + ".log")
    path.write_text(completed.stdout)
    return path


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("health-outputs")
    clean = tmp_path / "kernel-no-xid.log"
    # Real kernel lines (an OOM kill) of a published log, its Xid lines left out.
    iso = (FIXTURES / "dmesg-iso-xid13-xid43-oom.log").read_text().splitlines(True)
    clean.write_text("".join(line for line in iso if "NVRM: Xid" not in line))
    bad = module_output(
        tmp_path,
        "bad",
        FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml",
        FIXTURES / "journal-xid79-fallen-off-bus.log",
    )
    healthy = module_output(tmp_path, "healthy", FIXTURES / "nvidia-smi-tesla-p100-r510.xml", clean)
    no_module = tmp_path / "no-module.log"
    no_module.write_text("/usr/bin/python3: Error while finding module specification for '%s'\n" % MODULE)
    results = {name: json.loads(path.read_text()) for name, path in (("bad", bad), ("healthy", healthy))}
    assert results["bad"]["verdict"] == "isolate" and results["healthy"]["verdict"] == "healthy"
    return {"bad": bad, "healthy": healthy, "no_module": no_module}


@pytest.fixture(scope="module")
def health(k8s_cluster, outputs, tmp_path_factory):
    """Three kwok nodes (tainted so that nothing else lands there), the namespace the role
    creates, and a log server that gives each probe pod the log chosen for its node."""
    suffix = secrets.token_hex(3)
    nodes = ["health-%s-%s" % (letter, suffix) for letter in "abc"]
    k8s_cluster.harness.create_nodes(fenced_gpu_nodes(nodes, TEST_KEY, suffix))
    namespace = "health-%s" % suffix
    logs, annotate = {}, {}
    server = FleetLogServer(
        k8s_cluster.api_client(), k8s_cluster.harness.state_dir, namespace, logs, annotate, key=pod_node
    )
    server.start()
    state = {
        "cluster": k8s_cluster,
        "nodes": nodes,
        "namespace": namespace,
        "suffix": suffix,
        "logs": logs,
        "annotate": annotate,
        "server": server,
        "runs": tmp_path_factory.mktemp("health-runs"),
    }
    yield state
    server.stop()
    k8s_cluster.kubectl("delete", "node", *nodes, "--wait=false", check=False)
    k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    assert not server.errors, server.errors


def serve(health, outputs, **by_letter):
    """Each node's log for the next pass (a, b, c: bad, healthy or no_module; a node whose
    image lacks the module gets a pod that fails)."""
    health["annotate"].clear()
    for letter, kind in by_letter.items():
        node = health["nodes"]["abc".index(letter)]
        health["logs"][node] = outputs[kind]
        if kind == "no_module":
            health["annotate"][node] = {"gpuops.test/fail": "true", "gpuops.test/exit-code": "1"}


def run_pass(health, run_id, *options, max_quarantine=50):
    variables = {
        "node_health_hosts": "localhost",
        "node_health_platform": "kubernetes",
        "node_health_run_id": run_id,
        "node_health_runs_dir": str(health["runs"]),
        "node_health_kubeconfig": str(health["cluster"].kubeconfig),
        "node_health_namespace": health["namespace"],
        "node_health_node_selector": "%s=%s" % (TEST_KEY, health["suffix"]),
        "node_health_image": "registry.example/gpuops-training-ee:0.1.0",
        "node_health_checks": ["nvidia_smi", "kernel_log"],
        "node_health_quarantine": True,
        "node_health_max_quarantine": max_quarantine,
        "node_health_poll_interval_s": 1,
        "node_health_timeout_s": 60,
        # Running after 1 s: the log server has annotated the failing pod by then.
        "node_health_pod_annotations": {"gpuops.test/ready-delay": "1s"},
        "ansible_python_interpreter": sys.executable,
    }
    return ansible_playbook(
        "-i", "localhost,", "-c", "local", "-e", json.dumps(variables), *options, "playbooks/node_health.yml",
        collections_path=DEV_COLLECTIONS, timeout=300,
    )  # fmt: skip


def said(run):
    """The run's output with its lines joined (the YAML callback folds long strings)."""
    return " ".join(run.output.split())


def node_object(health, name):
    return json.loads(health["cluster"].kubectl("get", "node", name, "-o", "json").stdout)


def our_taints(node):
    return [taint for taint in node["spec"].get("taints") or [] if taint["key"] == TAINT]


def jobs_left(health):
    listing = health["cluster"].kubectl("get", "jobs", "-n", health["namespace"], "-o", "json").stdout
    return [job["metadata"]["name"] for job in json.loads(listing)["items"]]


@pytest.fixture(scope="module")
def first_pass(health, outputs):
    """a: ECC errors and Xid 79; b: healthy; c: an image without the collection."""
    serve(health, outputs, a="bad", b="healthy", c="no_module")
    run = run_pass(health, "health-first")
    return run, health["runs"] / "health-first"


def test_a_node_with_an_isolate_finding_is_tainted_and_annotated_with_the_reason(health, first_pass):
    run, _run_dir = first_pass
    a, b, c = (node_object(health, name) for name in health["nodes"])
    assert our_taints(a) == [{"key": TAINT, "value": "ecc_uncorrectable_volatile", "effect": "NoSchedule"}], (
        run
    )
    assert a["metadata"]["annotations"][TAINT] == (
        "isolate ecc_uncorrectable_volatile on GPU 0 (0000:01:00.0): "
        "2 uncorrectable ECC error(s) since the driver last loaded"
    )
    assert a["metadata"]["annotations"][RUN_ANNOTATION] == "health-first"
    # The node's own taints stay; the healthy and the unchecked node are left alone.
    assert {"key": TEST_KEY, "value": health["suffix"], "effect": "NoSchedule"} in a["spec"]["taints"]
    for node in (b, c):
        assert our_taints(node) == [] and TAINT not in (node["metadata"].get("annotations") or {})


def test_the_pass_fails_naming_the_nodes_that_need_action_and_removes_its_jobs(health, first_pass):
    run, _run_dir = first_pass
    a, b, c = health["nodes"]
    assert run.rc == 2, run
    output = said(run)
    assert "Node health health-first: FAILED (2 of 3 nodes need action)" in output
    assert (
        "%s: ISOLATE - ecc_uncorrectable_volatile on GPU 0 (0000:01:00.0): 2 uncorrectable ECC error(s) "
        "since the driver last loaded (+4 more)" % a
    ) in output
    assert (
        "%s: UNCHECKED - the probe failed (Failed, exit code 1 (Error); BackoffLimitExceeded: Job has "
        "reached the specified backoff limit) and printed no result; its last line: /usr/bin/python3: Error "
        "while finding module specification" % c
    ) in output
    assert (
        "Quarantine: quarantined (tainted gpuops.training/unhealthy=<check>:NoSchedule): %s "
        "(ecc_uncorrectable_volatile)." % a
    ) in output
    assert "--limit @unhealthy-hosts.txt: %s" % a in output
    verdict = output[output.index("Show the verdict") : output.index("PLAY RECAP")]
    assert b not in verdict  # the healthy node needs no line
    assert jobs_left(health) == []
    # The namespace the role made admits the privileged probes.
    namespace = json.loads(
        health["cluster"].kubectl("get", "namespace", health["namespace"], "-o", "json").stdout
    )
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_summary_lists_each_node_worst_first_with_its_findings_and_remedies(health, first_pass):
    _run, run_dir = first_pass
    a, b, c = health["nodes"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["schema"] == "gpuops.health-summary/v1"
    assert (summary["verdict"], summary["platform"], summary["nodes_checked"]) == ("failed", "kubernetes", 3)
    assert [(node["node"], node["verdict"], node["needs_action"]) for node in summary["nodes"]] == [
        (a, "isolate", True),
        (c, "unchecked", True),
        (b, "healthy", False),
    ]
    bad, unchecked, healthy = summary["nodes"]
    assert [(f["check"], f["class"]) for f in bad["findings"]] == [
        ("report_coverage", "monitor"),
        ("ecc_uncorrectable_volatile", "isolate"),
        ("pcie_link_width", "monitor"),
        ("clock_hardware_slowdown", "monitor"),
        ("xid_79", "reboot"),
    ]
    assert all(finding["remedy"] and finding["reason"] and finding["device"] for finding in bad["findings"])
    assert bad["not_run"] == [] and bad["complete"] is True and bad["quarantine"] == "quarantine"
    assert "Error while finding module specification" in unchecked["error"]
    assert unchecked["quarantine"] == "none" and healthy["findings"] == []
    assert summary["quarantine"]["quarantined"] == [a] and summary["quarantine"]["allowed"] == 1
    assert summary["unhealthy_hosts"] == [a]
    assert (run_dir / "unhealthy-hosts.txt").read_text() == a + "\n"
    # Everything the module returned on the node, as the pod printed it.
    details = json.loads((run_dir / bad["details"]).read_text())
    assert details["node"] == a and details["result"]["gpus"][0]["product_name"] == "NVIDIA A100-SXM4-80GB"


def test_the_report_puts_the_nodes_needing_action_first(health, first_pass):
    _run, run_dir = first_pass
    a, b, c = health["nodes"]
    summary = json.loads((run_dir / "summary.json").read_text())
    report = (run_dir / "report.md").read_text()
    assert report.startswith("# Node health health-first: FAILED\n")
    needing = report.index("## Nodes needing action")
    assert needing < report.index("### %s: ISOLATE" % a) < report.index("### %s: UNCHECKED" % c)
    assert "### %s" % b not in report  # the healthy node is only in the table of every node
    assert report.index("## Every node") < report.index("| %s | healthy |" % b)
    ecc = summary["nodes"][0]["findings"][1]
    assert (
        "| %s | ecc_uncorrectable_volatile | isolate | %s | %s |"
        % (ecc["device"], ecc["reason"], ecc["remedy"])
        in report
    )


def test_a_node_tainted_by_another_since_it_was_read_is_read_again_not_overwritten(
    health, outputs, first_pass
):
    b = health["nodes"][1]
    api = health["cluster"].api_client()
    stale = quarantine.read_node(api, b)
    # Another controller taints the node between the read and the patch.
    health["cluster"].kubectl("taint", "node", b, "example.com/maintenance=true:NoSchedule")
    entry = fleet.node_entry({"node": b, "result": json.loads(outputs["bad"].read_text())})
    row = {"node": b, "action": fleet.QUARANTINE}
    assert quarantine._apply(api, row, entry, stale, ["isolate"], "health-race") == fleet.QUARANTINE
    keys = [taint["key"] for taint in node_object(health, b)["spec"]["taints"]]
    # kubectl puts its taint first; the patch, made again from the node read again, keeps it.
    assert keys == ["example.com/maintenance", TEST_KEY, TAINT]
    # Back as it was, for the passes below.
    healthy = fleet.node_entry({"node": b, "result": json.loads(outputs["healthy"].read_text())})
    fresh = quarantine.read_node(api, b)
    release = {"node": b, "action": fleet.RELEASE}
    assert quarantine._apply(api, release, healthy, fresh, ["isolate"], "health-race") == fleet.RELEASE
    health["cluster"].kubectl("taint", "node", b, "example.com/maintenance-")
    assert [taint["key"] for taint in node_object(health, b)["spec"]["taints"]] == [TEST_KEY]


def test_check_mode_says_what_would_change_and_changes_nothing(health, outputs, first_pass):
    a, b, c = health["nodes"]
    before = {name: node_object(health, name) for name in health["nodes"]}
    serve(health, outputs, a="healthy", b="bad", c="healthy")
    run = run_pass(health, "health-check", "--check")
    output = said(run)
    assert "would be quarantined (tainted gpuops.training/unhealthy=<check>:NoSchedule): %s" % b in output, (
        run
    )
    assert "would be released (healthy, every check ran): %s" % a in output
    for name in health["nodes"]:
        after = node_object(health, name)
        assert after["spec"].get("taints") == before[name]["spec"].get("taints")
        assert after["metadata"].get("annotations") == before[name]["metadata"].get("annotations")
    assert not (health["runs"] / "health-check").exists()
    assert jobs_left(health) == []


def test_a_healthy_pass_releases_and_the_cap_holds_back_every_new_quarantine(health, outputs, first_pass):
    a, b, c = health["nodes"]
    serve(health, outputs, a="healthy", b="bad", c="bad")
    run = run_pass(health, "health-cap")
    released = node_object(health, a)
    assert our_taints(released) == [], run
    assert (
        TAINT not in released["metadata"]["annotations"]
        and RUN_ANNOTATION not in released["metadata"]["annotations"]
    )
    assert {"key": TEST_KEY, "value": health["suffix"], "effect": "NoSchedule"} in released["spec"]["taints"]
    # Two nodes to quarantine where 50 % of 3 allows one: neither, and the message says why.
    for name in (b, c):
        assert our_taints(node_object(health, name)) == []
    assert (
        "none of the 2 node(s) with isolate findings was quarantined (%s, %s): with the 0 staying "
        "quarantined that would be 2 of the 3 nodes checked, above the cap of 50 %%" % (b, c)
    ) in said(run), run
    summary = json.loads((health["runs"] / "health-cap" / "summary.json").read_text())
    assert summary["quarantine"]["released"] == [a]
    assert summary["quarantine"]["left"] == [b, c] and summary["quarantine"]["over_cap"] is True
    assert summary["unhealthy_hosts"] == [b, c]

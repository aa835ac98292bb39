"""playbooks/train.yml with the health gate (training_job_gate quick) on the harness's API server.

Four kwok GPU nodes of this module (tainted so that only this module's pods land there). The probes
are real Jobs of the node_health role, one per node, whose pods kwok serves the log node_health_info
prints there: the real module's output on the published outputs in tests/unit/fixtures/health, an
A100 with uncorrectable ECC errors on node a (isolate), a healthy P100 on the others. The run is a
PyTorchJob of two Workers whose pods log one rank each of a real gloo run (as in
test_launch_kubernetes.py).

Two playbook runs share the nodes: a run of two pods, where node a is quarantined and named and
the run launched and verified on the others; then a run of four pods, where three healthy nodes
are too few and the play stops before the workload exists.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest
from cluster_helpers import create_checkpoint_pvc, create_launch_namespace, delete_launch_namespace
from fleet import FleetLogServer, node_index, pod_node
from k8s_harness import fenced_gpu_nodes
from playbook_runner import DEV_COLLECTIONS, REPO_ROOT, ansible_playbook
from test_launch_kubernetes import IB_LOG, launch_vars, node_logs

FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures" / "health"
MODULE = "ansible_collections.gpuops.training.plugins.modules.node_health_info"
TAINT = "gpuops.training/unhealthy"
TEST_KEY = "gpuops.test/gate"


def probe_log(path, *fixtures):
    """What node_health_info prints in a probe pod, run the way the pod runs it, on saved outputs."""
    args = {"paths": [str(fixture) for fixture in fixtures], "checks": ["nvidia_smi", "kernel_log"]}
    completed = subprocess.run(
        [sys.executable, "-m", MODULE, json.dumps({"ANSIBLE_MODULE_ARGS": args})],
        env=dict(os.environ, PYTHONPATH=str(DEV_COLLECTIONS)),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    path.write_text(completed.stdout)
    return path


@pytest.fixture(scope="module")
def gated(k8s_cluster, trainer_rank_logs, tmp_path_factory):
    """The nodes, the namespaces (the run's, with its checkpoint PVC; the probes'), and a log
    server for each: probe pods by node, the run's pods by their rank."""
    tmp_path = tmp_path_factory.mktemp("gate")
    suffix = secrets.token_hex(3)
    nodes = ["gate-%s-%s" % (letter, suffix) for letter in "abcd"]
    k8s_cluster.harness.create_nodes(fenced_gpu_nodes(nodes, TEST_KEY, suffix))
    namespace = create_launch_namespace(k8s_cluster)
    create_checkpoint_pvc(k8s_cluster, namespace, tmp_path / "checkpoints")
    probes = "gh-%s" % suffix
    clean = tmp_path / "kernel-no-xid.log"
    # Real kernel lines (an OOM kill) of a published log, its Xid lines left out.
    iso = (FIXTURES / "dmesg-iso-xid13-xid43-oom.log").read_text().splitlines(True)
    clean.write_text("".join(line for line in iso if "NVRM: Xid" not in line))
    bad = probe_log(
        tmp_path / "bad.log",
        FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml",
        FIXTURES / "journal-xid79-fallen-off-bus.log",
    )
    healthy = probe_log(tmp_path / "healthy.log", FIXTURES / "nvidia-smi-tesla-p100-r510.xml", clean)
    probe_logs = {name: (bad if name == nodes[0] else healthy) for name in nodes}
    rank_logs = {}
    for rank, text in node_logs(trainer_rank_logs, IB_LOG).items():
        rank_logs[rank] = tmp_path / ("rank-%d.log" % rank)
        rank_logs[rank].write_text(text)
    api = k8s_cluster.api_client()
    state_dir = k8s_cluster.harness.state_dir
    servers = [
        FleetLogServer(api, state_dir, probes, probe_logs, key=pod_node),
        FleetLogServer(api, state_dir, namespace, rank_logs, key=node_index),
    ]
    for server in servers:
        server.start()
    yield {"cluster": k8s_cluster, "nodes": nodes, "suffix": suffix, "namespace": namespace,
           "probes": probes, "runs": tmp_path / "runs", "servers": servers}  # fmt: skip
    for server in servers:
        server.stop()
    k8s_cluster.kubectl("delete", "node", *nodes, "--wait=false", check=False)
    k8s_cluster.kubectl("delete", "namespace", probes, "--wait=false", check=False)
    delete_launch_namespace(k8s_cluster, namespace)
    for server in servers:
        assert not server.errors, server.errors


def train(gated, run_id, nnodes):
    settings = launch_vars(
        gated["cluster"], gated["namespace"], gated["runs"], "pytorchjob",
        training_job_name="gt",
        training_job_run_id=run_id,
        training_job_nnodes=nnodes,
        training_job_node_selector={TEST_KEY: gated["suffix"]},
        training_job_tolerations=[{"key": TEST_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        training_job_gate="quick",
        node_health_image="registry.example/gpuops-training-ee:0.1.0",
        node_health_namespace=gated["probes"],
        node_health_checks=["nvidia_smi", "kernel_log"],
        # One of four may be quarantined (the default 10 % allows none of so few).
        node_health_max_quarantine=25,
        node_health_poll_interval_s=1,
        node_health_timeout_s=60,
    )  # fmt: skip
    return ansible_playbook(
        "-i", "inventories/local", "--extra-vars", json.dumps(settings), "playbooks/train.yml",
        collections_path=DEV_COLLECTIONS, timeout=600,
    )  # fmt: skip


def said(run):
    """The run's output with its lines joined (the YAML callback folds long strings)."""
    return " ".join(run.output.split())


def get_json(cluster, *args):
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def enough(gated):
    """Two pods on four nodes, node a bad."""
    return train(gated, "gt-enough", 2)


@pytest.fixture(scope="module")
def too_few(gated, enough):
    """Four pods on the same nodes, after the first run: node a is still bad."""
    return train(gated, "gt-too-few", 4)


def test_the_bad_node_is_quarantined_and_named_and_the_run_verified_on_the_others(gated, enough):
    a = gated["nodes"][0]
    assert enough.rc == 0, enough
    output = said(enough)
    assert "Health gate: PASSED - 3 of 4 node(s) passed, the run needs 2" in output
    assert (
        "%s: FAILED - isolate ecc_uncorrectable_volatile on GPU 0 (0000:01:00.0): 2 uncorrectable ECC "
        "error(s) since the driver last loaded; tainted gpuops.training/unhealthy:NoSchedule" % a
    ) in output
    assert "The run avoids: %s" % a in output
    assert "PASSED (2/2 ranks reported" in output
    node = get_json(gated["cluster"], "node", a)
    quarantined = {"key": TAINT, "value": "ecc_uncorrectable_volatile", "effect": "NoSchedule"}
    assert quarantined in node["spec"]["taints"]
    assert node["metadata"]["annotations"]["gpuops.training/unhealthy-run"] == "gt-enough-gate"
    for other in gated["nodes"][1:]:
        taints = get_json(gated["cluster"], "node", other)["spec"]["taints"]
        assert [taint["key"] for taint in taints] == [TEST_KEY]
    # The pods ran on the others, and their affinity leaves node a out.
    pods = get_json(gated["cluster"], "pods", "-n", gated["namespace"])["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["spec"]["nodeName"] in gated["nodes"][1:]
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [a]}]}
        ]
    # The gate's pass is kept beside the run; its probe Jobs are gone.
    summary = json.loads((gated["runs"] / "gt-enough-gate" / "summary.json").read_text())
    assert summary["quarantine"]["quarantined"] == [a] and summary["nodes_checked"] == 4
    assert get_json(gated["cluster"], "jobs", "-n", gated["probes"])["items"] == []


def test_too_few_healthy_nodes_stop_the_play_before_the_workload_exists(gated, too_few):
    a = gated["nodes"][0]
    assert too_few.rc != 0, too_few
    output = said(too_few)
    assert "Health gate: STOPPED - 3 of 4 node(s) passed, the run needs 4; nothing was launched" in output
    assert "%s: FAILED - isolate ecc_uncorrectable_volatile on GPU 0" % a in output
    assert "The health pass: %s" % (gated["runs"] / "gt-too-few-gate") in output
    # Nothing of the run: no PyTorchJob but the first run's, no new pod, no run directory.
    jobs = get_json(gated["cluster"], "pytorchjobs.kubeflow.org", "-n", gated["namespace"])["items"]
    assert len(jobs) == 1 and "enough" in jobs[0]["metadata"]["labels"]["gpuops.training/run-id"]
    assert len(get_json(gated["cluster"], "pods", "-n", gated["namespace"])["items"]) == 2
    assert not (gated["runs"] / "gt-too-few").exists()
    assert (gated["runs"] / "gt-too-few-gate" / "summary.json").is_file()

"""A 16-pod job of 128 ranks through playbooks/train.yml, unchanged, on a simulated fleet.

16 kwok nodes with 8 GPUs each (tainted so that only this job lands there); a PyTorchJob and
an Indexed Job of 16 pods x 8 ranks made by the real Training Operator and Job controller;
each pod's log is what 8 ranks of a 128-rank job print (tests/harness/fleet.py: NCCL's init
over IB with GDR, one Init COMPLETE per rank, the trainer's JSON lines of a real run), 1 MB a
pod, served by kwok once the scheduler placed the pod. benchmarks/scale runs the same at 16,
64 and 128 pods with 1 MB and 10 MB a pod.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from fleet import FleetJob, FleetLogServer, fleet_job_vars, fleet_node_specs, fleet_nodes

PLAYBOOK = "playbooks/train.yml"
INVENTORY = "inventories/local"
PODS = 16
RANKS = PODS * 8
POD_BYTES = 1 << 20


@pytest.fixture(scope="module")
def fleet(k8s_cluster):
    """16 fleet nodes, removed at the end."""
    names = fleet_nodes(PODS, prefix="fleet16")
    k8s_cluster.harness.create_nodes(fleet_node_specs(names))
    yield names
    k8s_cluster.kubectl("delete", "node", *names, "--wait=false", check=False)


def run_fleet(run_playbook, cluster, namespace, tmp_path, job, launcher, annotate=None, **extra):
    logs = job.write_logs(tmp_path / "pod-logs", POD_BYTES)
    server = FleetLogServer(cluster.api_client(), cluster.harness.state_dir, namespace, logs, annotate)
    server.start()
    try:
        run = run_playbook(
            PLAYBOOK,
            INVENTORY,
            fleet_job_vars(cluster.kubeconfig, namespace, tmp_path / "runs", launcher, PODS, 20, **extra),
        )
    finally:
        server.stop()
    assert not server.errors, server.errors
    (run_dir,) = [path for path in (tmp_path / "runs").iterdir() if path.is_dir() and path.name != "history"]
    return run, run_dir, json.loads((run_dir / "summary.json").read_text()), server.served


def test_a_16_pod_pytorchjob_of_128_ranks_is_collected_and_verified(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, fleet, tmp_path
):
    run, run_dir, summary, served = run_fleet(
        run_playbook, k8s_cluster, launch_namespace, tmp_path, FleetJob(PODS, trainer_rank_logs), "pytorchjob"
    )
    assert run.rc == 0, run
    assert "PASSED (%d/%d ranks reported" % (RANKS, RANKS) in run.output
    assert summary["verdict"] == "passed", summary["failures"]
    assert summary["nccl"]["init_complete_ranks"] == list(range(RANKS))
    assert (summary["nccl"]["transport"], summary["nccl"]["gdr"]) == ("IB", True)
    # Every pod's log was streamed to its file; the early copies hold every pod's head.
    logs = sorted((run_dir / "logs").glob("*.log"))
    assert [path.stem for path in logs] == sorted(served)
    assert all(path.stat().st_size >= POD_BYTES for path in logs)
    assert len(list((run_dir / "logs" / "early").glob("*.log"))) == PODS
    # The ranks ran 8 to a node, on the nodes the scheduler chose.
    nodes = {}
    for rank in summary["ranks"]:
        nodes.setdefault(rank["node"], []).append(rank["rank"])
    assert sorted(nodes) == sorted(fleet)
    assert sorted(served.values()) == sorted(fleet)
    assert all(len(ranks) == 8 for ranks in nodes.values())


def test_an_indexed_job_with_a_rank_stuck_in_init_and_an_oom_killed_pod_names_exactly_those(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, fleet, tmp_path
):
    stuck_rank, killed_pod = 21, 5
    job = FleetJob(PODS, trainer_rank_logs, missing_init=[stuck_rank], killed_pods=[killed_pod])
    oom = {"gpuops.test/fail": "true", "gpuops.test/exit-code": "137", "gpuops.test/reason": "OOMKilled"}
    run, run_dir, summary, served = run_fleet(
        run_playbook,
        k8s_cluster,
        launch_namespace,
        tmp_path,
        job,
        "indexed_job",
        annotate={killed_pod: oom},
        training_job_backoff_limit=0,
    )
    assert run.rc != 0, run
    assert summary["verdict"] == "failed"
    failures = summary["failures"]
    killed_name = next(name for name in served if re.search(r"-%d-[a-z0-9]+$" % killed_pod, name))
    stuck_name = next(name for name in served if re.search(r"-%d-[a-z0-9]+$" % (stuck_rank // 8), name))
    # The OOM kill: one message naming the pod, its node and its 8 ranks.
    (kill,) = [failure for failure in failures if "OOMKilled" in failure]
    assert kill.startswith(
        "pod %s/%s on node %s: container trainer exited with code 137 (OOMKilled"
        % (launch_namespace, killed_name, served[killed_name])
    ), kill
    assert "; ranks 40-47 stopped; last memory sample (rank 40): RSS " in kill
    # The rank whose init never completed, by rank and node, in the trainer's and NCCL's words.
    assert (
        "rank 21 never took a training step (the last record is run_start: stuck in the process "
        "group's or NCCL's init) on node %s" % served[stuck_name] in failures
    ), failures
    (nccl,) = [failure for failure in failures if failure.startswith("init_complete_ranks:")]
    assert "rank 21 did not on host %s " % stuck_name.rsplit("-", 1)[0] in nccl, nccl
    assert summary["nccl"]["init_complete_ranks"] == [rank for rank in range(RANKS) if rank != stuck_rank]
    # Exactly those ranks: every rank any failure names is one of them.
    named = set()
    for failure in failures:
        first_line = failure.split("\n")[0].replace("expected ranks 0-%d" % (RANKS - 1), "")
        for first, last in re.findall(r"\branks? (\d+)(?:-(\d+))?", first_line):
            named.update(range(int(first), int(last or first) + 1))
    assert named == {stuck_rank, *range(40, 48)}, failures
    assert pathlib.Path(run_dir / "logs" / (killed_name + ".log")).is_file()

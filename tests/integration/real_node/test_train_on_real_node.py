"""playbooks/train.yml on the harness's real node: real pods of the trainer image built from
training/Containerfile, rendezvous over the pod network and cluster DNS, logs read through
kubelet, verified by training_verify. Settings come from inventories/harness-real-node, the
inventory of `make cluster-demo`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_demo import INVENTORY

pytestmark = [pytest.mark.slow, pytest.mark.real_node]


def train(run_playbook, env, namespace, runs_dir, **settings):
    variables = {
        "training_job_namespace": namespace,
        "training_job_runs_dir": str(runs_dir),
        **settings,
    }
    run = run_playbook("playbooks/train.yml", INVENTORY, variables, timeout=1200, extra_env=env)
    run_dirs = [path for path in Path(runs_dir).iterdir() if path.is_dir()] if Path(runs_dir).exists() else []
    assert len(run_dirs) == 1, run
    run_dir = run_dirs[0]
    return run, run_dir, json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("launcher", ["pytorchjob", "indexed_job"])
def test_two_pods_train_on_the_real_node_and_pass_verification(
    k8s_cluster, real_node, run_playbook, node_inventory_env, training_namespace, tmp_path, launcher
):
    run, run_dir, summary = train(
        run_playbook,
        node_inventory_env,
        training_namespace,
        tmp_path / "runs",
        training_job_launcher=launcher,
    )
    assert run.rc == 0, run
    assert "PASSED (2/2 ranks reported" in run.output
    assert summary["verdict"] == "passed", summary
    ranks = sorted(summary["ranks"], key=lambda rank: rank["rank"])
    assert [rank["rank"] for rank in ranks] == [0, 1]
    # Both ranks ran on the real node, each in its own pod, and said what locked memory it got.
    assert {rank["node"] for rank in ranks} == {real_node.name}
    assert len({rank["host"] for rank in ranks}) == 2
    assert all(isinstance(rank["memlock_bytes"], int) for rank in ranks)
    # The pods were real: kubelet served their logs, and they ran the image's non-root user.
    pods = json.loads(k8s_cluster.kubectl("get", "pods", "-n", training_namespace, "-o", "json").stdout)[
        "items"
    ]
    assert pods and all(pod["spec"]["nodeName"] == real_node.name for pod in pods)
    assert all(pod["status"]["qosClass"] == "Guaranteed" for pod in pods)
    assert len(list((run_dir / "logs").glob("*.log"))) == 2
    assert "report.html" in {path.name for path in run_dir.iterdir()}


@pytest.mark.parametrize(
    ("pull_policy", "reasons"),
    [("Never", ("ErrImageNeverPull",)), ("IfNotPresent", ("ErrImagePull", "ImagePullBackOff"))],
)
def test_a_missing_image_ends_the_run_at_its_deadline_naming_each_pod_its_reason_and_the_image(
    k8s_cluster,
    real_node,
    run_playbook,
    node_inventory_env,
    training_namespace,
    tmp_path,
    pull_policy,
    reasons,
):
    image = "localhost/gpuops-trainer:not-built"
    variables = {
        "training_job_namespace": training_namespace,
        "training_job_runs_dir": str(tmp_path / "runs"),
        "training_job_image": image,
        "training_job_image_pull_policy": pull_policy,
        "training_job_timeout_s": 60,
    }
    run = run_playbook("playbooks/train.yml", INVENTORY, variables, timeout=600, extra_env=node_inventory_env)
    assert run.rc == 2, run
    # The error Ansible prints on one line: the deadline, then every stuck pod with its reason.
    (error,) = [line for line in run.output.splitlines() if line.startswith("[ERROR]: Task failed")]
    assert "did not finish within 60 s" in error, error
    stuck = error.split("stuck pods: ", 1)[1].split("; ")
    print(error)
    assert [entry.split(":", 1)[0].rsplit("-", 2)[1:] for entry in stuck] == [
        ["worker", "0"],
        ["worker", "1"],
    ]
    for entry in stuck:
        assert "on %s" % real_node.name in entry, entry
        assert any(reason in entry for reason in reasons), entry
        assert '"%s"' % image in entry, entry
    # The workload was stopped, so it does not hold the node after its deadline.
    assert k8s_cluster.kubectl("get", "pytorchjobs", "-n", training_namespace, "-o", "name").stdout == ""

"""Long runs on the harness's real control plane: a detached launch verified later by
playbooks/verify.yml from the definition it kept (in the run directory, or in the cluster's
ConfigMap on a fresh controller, as an AWX job's execution environment is), the early log
copies that keep every rank's NCCL init when the node rotates the log or the pods are gone by
the end, the verdict and summary handed to AWX through set_stats, and a run with NCCL's INFO
lines off judged "not verifiable" instead of failed.

The pods run on kwok; their logs are served as in test_launch_kubernetes (one rank of a real
gloo trainer run and one host of a real NCCL log).
"""

from __future__ import annotations

import json
import pathlib
import threading

from cluster_helpers import PodLogServer
from test_launch_kubernetes import IB_LOG, INVENTORY, PLAYBOOK, get_json, launch_vars, node_logs, only_run_dir

VERIFY = "playbooks/verify.yml"
# The default callback prints set_stats' data (what AWX reads) after the recap, here as JSON.
STATS_ENV = {"ANSIBLE_SHOW_CUSTOM_STATS": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}


def custom_stats(run):
    """The run's set_stats data (aggregated), as AWX gets it."""
    lines = [line.strip() for line in run.output.splitlines() if line.strip().startswith("RUN: ")]
    assert lines, run
    return json.loads(lines[-1][len("RUN: ") :])


def run_label(run_id):
    return run_id[:63].rstrip("-._")


def test_a_detached_run_is_verified_later_from_its_definition_even_when_its_pods_are_gone(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    runs = tmp_path / "runs"
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        runs,
        "indexed_job",
        training_job_detach=True,
        training_job_progress_interval_s=2,
        # Long enough to still be running when the launch and the progress report end (each
        # playbook takes a minute on two busy cores), within the deadline.
        training_job_pod_annotations={"gpuops.test/run-duration": "150s"},
        training_job_timeout_s=420,
    )
    logs = node_logs(trainer_rank_logs, IB_LOG)
    server = PodLogServer(k8s_cluster, launch_namespace, logs)
    server.start()
    try:
        launch = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=600, extra_env=STATS_ENV)
        assert launch.rc == 0, launch
        run_dir = only_run_dir(runs)
        run_id = run_dir.name
        assert "Run %s is detached" % run_id in launch.output
        assert "ansible-playbook gpuops.training.verify -i %s -e run_id=%s" % (
            pathlib.Path(INVENTORY).resolve(),
            run_id,
        ) in " ".join(launch.output.split())
        assert not (run_dir / "summary.json").exists()
        launched = custom_stats(launch)
        assert launched["gpuops_training_run_id"] == run_id
        assert launched["gpuops_training_runs"][run_id]["verdict"] == "running"
        assert launched["gpuops_training_runs"][run_id]["early_logs_saved"] is True
        early = run_dir / "logs" / "early"
        copies = {path.stem: path.read_text() for path in early.glob("*.log")}
        assert len(copies) == 2 and (early / "complete").is_file()
        assert sorted(copies.values()) == sorted(logs.values())
        definition = json.loads((run_dir / "run-definition.json").read_text())
        assert (definition["kind"], definition["expected_pods"], definition["world_size"]) == ("Job", 2, 2)
        assert (definition["nccl_transport"], definition["nccl_debug"], definition["timeout_s"]) == (
            "IB",
            "INFO",
            420,
        )
        (configmap,) = get_json(
            k8s_cluster,
            "configmaps",
            "-n",
            launch_namespace,
            "-l",
            "gpuops.training/run-id=%s" % run_label(run_id),
        )["items"]
        assert json.loads(configmap["data"]["run-definition"]) == definition

        # A fresh controller (an AWX job's execution environment) asks for the progress only:
        # the definition comes from the ConfigMap, the run is still going.
        fresh = tmp_path / "fresh"
        progress = run_playbook(
            VERIFY,
            INVENTORY,
            {
                "run_id": run_id,
                "training_job_runs_dir": str(fresh),
                "training_job_namespace": launch_namespace,
                "training_job_kubeconfig": str(k8s_cluster.kubeconfig),
                "training_job_attach_wait": False,
                "training_verify_memlock_unlimited": False,
            },
            timeout=600,
            extra_env=STATS_ENV,
        )
        assert progress.rc == 0, progress
        assert "Run %s is still going" % run_id in progress.output
        assert custom_stats(progress)["gpuops_training_runs"][run_id]["verdict"] == "running"
        assert "gpuops_training_run_id" not in custom_stats(progress)
        assert json.loads((fresh / run_id / "run-definition.json").read_text()) == definition
        assert not (fresh / run_id / "summary.json").exists()

        k8s_cluster.kubectl(
            "wait",
            "--for=condition=complete",
            "--timeout=300s",
            "-n",
            launch_namespace,
            "job/%s" % definition["name"],
            timeout=330,  # kubectl's own wait is the bound; a loaded machine needs more than 120 s
        )
    finally:
        server.stop()
    assert not server.errors, server.errors
    # The pods are gone by the time the run is verified: their early copies are all there is.
    k8s_cluster.kubectl(
        "delete", "pods", "-n", launch_namespace, "-l", definition["pod_selector"], "--wait=true"
    )
    assert (
        get_json(k8s_cluster, "pods", "-n", launch_namespace, "-l", definition["pod_selector"])["items"] == []
    )

    reports = tmp_path / "reports" / run_id
    verify = run_playbook(
        VERIFY,
        INVENTORY,
        {
            "run_id": run_id,
            "training_job_runs_dir": str(runs),
            "training_job_kubeconfig": str(k8s_cluster.kubeconfig),
            "training_verify_report_dir": str(reports),
            "training_verify_memlock_unlimited": False,
        },
        timeout=600,
        extra_env=STATS_ENV,
    )
    assert verify.rc == 0, verify
    assert "PASSED (2/2 ranks reported" in verify.output
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["verdict"] == "passed", summary["failures"]
    assert summary["run_id"] == run_id and summary["launcher"] == "indexed_job"
    assert summary["nccl"]["transport"] == "IB" and summary["nccl"]["init_complete_ranks"] == [0, 1]
    assert (reports / "report.md").is_file() and not (run_dir / "summary.json").exists()
    assert {path.stem: path.read_text() for path in (run_dir / "logs").glob("*.log")} == copies
    verdict = custom_stats(verify)["gpuops_training_runs"][run_id]
    assert verdict["verdict"] == "passed" and verdict["failures"] == []
    assert verdict["nccl"]["transport"] == "IB" and verdict["nccl"]["verifiable"] is True
    assert verdict["report_dir"] == str(reports) and verdict["ranks_reporting"] == 2


def test_an_attached_run_keeps_every_ranks_init_when_the_node_rotates_the_log_away(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    runs = tmp_path / "runs"
    settings = launch_vars(
        k8s_cluster,
        launch_namespace,
        runs,
        "pytorchjob",
        training_job_progress_interval_s=2,
        training_job_pod_annotations={"gpuops.test/run-duration": "25s"},
    )
    logs = node_logs(trainer_rank_logs, IB_LOG)
    # What the node still has at the end: the second half of each log, without NCCL's init.
    tails = {}
    for index, text in logs.items():
        cut = text.index("\n", len(text) // 2) + 1
        tails[index] = text[cut:]
        assert "NCCL INFO" not in tails[index] and "Init COMPLETE" in text[:cut]
    server = PodLogServer(k8s_cluster, launch_namespace, logs)
    server.start()
    rotated = threading.Event()
    halt = threading.Event()

    def rotate_once_copied():
        while not halt.is_set():
            marks = list(runs.glob("*/logs/early/complete"))
            if marks and len(server.served) == 2:
                for pod, index in list(server.served.items()):
                    k8s_cluster.serve_pod_log(launch_namespace, pod, tails[index])
                rotated.set()
                return
            halt.wait(0.2)

    rotator = threading.Thread(target=rotate_once_copied, daemon=True)
    rotator.start()
    try:
        run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=900, extra_env=STATS_ENV)
    finally:
        halt.set()
        rotator.join(timeout=10)
        server.stop()
    assert not server.errors, server.errors
    assert rotated.is_set(), "the early copies were never marked complete"
    assert run.rc == 0, run
    assert "PASSED (2/2 ranks reported" in run.output and "is detached" not in run.output
    run_dir = only_run_dir(runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "passed", summary["failures"]
    assert summary["nccl"]["transport"] == "IB" and summary["nccl"]["init_complete_ranks"] == [0, 1]
    # Each pod's log is its early copy joined to the rotated tail, with no line twice.
    assert sorted(path.read_text() for path in (run_dir / "logs").glob("*.log")) == sorted(logs.values())
    assert custom_stats(run)["gpuops_training_runs"][run_dir.name]["verdict"] == "passed"


def test_a_run_with_nccl_info_lines_off_passes_saying_the_transport_was_not_verifiable(
    run_playbook, k8s_cluster, launch_namespace, checkpoint_pvc, trainer_rank_logs, tmp_path
):
    runs = tmp_path / "runs"
    settings = launch_vars(k8s_cluster, launch_namespace, runs, "indexed_job", training_job_nccl_debug="WARN")
    # NCCL_DEBUG=WARN on a run that went well: NCCL printed nothing.
    server = PodLogServer(k8s_cluster, launch_namespace, dict(trainer_rank_logs))
    server.start()
    try:
        run = run_playbook(PLAYBOOK, INVENTORY, settings, timeout=900, extra_env=STATS_ENV)
    finally:
        server.stop()
    assert run.rc == 0, run
    assert "NCCL transport not verifiable: nccl_used, nranks, transport" in run.output
    assert "NCCL_DEBUG=WARN prints no INFO lines" in run.output
    summary = json.loads((only_run_dir(runs) / "summary.json").read_text())
    assert summary["verdict"] == "passed", summary["failures"]
    assert summary["nccl"]["verifiable"] is False
    pod = get_json(k8s_cluster, "pods", "-n", launch_namespace)["items"][0]
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("WARN", "INIT,NET")
    verdict = custom_stats(run)["gpuops_training_runs"][summary["run_id"]]
    assert verdict["verdict"] == "passed" and verdict["nccl"]["verifiable"] is False

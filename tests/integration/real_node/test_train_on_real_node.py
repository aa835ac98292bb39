"""The collection's playbooks on the harness's real node, with inventories/harness-real-node
(the inventory of `make cluster-demo`): provision_nodes.yml configures CRI-O and checks it on
fresh containers; train.yml runs real pods of the image built from training/Containerfile,
rendezvous over the pod network and cluster DNS, logs read through kubelet, verified by
training_verify; faults are real kills and real missing images."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from cluster_demo import INVENTORY

from ansible_collections.gpuops.training.plugins.module_utils.training_log import MEMORY_PHASES

pytestmark = [pytest.mark.slow, pytest.mark.real_node]


def train(run_playbook, env, namespace, runs_dir, **settings):
    variables = {"training_job_namespace": namespace, "training_job_runs_dir": str(runs_dir), **settings}
    run = run_playbook("playbooks/train.yml", INVENTORY, variables, timeout=1200, extra_env=env)
    runs = list(Path(runs_dir).iterdir()) if Path(runs_dir).exists() else []
    run_dirs = [path for path in runs if path.is_dir() and path.name != "history"]
    assert len(run_dirs) == 1, run
    return run, run_dirs[0], json.loads((run_dirs[0] / "summary.json").read_text())


def hard_memlock(env) -> int:
    return int(env["GPUOPS_REAL_NODE_HARD_MEMLOCK"])


def test_provision_nodes_proves_the_dropin_on_fresh_containers_and_changes_nothing_twice(
    provisioned_node, run_playbook, node_inventory_env, real_node
):
    hard = hard_memlock(node_inventory_env)
    output = provisioned_node.output
    # crio_limits restarted CRI-O through the harness and proved what a new container gets.
    assert "A new CRI-O container gets the configured limits:" in output
    for uid in (0, 65534):
        assert "as uid %d: memlock %d:%d" % (uid, hard, hard) in output
        # preflight read the same through its own fresh containers.
        assert "crio: a fresh container as uid %d gets memlock %d KiB" % (uid, hard // 1024) in output
    assert "Checks: 3 of 3 held" in output
    dropin = Path(real_node.environment["GPUOPS_REAL_NODE_CRIO_CONFIG_DIR"]) / "99-ulimits.conf"
    assert '"memlock=%d:%d"' % (hard, hard) in dropin.read_text()
    again = run_playbook(
        "playbooks/provision_nodes.yml", INVENTORY, timeout=900, extra_env=node_inventory_env
    )
    assert again.rc == 0, again
    assert "real-node-0                : ok=" in again.output and " changed=0 " in again.output, again


# With a Master, the operator's init container on the Worker waits for the Master's name
# (training_operator's template: requests equal to limits, and a wait that works with any busybox).
@pytest.mark.parametrize(
    ("launcher", "master"), [("pytorchjob", False), ("pytorchjob", True), ("indexed_job", False)]
)
def test_two_pods_train_on_the_real_node_and_pass_verification(
    k8s_cluster, real_node, provisioned_node, run_playbook, node_inventory_env, training_namespace, tmp_path,
    launcher, master,
):  # fmt: skip
    run, run_dir, summary = train(
        run_playbook,
        node_inventory_env,
        training_namespace,
        tmp_path / "runs",
        training_job_launcher=launcher,
        training_job_pytorchjob_master=master,
    )
    assert run.rc == 0, run
    assert "PASSED (2/2 ranks reported" in run.output
    assert summary["verdict"] == "passed", summary
    ranks = sorted(summary["ranks"], key=lambda rank: rank["rank"])
    assert [rank["rank"] for rank in ranks] == [0, 1]
    # Both ranks ran on the real node, each in its own pod, with the locked memory the node's
    # drop-in gives (this host's hard limit) - which the verdict checked.
    assert {rank["node"] for rank in ranks} == {real_node.name}
    assert len({rank["host"] for rank in ranks}) == 2
    assert [rank["memlock_bytes"] for rank in ranks] == [hard_memlock(node_inventory_env)] * 2
    pods = json.loads(k8s_cluster.kubectl("get", "pods", "-n", training_namespace, "-o", "json").stdout)[
        "items"
    ]
    assert pods and all(pod["spec"]["nodeName"] == real_node.name for pod in pods)
    assert all(pod["status"]["qosClass"] == "Guaranteed" for pod in pods)
    # Hardened and still training: no ServiceAccount token, a read-only root filesystem (what
    # a rank writes outside its volumes goes to /tmp), the namespace's NetworkPolicy for ranks.
    for pod in pods:
        assert pod["spec"]["automountServiceAccountToken"] is False
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert not any(
            mount["mountPath"].startswith("/var/run/secrets") for mount in container["volumeMounts"]
        )
    policy = json.loads(
        k8s_cluster.kubectl(
            "get", "networkpolicy", "training-ranks", "-n", training_namespace, "-o", "json"
        ).stdout
    )
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/component": "ranks"}
    if master:
        # The operator's init container on the Worker, from the template the harness gives it
        # (the training_operator role's): requests equal to limits, so the namespace's
        # LimitRange admits the pod and it stays Guaranteed.
        (worker,) = [pod for pod in pods if "-worker-" in pod["metadata"]["name"]]
        (init,) = worker["spec"]["initContainers"]
        assert init["name"] == "init-pytorch"
        assert init["resources"]["requests"] == init["resources"]["limits"], init["resources"]
    assert len(list((run_dir / "logs").glob("*.log"))) == 2
    assert "report.html" in {path.name for path in run_dir.iterdir()}
    # Each rank read its pod's memory cgroup: the limit the pod was given, and a working set
    # the recommendation for the next run is made from.
    memory = summary["memory"]
    limit = 3 * 1024**3  # training_job_memory in inventories/harness-real-node
    assert [row["cgroup_limit_bytes"] for row in memory["ranks"]] == [limit, limit], memory["ranks"]
    assert memory["recommendation"]["basis"] == "cgroup_working_set", memory["recommendation"]


@pytest.mark.parametrize(
    ("pull_policy", "reasons"),
    [
        ("Never", ("ErrImageNeverPull",)),
        ("IfNotPresent", ("ErrImagePull", "ImagePullBackOff", "RegistryUnavailable")),
    ],
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
    # Each pod the message describes (as stuck, or merely slow when the deadline fell between
    # two pull attempts) is named with its node, its reason and the image.
    described = [entry for entry in re.split(r"(?:stuck pods|slow|pods): |; ", error) if "-worker-" in entry]
    assert described, error
    for entry in described:
        assert "on %s" % real_node.name in entry, error
        assert any(reason in entry for reason in reasons), error
        assert image in entry, error
    # The workload was stopped, so it does not hold the node after its deadline.
    assert k8s_cluster.kubectl("get", "pytorchjobs", "-n", training_namespace, "-o", "name").stdout == ""


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def worker_pid(rank: int) -> int | None:
    """The host pid of the trainer process of RANK (a torchrun worker in a pod on this node)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        # The worker, not its torchrun agent (whose command names the trainer too); only pods
        # pass GPUOPS_NODE_NAME, so no process of the tests' own runs is taken for it.
        worker = b"gpuops_trainer.train" in command and b"gpuops_trainer.launch" not in command
        in_pod = any(item.startswith(b"GPUOPS_NODE_NAME=") for item in environ)
        if worker and in_pod and b"RANK=%d" % rank in environ:
            return int(proc.name)
    return None


def attempts(rank_records: list[dict]) -> list[list[dict]]:
    """The records of each attempt of one rank (a recreated pod's trainer appends to the same
    file, and counts its own attempts from 0 again): an attempt begins with the records it
    writes before its run_start - its datasets and, when it resumes, the resume."""
    starts = []
    for index, record in enumerate(rank_records):
        if record["event"] == "run_start":
            begin = index
            while begin > 0 and rank_records[begin - 1]["event"] in ("dataset", "resume"):
                begin -= 1
            starts.append(begin)
    return [
        rank_records[begin:end] for begin, end in zip(starts, [*starts[1:], len(rank_records)], strict=True)
    ]


def lineage(segments: list[list[dict]]) -> list[int]:
    """The optimizer steps in the final model: each attempt's steps up to where the next one
    resumed."""
    steps = []
    for index, segment in enumerate(segments):
        done = [record["step"] for record in segment if record["event"] == "step"]
        later = [r["step"] for s in segments[index + 1 :] for r in s if r["event"] == "resume"][:1]
        steps += [step for step in done if not later or step <= later[0]]
    return steps


def test_a_worker_killed_on_the_node_restarts_under_exit_code_and_resumes_without_repeating_a_step(
    k8s_cluster, real_node, provisioned_node, run_playbook, node_inventory_env, training_namespace, tmp_path
):
    volume = k8s_cluster.harness.state_dir / "real-node" / "volumes" / training_namespace
    settings = {
        "training_job_pytorchjob_restart_policy": "ExitCode",
        "training_job_backoff_limit": 4,
        "training_job_epochs": 4,
        "training_job_extra_args": ["--checkpoint-every-steps", "2"],
        # A record for every optimizer step, so the lineage below sees each one.
        "training_job_print_freq": 1,
    }
    outcome = {}
    play = threading.Thread(
        target=lambda: outcome.update(
            result=train(run_playbook, node_inventory_env, training_namespace, tmp_path / "runs", **settings)
        )
    )
    play.start()
    killed = None
    # Polls, not a clock: wait until rank 1 is past its first checkpoint, then kill its trainer
    # process from the host, as the kernel's OOM killer would.
    for _poll in range(3000):
        # Rank 0 writes the checkpoints; rank 1 is the one killed.
        first, second = list(volume.glob("*/metrics/rank0.jsonl")), list(volume.glob("*/metrics/rank1.jsonl"))
        checkpoints = [r for r in records(first[0]) if r["event"] == "checkpoint"] if first else []
        steps = [r["step"] for r in records(second[0]) if r["event"] == "step"] if second else []
        pid = worker_pid(1) if checkpoints and steps and max(steps) > checkpoints[0]["step"] else None
        if pid:
            killed = pid
            os.kill(killed, signal.SIGKILL)
            break
        assert play.is_alive(), outcome
        time.sleep(0.2)
    play.join()
    assert killed, "rank 1 never got past its first checkpoint"
    run, _run_dir, summary = outcome["result"]
    assert run.rc == 0, run
    assert summary["verdict"] == "passed", summary
    (metrics_dir,) = [path.parent for path in volume.glob("*/metrics/rank0.jsonl")]
    for rank in (0, 1):
        segments = attempts(records(metrics_dir / ("rank%d.jsonl" % rank)))
        # The operator replaced the pods (137 for the killed rank, 200 for its peer), and the
        # second attempt resumed from the checkpoint on the PVC.
        assert len(segments) == 2, [len(segment) for segment in segments]
        assert any(record["event"] == "resume" for record in segments[1])
        total = [r["step"] for r in segments[-1] if r["event"] == "run_end"][0]
        assert lineage(segments) == list(range(1, total + 1)), "a step was lost or applied twice"
    # What the Training Operator saw: the killed worker exited 137 and its peer 200, it replaced
    # both (ExitCode: 128 and up is retryable); the verdict above says the new ones finished.
    events = json.loads(k8s_cluster.kubectl("get", "events", "-n", training_namespace, "-o", "json").stdout)
    exits = [event["message"] for event in events["items"] if event["reason"] == "ExitedWithCode"]
    assert any(text.endswith("-worker-1 exited with code 137") for text in exits), exits
    assert any(text.endswith("-worker-0 exited with code 200") for text in exits), exits
    assert any(event["reason"] == "PyTorchJobRestarting" for event in events["items"])


def test_a_rank_over_its_memory_limit_is_oom_killed_and_named_with_its_last_sample_and_phase(
    k8s_cluster, real_node, provisioned_node, run_playbook, node_inventory_env, training_namespace, tmp_path
):
    # Rank 1 keeps 512 MiB more each epoch (the trainer's leak hook) in a pod limited to 2 GiB:
    # the kernel's OOM killer ends it within a few epochs; no restart, so the run fails.
    settings = {
        "training_job_memory": "2Gi",
        "training_job_epochs": 8,
        "training_job_extra_args": ["--leak-mib-per-epoch", "1@512"],
        "training_job_pytorchjob_restart_policy": "Never",
        "training_job_backoff_limit": 0,  # not used with Never
    }
    variables = {
        "training_job_namespace": training_namespace,
        "training_job_runs_dir": str(tmp_path / "runs"),
        **settings,
    }
    run = run_playbook(
        "playbooks/train.yml", INVENTORY, variables, timeout=1200, extra_env=node_inventory_env
    )
    assert run.rc == 2, run
    output = " ".join(run.output.split())
    # The killed pod, with what the kubelet said and the limit it hit, and the rank's last
    # memory sample with its phase, read from its log.
    killed = re.search(
        r"-worker-1 on node %s: container \S+ exited with code 137 \(OOMKilled: [^)]*of 2Gi\)"
        % real_node.name,
        output,
    )
    assert killed, run
    # Quantities as the report writes them: 2060Mi, 2Gi; RSS may add its high-water mark.
    quantity = r"([\d.]+)(Mi|Gi)"
    sample = re.search(
        r"OOMKilled[^;]*; rank 1 stopped; last memory sample \(rank 1\): RSS %s[^,]*, "
        r"cgroup working set %s of its 2Gi limit, in phase (\w+)" % (quantity, quantity),
        output,
    )
    assert sample, re.findall(r"OOMKilled[^;]*;[^;]*;[^;]*", output) or run

    def mib(number, unit):
        return float(number) * (1024 if unit == "Gi" else 1)

    rss, working_set, phase = mib(*sample.group(1, 2)), mib(*sample.group(3, 4)), sample.group(5)
    # The working set is what the limit bounds; RSS also counts shared file pages (libraries
    # charged to other cgroups), so it can pass the limit.
    assert 1024 < working_set <= 2048 and rss > 1024 and phase in MEMORY_PHASES, sample.group(0)
    # The pod that failed first is named first: the OOM-killed rank, not the peer that lost it.
    failed = output.split("; failed pods: ", 1)[1]
    assert re.match(r"\S+-worker-1: Failed on %s, OOMKilled" % real_node.name, failed), failed
    peer = r"-worker-0: Failed on %s, Error: container \S+ exited with code 200" % real_node.name
    assert re.search(peer, failed), failed
    # Both pods were kept for their logs: with restart policy Never the PyTorchJob gets no
    # backoffLimit (the operator would delete every pod on reaching it), whatever was asked.
    logs = {path.name for path in (tmp_path / "runs").glob("*/logs/*.log")}
    assert logs == {name + ".log" for name in re.findall(r"(\S+-worker-[01]): Failed", failed)}, logs


def test_without_the_dropin_every_rank_is_named_with_its_limit_and_the_remedy(
    k8s_cluster, real_node, provisioned_node, run_playbook, node_inventory_env, training_namespace, tmp_path
):
    hard = hard_memlock(node_inventory_env)
    # Take the drop-in away with the role itself: CRI-O restarts and its containers inherit its
    # own 64 KiB again; preflight says so and names the remedy.
    absent = run_playbook(
        "playbooks/provision_nodes.yml", INVENTORY, {"crio_limits_state": "absent"}, timeout=900,
        extra_env=node_inventory_env,
    )  # fmt: skip
    try:
        assert absent.rc == 2, absent
        assert "a fresh container as uid 65534 gets memlock 64 KiB" in absent.output, absent
        run, _run_dir, summary = train(
            run_playbook, node_inventory_env, training_namespace, tmp_path / "runs"
        )
        assert run.rc == 2, run
        assert summary["verdict"] == "failed"
        expected = (
            "ranks 0 (64Ki), 1 (64Ki) run with a locked-memory limit (RLIMIT_MEMLOCK), expected at least %dMi"
            % (hard >> 20)
        )
        (failure,) = [line for line in summary["failures"] if "locked-memory" in line]
        assert failure.startswith(expected), failure
        assert "gpuops.training.crio_limits" in failure
    finally:
        # The drop-in back, for whatever runs next on the node.
        restored = run_playbook(
            "playbooks/provision_nodes.yml", INVENTORY, timeout=900, extra_env=node_inventory_env
        )
        assert restored.rc == 0, restored

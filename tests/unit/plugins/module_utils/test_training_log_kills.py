"""A killed rank is named with its last memory sample and that sample's phase: torchrun's
SIGKILL report on local and SSH runs, a pod's OOMKilled container on Kubernetes.

Fixtures: tests/unit/fixtures/kills (logs; README.md there says what each run is) and the pod
statuses of tests/unit/fixtures/jobs.
"""

from __future__ import annotations

import pathlib

import yaml

from ansible_collections.gpuops.training.plugins.module_utils.job_status import container_kills
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import collect_sources
from ansible_collections.gpuops.training.plugins.module_utils.training_log import (
    check_expectations,
    describe_memory_sample,
    kill_ranks,
    killed_sample,
    parse_training_logs,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
KILLS = FIXTURES / "kills"
SIGKILL_NOTE = "killed by SIGKILL (the kernel's OOM killer sends it when memory runs out)"


def parse(*patterns):
    return parse_training_logs(collect_sources(paths=[str(KILLS / pattern) for pattern in patterns]))


def pod_kills(fixture):
    return container_kills(yaml.safe_load((FIXTURES / "jobs" / fixture).read_text()))


def test_a_sigkilled_local_rank_is_named_with_the_oom_killer_and_its_last_sample():
    result = parse("local/logs/**/*.log", "local/launcher.log")
    assert result["launcher_failures"][0]["rank"] == 1
    assert result["launcher_failures"][0]["exitcode"] == -9
    rank1 = result["ranks"][1]
    assert rank1["status"] == "incomplete"
    assert rank1["last_memory"]["phase"] == "loader_start"
    assert (rank1["last_memory"]["epoch"], rank1["last_memory"]["step"]) == (1, 4)
    assert rank1["last_memory"]["memory"]["rss_bytes"] == 2890 << 20
    failures = check_expectations(result, {"world_size": 2})
    assert failures[0].startswith(
        "rank 1 exited on host node-a with exit code -9 (first failure), " + SIGKILL_NOTE + "; "
        "last memory sample: RSS 2890Mi (high-water 2950Mi), in phase loader_start (epoch 1, step 4)"
    )
    assert "last lines of rank 1" not in failures[0]  # rank 1 printed nothing but its records
    assert failures[1] == (
        "rank 0 stopped before finishing (terminated by the launcher after the failure above) on node node-a"
    )


def test_another_signal_is_named_without_the_oom_killer():
    result = parse("local/logs/**/*.log")
    result["launcher_failures"] = [{"root_cause": True, "rank": 1, "exitcode": -15}]
    (message, _bystanders) = check_expectations(result, {"world_size": 2})
    assert message.startswith(
        "rank 1 exited on host node-a with exit code -15 (first failure), killed by SIGTERM; "
    )
    assert "OOM" not in message and "last memory sample: RSS 2890Mi" in message


def test_an_exit_code_is_not_a_kill():
    result = parse("local/logs/**/*.log")
    result["launcher_failures"] = [{"root_cause": True, "rank": 1, "exitcode": 3}]
    (message, _bystanders) = check_expectations(result, {"world_size": 2})
    assert message == "rank 1 exited on host node-a with exit code 3 (first failure)"


def test_an_oom_killed_pod_names_its_rank_pod_limit_and_last_sample():
    result = parse("pods/logs/*.log")
    kills = pod_kills("pod-oom-killed.yaml")
    # The Indexed Job's host name is not the pod's: the rank is found by its log's name.
    assert result["ranks"][1]["host"] == "rn-3f9a1c-1"
    assert kill_ranks(result, kills[0]) == [1]
    failures = check_expectations(result, {"world_size": 2}, kills)
    # Rank 0 reported its error first (its peer was lost), but the kill is the first failure.
    # One message for the pod: its node, the kill, its ranks and the last sample its log holds.
    assert failures[0] == (
        "pod training/rn-3f9a1c-1-q8w2e on node gpu-node-1: container trainer exited with code 137 "
        "(OOMKilled: the kernel's OOM killer stopped it at its memory limit of 4Gi); rank 1 stopped; last "
        "memory sample (rank 1): RSS 1380Mi, cgroup working set 4020Mi of its 4Gi limit, in phase "
        "loader_start (epoch 2, step 8)"
    )
    assert failures[1].startswith("rank 0 stopped before finishing")
    # Without the kill, the earliest error is blamed, as before.
    assert check_expectations(result, {"world_size": 2})[0].startswith(
        "rank 0 failed on node gpu-node-0 (host rn-3f9a1c-0)"
    )


def test_a_container_killed_before_a_restart_is_described_from_its_previous_log():
    result = parse("restarted/logs/*.log")
    kills = pod_kills("pod-oom-killed-restarted.yaml")
    rank0 = result["ranks"][0]
    # The running container's log has newer samples; the killed one's is the previous log.
    assert rank0["last_memory"]["source"].endswith("rn-3f9a1c-worker-0.log")
    assert rank0["last_memory"]["phase"] == "train"
    sample = killed_sample(rank0, kills[0])
    assert sample["source"].endswith("rn-3f9a1c-worker-0.previous.log")
    assert describe_memory_sample(sample) == (
        "RSS 2600Mi, cgroup working set 8100Mi of its 8Gi limit, in phase eval_after (epoch 0, step 4)"
    )
    failures = check_expectations(result, {"world_size": 2}, kills)
    assert failures[0].startswith(
        "pod training/rn-3f9a1c-worker-0 on node gpu-node-0: the previous container pytorch exited with "
        "code 137 (OOMKilled: the kernel's OOM killer stopped it at its memory limit of 8Gi); rank 0 "
        "stopped; last memory sample (rank 0): RSS 2600Mi, cgroup working set 8100Mi of its 8Gi limit, in "
        "phase eval_after (epoch 0, step 4)"
    )


def test_a_kill_of_a_pod_whose_ranks_never_reported_is_named_on_its_own():
    result = parse("pods/logs/rn-3f9a1c-0-mmt6j.log")
    kills = pod_kills("pod-oom-killed.yaml")
    failures = check_expectations(result, {"world_size": 2}, kills)
    assert failures[0] == "ranks 1 never reported metrics (expected 2 ranks)"
    assert failures[1] == (
        "pod training/rn-3f9a1c-1-q8w2e: container trainer exited with code 137 (OOMKilled: the kernel's "
        "OOM killer stopped it at its memory limit of 4Gi), before any rank in it reported metrics"
    )


def test_a_killed_rank_without_memory_records_says_so():
    result = parse("local/logs/**/*.log", "local/launcher.log")
    for rank in result["ranks"]:
        rank["last_memory"], rank["last_memory_by_source"] = None, {}
    message = check_expectations(result, {"world_size": 2})[0]
    assert message.endswith(
        SIGKILL_NOTE
        + "; no memory sample in its log (a trainer that records none, or killed before its first)"
    )

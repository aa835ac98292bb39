"""The recommendation against the node: the pod's share of the node's RAM next to its share of the
node's GPUs, and a warning when the RAM share is the larger (the pod would strand GPUs).

The training results come from the real parser on trainer-shaped metrics lines of one-GPU pods.
"""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.run_summary import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.report_document import render_markdown
from ansible_collections.gpuops.training.plugins.module_utils.training_log import SCHEMA, parse_training_logs

run_summary = FilterModule().filters()["run_summary"]

GiB = 1 << 30
POD_RUN = {"run_id": "r1", "launcher": "pytorchjob", "world_size": 2, "rc": 0, "log_paths": []}
NO_NCCL = {"failures": [], "nccl_used": False}
NODE = {"cpu": "190", "memory": "1056Gi", "nvidia.com/gpu": "8", "pods": "110"}


def pod_lines(rank, working_set_gib, device="cuda:0"):
    """One rank per pod (pod-RANK on gpu-node-RANK) whose cgroup working set is steady at
    WORKING_SET_GIB and peaks 10 % higher at a checkpoint write."""

    def record(event, **fields):
        return json.dumps(
            {
                "schema": SCHEMA,
                "event": event,
                "rank": rank,
                "world_size": 2,
                "host": "pod-%d" % rank,
                "node": "gpu-node-%d" % rank,
                **fields,
            }
        )

    def sample(gib):
        return {"rss_bytes": 8 * GiB, "cgroup_working_set_bytes": int(gib * GiB), "cgroup_limit_bytes": None}

    lines = [record("run_start", backend="nccl", device=device)]
    for step in range(1, 9):
        lines.append(record("step", epoch=0, step=step, loss=1.0, memory=sample(working_set_gib)))
    lines.append(
        record(
            "memory", phase="checkpoint_write_after", epoch=0, step=8, memory=sample(working_set_gib * 1.1)
        )
    )
    lines.append(record("run_end", status="ok"))
    return lines


def summary_of(working_set_gib, device="cuda:0", **memory):
    sources = [
        LogSource("pod-%d.log" % rank, text="\n".join(pod_lines(rank, working_set_gib, device)))
        for rank in (0, 1)
    ]
    training = parse_training_logs(sources)
    training["failures"] = []
    return run_summary(POD_RUN, training, NO_NCCL, memory=memory)


def test_a_pod_within_its_gpu_share_gets_the_statement_and_no_warning():
    summary = summary_of(100, node_allocatable=NODE)
    recommendation = summary["memory"]["recommendation"]
    assert recommendation["limit"] == "121Gi"  # peak 110 GiB + 10 %
    share = recommendation["node_share"]
    assert recommendation["node"] == "gpu-node-0"
    assert (share["pod_gpus"], share["node_gpus"], share["strands_gpus"]) == (1, 8, False)
    assert recommendation["statement"].endswith(
        "The pod takes 11.5 % of the node's memory (121Gi of 1056Gi) and 12.5 % of its GPUs (1 of 8 "
        "nvidia.com/gpu): its RAM share is within its GPU share (at most 132Gi for its 1 GPU)."
    )
    assert summary["warnings"] == []


def test_a_pod_with_a_larger_ram_share_than_gpu_share_is_warned_about_in_summary_and_report():
    summary = summary_of(200, node_allocatable=NODE)
    share = summary["memory"]["recommendation"]["node_share"]
    assert share["strands_gpus"] is True and share["pods_per_node"] == 4 and share["stranded_gpus"] == 4
    assert summary["verdict"] == "passed"
    assert summary["warnings"] == [
        "memory: the recommended pod (242Gi, 1 GPU) takes 22.9 % of the memory of node gpu-node-0 but "
        "12.5 % of its GPUs: 4 such pods fill its memory and leave 4 of its 8 GPUs stranded"
    ]
    (warning,) = [w for w in summary["memory"]["warnings"] if w["what"] == summary["warnings"][0]]
    assert warning["remedy"].startswith("keep the pod's memory at or below 132Gi")
    report = render_markdown(summary)
    assert "a larger share of RAM than of GPUs" in report and "stranded" in report
    assert "keep the pod's memory at or below 132Gi" in report


def test_allocatable_per_node_name_takes_the_recommended_pods_node():
    nodes = {"gpu-node-0": {"memory": "2112Gi", "nvidia.com/gpu": 8}, "gpu-node-1": NODE}
    recommendation = summary_of(200, node_allocatable=nodes)["memory"]["recommendation"]
    assert recommendation["node"] == "gpu-node-0"
    assert recommendation["node_share"]["strands_gpus"] is False  # 242Gi of 2112Gi: 11.5 %
    alike = summary_of(200, node_allocatable={"other-a": NODE, "other-b": dict(NODE)})["memory"][
        "recommendation"
    ]
    assert alike["node_share"]["strands_gpus"] is True  # nodes alike: whichever the pod ran on
    unknown = summary_of(200, node_allocatable={"other-a": NODE, "other-b": {"memory": "2Ti"}})["memory"][
        "recommendation"
    ]
    assert unknown["node_share"] is None
    assert unknown["statement"].endswith("The allocatable resources of its node (gpu-node-0) are not known.")


def test_a_cpu_run_has_no_gpu_share_and_no_warning():
    summary = summary_of(2, device="cpu", node_allocatable=NODE)
    share = summary["memory"]["recommendation"]["node_share"]
    assert share["pod_gpus"] == 0 and share["strands_gpus"] is False
    assert summary["warnings"] == []


def test_a_pod_larger_than_its_node_is_a_warning():
    summary = summary_of(200, node_allocatable={"memory": "128Gi", "nvidia.com/gpu": 8})
    assert summary["memory"]["recommendation"]["node_share"] is None
    assert summary["warnings"] == [
        "memory: the recommended pod does not fit its node gpu-node-0: pod_memory (242Gi) must not be "
        "above the node's allocatable memory (128Gi)"
    ]


def test_another_gpu_resource_name():
    node = {"memory": "1056Gi", "amd.com/gpu": 8}
    summary = summary_of(200, node_allocatable=node, gpu_resource="amd.com/gpu")
    assert summary["memory"]["recommendation"]["node_share"]["gpu_resource"] == "amd.com/gpu"
    assert summary["memory"]["recommendation"]["node_share"]["strands_gpus"] is True


def test_without_allocatable_nothing_is_said_about_the_node():
    recommendation = summary_of(200)["memory"]["recommendation"]
    assert "node_share" not in recommendation and "node's memory" not in recommendation["statement"]


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        ({"node_allocatable": "1056Gi"}, "memory.node_allocatable must be a node's allocatable resources"),
        ({"node_allocatable": {"memory": "lots"}}, "memory.node_allocatable.memory"),
        ({"node_allocatable": {"n1": {"cpu": "8"}}}, "memory.node_allocatable['n1'] must be"),
        (
            {"node_allocatable": {"memory": "8Gi", "nvidia.com/gpu": "x"}},
            "memory.node_allocatable['nvidia.com/gpu'] must be a whole number of GPUs",
        ),
        ({"gpu_resource": ""}, "memory.gpu_resource must be a resource name"),
    ],
)
def test_bad_node_options_are_named(memory, message):
    with pytest.raises(AnsibleFilterError) as error:
        summary_of(2, **memory)
    assert message in str(error.value)


def test_a_cluster_launchers_requested_gpus_count_even_when_the_ranks_ran_on_cpu():
    sources = [LogSource("pod-%d.log" % rank, text="\n".join(pod_lines(rank, 200, "cpu"))) for rank in (0, 1)]
    training = parse_training_logs(sources)
    training["failures"] = []
    run = dict(POD_RUN, gpus_per_pod="1")  # as training_job_result carries it
    summary = run_summary(run, training, NO_NCCL, memory={"node_allocatable": NODE})
    assert summary["memory"]["recommendation"]["node_share"]["pod_gpus"] == 1
    assert summary["memory"]["recommendation"]["node_share"]["strands_gpus"] is True

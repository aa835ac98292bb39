"""Pod logs streamed to files by the training_job_logs module's collector, against the harness's
real API server: kwok serves each pod's log from a file the way a kubelet does (the same CRI
log reader, with timestamps and sinceSeconds), the API server proxies it.

The collector runs in this process on a real kubernetes ApiClient; playbooks/train.yml runs it
as a module in tests/integration/launch/test_fleet.py.
"""

from __future__ import annotations

import datetime as dt
import json

from k8s_harness import to_cri_log

from ansible_collections.gpuops.training.plugins.module_utils import pod_log_collect as collect
from ansible_collections.gpuops.training.plugins.module_utils.pod_logs import GAP_LINE

STEP = '{"schema":"gpuops.metrics/v1","event":"step","rank":%d}'


def make_pods(cluster, namespace, names):
    """Pods on the kwok GPU nodes that stay Running for the test."""
    cluster.apply(
        *[
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"app": "logs-test"},
                    "annotations": {"gpuops.test/run-duration": "600s"},
                },
                "spec": {
                    "containers": [{"name": "trainer", "image": "registry.example/trainer:test"}],
                    "tolerations": [{"operator": "Exists"}],
                    "nodeSelector": {"type": "kwok"},
                },
            }
            for name in names
        ]
    )
    cluster.kubectl(
        "wait",
        "--for=jsonpath={.status.phase}=Running",
        "--timeout=60s",
        "-n",
        namespace,
        *["pod/" + n for n in names],
    )
    return json.loads(
        cluster.kubectl("get", "pods", "-n", namespace, "-l", "app=logs-test", "-o", "json").stdout
    )["items"]


def serve(cluster, namespace, pod, lines, start):
    """Serve these lines as the pod's log, stamped from ``start`` on, 1 ms apart."""
    cluster.serve_pod_log(namespace, pod, to_cri_log("".join(line + "\n" for line in lines), start=start))


def test_early_copies_append_what_is_new_and_the_final_read_joins_them(k8s_cluster, k8s_namespace, tmp_path):
    names = ["w-0", "w-1", "w-2", "w-3"]
    pods = make_pods(k8s_cluster, k8s_namespace, names)
    began = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=2)
    head = ["NCCL INFO init rank %d" % rank for rank in range(3)]
    serve(k8s_cluster, k8s_namespace, "w-0", head, began)
    serve(k8s_cluster, k8s_namespace, "w-1", head + [STEP % 1], began)
    # A big log: 20 000 lines, about 1.2 MB.
    big = ["x" * 50 + " line %d" % index for index in range(20000)]
    serve(k8s_cluster, k8s_namespace, "w-2", head + big + [STEP % 2], began)
    # w-3 has no log served: kwok answers as a kubelet whose container has none.

    api = k8s_cluster.api_client()
    reader = collect.LogCollector(api, k8s_namespace, str(tmp_path), parallel=3, timeout=30)
    first = {entry["name"]: entry for entry in reader.collect_early(pods)}
    early = tmp_path / "early"
    assert (early / "w-0.log").read_text() == "".join(line + "\n" for line in head)
    assert first["w-0"]["past_init"] is False and first["w-1"]["past_init"] is True
    assert (early / "w-2.log").stat().st_size == first["w-2"]["appended"] > 1_000_000
    assert first["w-3"]["status"] == "unreadable" and first["w-3"]["reason"].startswith(
        "the API server answered"
    )

    # The rank printed more: the next window appends only that, though it asks for the
    # last CLOCK_MARGIN_S seconds again (kwok, like a kubelet, answers sinceSeconds).
    serve(k8s_cluster, k8s_namespace, "w-0", head + ["NCCL INFO more", STEP % 0], began)
    second = {entry["name"]: entry for entry in reader.collect_early(pods)}
    assert (early / "w-0.log").read_text() == "".join(
        line + "\n" for line in head + ["NCCL INFO more", STEP % 0]
    )
    assert second["w-0"]["appended"] == len("NCCL INFO more\n" + STEP % 0 + "\n")
    assert second["w-0"]["past_init"] is True and second["w-2"]["appended"] == 0

    # The node rotated w-1's log: only the last line and a new one are left. w-0 is deleted.
    serve(k8s_cluster, k8s_namespace, "w-1", [STEP % 1, "after rotation"], began + dt.timedelta(seconds=1))
    k8s_cluster.kubectl("delete", "pod", "w-0", "-n", k8s_namespace, "--grace-period=0", "--force")
    remaining = [pod for pod in pods if pod["metadata"]["name"] != "w-0"]
    final = {entry["name"]: entry for entry in reader.collect_final(remaining)}
    assert (tmp_path / "w-1.log").read_text() == "".join(
        line + "\n" for line in head + [STEP % 1, "after rotation"]
    )
    assert final["w-1"]["source"] == "early+final"
    assert (final["w-0"]["status"], final["w-0"]["source"]) == ("partial", "early")
    assert (tmp_path / "w-0.log").read_text().endswith(STEP % 0 + "\n")
    assert final["w-2"]["source"] == "final" and final["w-2"]["bytes"] == (early / "w-2.log").stat().st_size
    assert final["w-3"]["status"] == "unreadable"
    assert not (tmp_path / "w-3.log").exists()
    assert GAP_LINE not in (tmp_path / "w-1.log").read_text()


def test_the_nodes_are_read_in_one_list_call(k8s_cluster, k8s_namespace):
    api = k8s_cluster.api_client()
    allocatable, problem = collect.node_allocatable(api, ["gpu-node-0", "no-such-node"])
    assert problem == ""
    assert allocatable["gpu-node-0"]["nvidia.com/gpu"] == "8"
    assert "no-such-node" not in allocatable


def test_pods_are_listed_with_their_nodes(k8s_cluster, k8s_namespace):
    make_pods(k8s_cluster, k8s_namespace, ["w-0"])
    (pod,) = collect.list_pods(k8s_cluster.api_client(), k8s_namespace, "app=logs-test")
    assert collect.pod_node(pod).startswith("gpu-node-")
    assert collect.started(pod, "trainer")

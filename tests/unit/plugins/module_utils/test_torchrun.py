"""torchrun: one command for every launcher - standalone on the host, static multi-node over
SSH, c10d in a pod - with the same trainer arguments."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.torchrun_argv import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils import torchrun
from ansible_collections.gpuops.training.plugins.module_utils import training_checks as tc

RUN_ID = "retinanet-20261122T050000Z"
RUN_DIR = "/var/tmp/gpuops-runs/" + RUN_ID
TORCHRUN = FilterModule().filters()["torchrun_argv"]
# The trainer's arguments with the role's defaults, after --output-dir.
DEFAULT_TRAINER_ARGS = [
    "--model=retinanet_resnet50_fpn",
    "--dataset=synthetic",
    "--synthetic-images=64",
    "--synthetic-classes=3",
    "--image-size=512",
    "--min-size=800",
    "--max-size=1333",
    "--epochs=26",
    "--batch-size=2",
    "--lr=0.01",
    "--warmup-iters=100",
    "--workers=2",
    "--dist-backend=auto",
    "--dist-timeout-s=1800",
    "--print-freq=10",
]


def host_settings(**overrides):
    base = {"launcher": "local", "run_id": RUN_ID, "python": "/opt/venv/bin/python", "nproc_per_node": 2}
    base.update(overrides)
    return base


def test_standalone_on_the_host_writes_every_ranks_output_to_the_log_dir():
    argv = TORCHRUN(host_settings(), log_dir=RUN_DIR + "/logs", output_dir=RUN_DIR + "/output")
    assert argv == [
        "/opt/venv/bin/python", "-m", "gpuops_trainer.launch",
        "--standalone", "--nnodes=1", "--nproc-per-node=2", "--max-restarts=0",
        "--log-dir=%s/logs" % RUN_DIR, "--redirects=3",
        "-m", "gpuops_trainer.train", "--output-dir=%s/output" % RUN_DIR,
    ] + DEFAULT_TRAINER_ARGS  # fmt: skip


@pytest.mark.parametrize(("node_rank", "is_host"), [(0, "true"), (1, "false")])
def test_static_multi_node_over_ssh_hosts_the_store_on_the_first_node(node_rank, is_host):
    argv = TORCHRUN(
        host_settings(launcher="ssh", rdzv_timeout_s=60),
        endpoint="10.0.0.1:29400",
        nnodes=2,
        node_rank=node_rank,
        local_addr="10.0.0.%d" % (node_rank + 1),
        python="/srv/py/bin/python",
        log_dir="/remote/%s/node/logs" % RUN_ID,
        output_dir="/shared/out",
    )
    assert argv == [
        "/srv/py/bin/python", "-m", "gpuops_trainer.launch",
        "--nnodes=2", "--node-rank=%d" % node_rank, "--nproc-per-node=2", "--max-restarts=0",
        "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29400", "--rdzv-id=%s" % RUN_ID,
        "--local-addr=10.0.0.%d" % (node_rank + 1),
        "--rdzv-conf=is_host=%s,join_timeout=60,read_timeout=60" % is_host,
        "--log-dir=/remote/%s/node/logs" % RUN_ID, "--redirects=3",
        "-m", "gpuops_trainer.train", "--output-dir=/shared/out",
    ] + DEFAULT_TRAINER_ARGS  # fmt: skip


def test_c10d_in_a_pod_runs_the_images_python_and_checkpoints_on_the_pvc():
    settings = tc.checked(host_settings(launcher="pytorchjob", image="img", nnodes=2, gpus_per_node=2))
    argv = torchrun.torchrun_argv(settings, "rn-worker-0:29400")
    assert argv[:10] == [
        "python3", "-m", "gpuops_trainer.launch", "--nnodes=2", "--nproc-per-node=2", "--max-restarts=0",
        "--rdzv-backend=c10d", "--rdzv-endpoint=rn-worker-0:29400", "--rdzv-id=%s" % RUN_ID,
        "--rdzv-conf=join_timeout=900,read_timeout=900",
    ]  # fmt: skip
    # Two pods with GPUs: SyncBatchNorm across them (the host launchers add none).
    assert argv[10:] == ["-m", "gpuops_trainer.train", "--output-dir=/checkpoints/%s" % RUN_ID] + (
        DEFAULT_TRAINER_ARGS + ["--sync-bn"]
    )
    elastic = tc.checked(dict(settings, elastic_min_nodes=1, elastic_max_nodes=4))
    assert "--nnodes=1:4" in torchrun.torchrun_argv(elastic, "rn-worker-0:29400")


def test_the_trainers_arguments_follow_its_settings():
    argv = TORCHRUN(
        host_settings(
            dataset="coco", dataset_path="/data/coco 2017", threads_per_process=1, inject_fault="1@3:kill",
            extra_args=["--amp", "--channels-last"], lr="1e-3", sync_bn="true",
        ),
        output_dir="/out",
    )  # fmt: skip
    args = argv[argv.index("gpuops_trainer.train") + 1 :]
    assert args[:4] == [
        "--output-dir=/out",
        "--model=retinanet_resnet50_fpn",
        "--dataset=coco",
        "--data-path=/data/coco 2017",
    ]
    assert "--lr=0.001" in args and "--synthetic-images=64" not in args
    assert args[-4:] == ["--threads=1", "--inject-fault=1@3:kill", "--amp", "--channels-last"]


def test_bad_settings_fail_naming_the_variable_and_the_host_needs_its_directories():
    with pytest.raises(AnsibleFilterError, match="training_job_epochs must be an integer of at least 1"):
        TORCHRUN(host_settings(epochs=0), output_dir="/out")
    with pytest.raises(AnsibleFilterError, match="output_dir is required for the local launcher"):
        TORCHRUN(host_settings())
    with pytest.raises(AnsibleFilterError, match="training_job_run_id is empty"):
        TORCHRUN(host_settings(run_id=""), output_dir="/out")
    with pytest.raises(AnsibleFilterError, match="node_rank must be an integer of at least 0"):
        TORCHRUN(host_settings(launcher="ssh"), endpoint="a:1", node_rank=-1, output_dir="/out")
    with pytest.raises(AnsibleFilterError, match="torchrun commands are for the local, ssh,"):
        TORCHRUN(host_settings(launcher="mpijob", image="img", mpirun_argv=["mpirun"]), output_dir="/out")

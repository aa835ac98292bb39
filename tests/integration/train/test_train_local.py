"""playbooks/train.yml with the local launcher: real torchrun, two gloo ranks, verified.

These are the runs `make demo` does, on a temporary runs directory.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import types

import pytest

from ansible_collections.gpuops.training.plugins.module_utils import training_log

PLAYBOOK = "playbooks/train.yml"
INVENTORY = "inventories/local"


# For tests whose assertion is about epochs, not about what a step learns: 2 steps an epoch
# (8 images, 2 ranks of 2), each on 64 px images, about a sixth of the default epoch's CPU.
SHORT_EPOCHS = {
    "training_job_synthetic_images": 8,
    "training_job_image_size": 64,
    "training_job_min_size": 64,
    "training_job_max_size": 64,
}


def only_run_dir(runs_dir: pathlib.Path) -> pathlib.Path:
    run_dirs = [path for path in runs_dir.iterdir() if path.is_dir() and path.name != "history"]
    assert len(run_dirs) == 1, run_dirs
    return run_dirs[0]


@pytest.fixture(scope="module")
def healthy_run(run_playbook, tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("runs")
    run = run_playbook(PLAYBOOK, INVENTORY, {"training_job_runs_dir": str(runs_dir)})
    return types.SimpleNamespace(run=run, runs_dir=runs_dir)


@pytest.mark.slow
@pytest.mark.distributed
def test_the_default_run_passes_verification(healthy_run):
    assert healthy_run.run.rc == 0, healthy_run.run
    run = healthy_run.run
    assert "PASSED (2/2 ranks reported" in run.output


@pytest.mark.slow
@pytest.mark.distributed
def test_summary_json_shows_every_rank_a_falling_loss_and_a_checkpoint(healthy_run):
    run_dir = only_run_dir(healthy_run.runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "passed"
    assert summary["failures"] == []
    assert summary["world_size"] == 2
    assert summary["ranks_reporting"] == [0, 1]
    assert [rank["status"] for rank in summary["ranks"]] == ["ok", "ok"]
    assert summary["loss"]["fell"] is True
    assert summary["loss"]["last"] < summary["loss"]["first"]
    assert summary["checkpoints"]["count"] >= 1
    checkpoint = pathlib.Path(summary["checkpoints"]["last"]["path"])
    assert checkpoint.is_file() and checkpoint.is_relative_to(run_dir)
    assert summary["throughput"]["images_per_s"] > 0
    assert summary["backend"] == "gloo"
    # The trainer evaluates on its held-out synthetic split at the end of the run.
    assert summary["evaluation"]["images"] > 0
    assert 0.0 <= summary["evaluation"]["map"] <= 1.0


@pytest.mark.slow
@pytest.mark.distributed
def test_each_gpus_throughput_is_kept_in_its_nodes_history_keyed_by_the_workload(healthy_run):
    run_dir = only_run_dir(healthy_run.runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    # The local launcher's ranks run on this host, which names their node.
    (node_file,) = (healthy_run.runs_dir / "history").iterdir()
    records = [json.loads(line) for line in node_file.read_text().splitlines()]
    assert [record["device"] for record in records] == ["GPU 0", "GPU 1"]
    assert {record["node"] for record in records} == {summary["ranks"][0]["node"]}
    assert {(record["source"], record["metric"], record["run_id"]) for record in records} == {
        ("training", "images_per_s", run_dir.name)
    }
    # The workload, from the trainer's run_start record: the model, images per step, input size.
    workload = "retinanet_resnet18_fpn, 2 images, 128-128 px, fp32, cpu"
    assert {record["key"] for record in records} == {workload}
    rates = [rank["compute_images_per_s"] for rank in summary["ranks"]]
    assert [record["value"] for record in records] == rates and all(rate > 0 for rate in rates)
    # A first run has nothing to be judged against.
    assert summary["history"]["gpus_judged"] == 2 and summary["history"]["gpus_with_history"] == 0
    assert summary["history"]["flagged"] == []


@pytest.mark.slow
@pytest.mark.distributed
def test_the_report_says_plainly_that_nccl_was_not_used(healthy_run):
    run_dir = only_run_dir(healthy_run.runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["nccl"]["used"] is False
    assert "NCCL was not used" in summary["nccl"]["statement"]
    report = (run_dir / "report.md").read_text()
    assert "PASSED" in report and "NCCL was not used" in report
    assert "| 1 |" in report  # a row for rank 1 in the per-rank table
    assert "NCCL was not used" in (run_dir / "report.html").read_text()


# Where a rank's memory can peak: the trainer's memory phases and its step samples.
MEMORY_PHASES = set(training_log.MEMORY_PHASES)


@pytest.mark.slow
@pytest.mark.distributed
def test_the_report_shows_each_ranks_memory_and_a_sizing_recommendation(healthy_run):
    from ansible_collections.gpuops.training.plugins.module_utils.quantities import parse_quantity

    run_dir = only_run_dir(healthy_run.runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    memory = summary["memory"]
    assert [row["rank"] for row in memory["ranks"]] == [0, 1]
    for row in memory["ranks"]:
        print(row["statement"], "request", row["request"], "limit", row["limit"])
        assert 0 < row["rss_median_bytes"] <= row["rss_peak_bytes"]
        assert row["rss_peak_phase"] in MEMORY_PHASES
        assert parse_quantity(row["request"]) >= row["rss_median_bytes"]
        assert parse_quantity(row["limit"]) >= row["rss_peak_bytes"] * 1.1
    recommendation = memory["recommendation"]
    print(recommendation["statement"])
    # A local run: the two ranks' resident sets on this host, summed; no loader workers.
    assert recommendation["basis"] == "host_rss" and recommendation["ranks"] == [0, 1]
    assert recommendation["peak_bytes"] == sum(row["rss_peak_bytes"] for row in memory["ranks"])
    assert parse_quantity(recommendation["request"]) < parse_quantity(recommendation["limit"])
    assert parse_quantity(recommendation["limit"]) >= recommendation["peak_bytes"] * 1.1
    assert "/dev/shm (none: 0 loader workers, no NCCL)" in recommendation["statement"]
    # A healthy run: no leak and nothing else to warn about.
    assert memory["leaks"] == [] and summary["warnings"] == []
    report = (run_dir / "report.md").read_text()
    assert "## Memory" in report and recommendation["statement"] in report
    for row in memory["ranks"]:
        assert "| %d | %s | " % (row["rank"], row["host"]) in report
        assert row["rss_peak_phase"] in report
    page = (run_dir / "report.html").read_text()
    assert "<h2>Memory</h2>" in page
    output = " ".join(healthy_run.run.output.split())
    assert "Memory rank 0: RSS median" in output and "Memory rank 1: RSS median" in output
    assert "Memory per container" in output


@pytest.mark.slow
@pytest.mark.distributed
def test_a_leaking_rank_is_flagged_and_the_healthy_one_is_not(run_playbook, tmp_path):
    # The trainer's test hook keeps 64 MiB more resident on rank 1 as each epoch starts. The
    # leak is per epoch, so an epoch is as short as a step can be: 2 steps of 64 px images.
    run = run_playbook(
        PLAYBOOK,
        INVENTORY,
        {
            "training_job_runs_dir": str(tmp_path),
            "training_job_epochs": 5,
            "training_job_extra_args": ["--leak-mib-per-epoch", "1@64"],
            **SHORT_EPOCHS,
        },
    )
    assert run.rc == 0, run  # a leak is a warning by default: the run still passes
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert summary["verdict"] == "passed"
    leaks = summary["memory"]["leaks"]
    print("leaks:", leaks)
    assert [(leak["rank"], leak["kind"]) for leak in leaks] == [(1, "host")]
    assert 0.8 * 64 < leaks[0]["rate_mib_per_epoch"] < 1.2 * 64
    assert summary["warnings"][0].startswith("suspected host memory leak on rank 1")
    assert "WARNING: suspected host memory leak on rank 1" in run.output
    rank0 = summary["memory"]["ranks"][0]
    print("rank 0 growth MiB per epoch:", rank0["rss_growth_mib_per_epoch"])
    assert abs(rank0["rss_growth_mib_per_epoch"]) < 16


@pytest.mark.slow
@pytest.mark.distributed
def test_the_report_plots_the_runs_own_curves(healthy_run):
    from matplotlib import image as mpimg

    run_dir = only_run_dir(healthy_run.runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    # The trainer records a step at every print-freq step and each epoch's last: the curve
    # the plot draws has those points, from both ranks.
    assert len(summary["steps"]) >= 4 and all(point["ranks"] == 2 for point in summary["steps"])
    for name in ("loss.png", "throughput.png"):
        pixels = mpimg.imread(str(run_dir / name))
        assert pixels.shape[:2] == (360, 750)
        assert (pixels[..., :3] < 0.6).any(axis=-1).sum() > 2000  # axes, labels and a curve drawn


@pytest.mark.slow
@pytest.mark.distributed
def test_every_rank_kept_its_output(healthy_run):
    run_dir = only_run_dir(healthy_run.runs_dir)
    stdout_logs = sorted(run_dir.glob("logs/**/stdout.log"))
    assert len(stdout_logs) == 2
    settings = json.loads((run_dir / "run.json").read_text())
    assert settings["nproc_per_node"] == 2
    assert "--nproc-per-node=2" in settings["command"]
    # Explicit collective and rendezvous timeouts, as every launcher sets them.
    assert "--dist-timeout-s=1800" in settings["command"]


@pytest.mark.slow
@pytest.mark.distributed
def run_with_fault(run_playbook, runs_dir, fault):
    """A 2-epoch run whose rank fails as the fault drill says (e.g. 1@3: rank 1 at step 3)."""
    run = run_playbook(
        PLAYBOOK,
        INVENTORY,
        {
            "training_job_runs_dir": str(runs_dir),
            "training_job_inject_fault": fault,
            "training_job_epochs": 2,
        },
    )
    assert run.rc != 0, run
    return run


def test_a_failing_rank_fails_the_playbook_and_is_named(run_playbook, tmp_path):
    run = run_with_fault(run_playbook, tmp_path, "1@3")
    assert "rank 1 failed" in run.output
    assert "last lines of rank 1" in run.output
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert summary["verdict"] == "failed"
    assert summary["failures"][0].startswith("rank 1 failed")
    assert "the launcher exited with code 1" in summary["failures"]


@pytest.mark.parametrize(
    ("extra_vars", "message"),
    [
        (
            {"training_job_model": "yolo"},
            "value of training_job_model must be one of: retinanet_resnet50_fpn, retinanet_resnet50_fpn_v2, "
            "retinanet_resnet18_fpn, retinanet_resnet34_fpn, retinanet_resnet101_fpn, "
            "retinanet_resnext50_32x4d_fpn, got: yolo",
        ),
        (
            {"training_job_launcher": "slurm"},
            "value of training_job_launcher must be one of: local, ssh, pytorchjob, indexed_job, "
            "trainjob, runai, got: slurm",
        ),
        (
            {"training_job_dataset": "coco"},
            "training_job_dataset_path is required when training_job_dataset is coco",
        ),
        (
            {"training_job_dataset": "coco", "training_job_dataset_path": "/nonexistent/coco"},
            "training_job_dataset_path /nonexistent/coco is not a directory on localhost",
        ),
        ({"training_job_epochs": 0}, "training_job_epochs must be an integer of at least 1, got 0"),
        ({"training_job_inject_fault": "rank1"}, "training_job_inject_fault must look like RANK@STEP"),
        # Paths from users stay inside the directories they configure.
        ({"training_job_name": "../../etc"}, "training_job_name must be a plain name"),
        ({"training_job_run_id": "a/../../b"}, "training_job_run_id must be a plain name"),
        ({"training_job_run_id": ".."}, 'got ".."'),
        (
            {"training_job_env_from_secrets": {"HF_TOKEN": {"secret": "hub", "key": "token"}}},
            "training_job_env_from_secrets references Kubernetes Secrets, which the local launcher "
            "cannot read",
        ),
    ],
)
def test_bad_input_fails_before_anything_starts(run_playbook, tmp_path, extra_vars, message):
    run = run_playbook(PLAYBOOK, INVENTORY, {"training_job_runs_dir": str(tmp_path / "runs"), **extra_vars})
    assert run.rc != 0, run
    assert message in " ".join(run.output.split()), run
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.distributed
def test_a_sigkilled_rank_is_named_with_the_oom_killer_and_its_last_memory_sample(run_playbook, tmp_path):
    # The fault drill's kill mode: rank 1 sends itself SIGKILL at step 3, as the OOM killer would.
    run = run_with_fault(run_playbook, tmp_path, "1@3:kill")
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    first = summary["failures"][0].splitlines()[0]
    print(first)
    assert first.startswith("rank 1 exited on host ")
    assert (
        " with exit code -9 (first failure), killed by SIGKILL (the kernel's OOM killer sends it when memory "
        "runs out); last memory sample: RSS "
    ) in first
    # Its last sample is the step record before the kill (print-freq 2: step 2), phase train.
    assert first.endswith("in phase train (epoch 0, step 2)")
    assert "killed by SIGKILL (the kernel's OOM killer sends it when memory runs out)" in " ".join(
        run.output.split()
    )


# -- train.yml -e training_job_memory_from_run=<run id> --------------------------------------

SUMMARIES = pathlib.Path(__file__).resolve().parents[2] / "unit" / "fixtures" / "summaries"
FAKE_RUNAI = """#!{python}
import json, os, sys
with open(os.environ["FAKE_RUNAI_RECORD"], "w") as record:
    json.dump(sys.argv[1:], record)
print("The job '%s' has been submitted successfully" % sys.argv[4])
"""


@pytest.fixture(scope="module")
def run_with_loader_workers(run_playbook, tmp_path_factory):
    """A local run with a DataLoader worker per rank: its recommendation carries /dev/shm."""
    runs_dir = tmp_path_factory.mktemp("runs-workers")
    run = run_playbook(
        PLAYBOOK,
        INVENTORY,
        {
            "training_job_runs_dir": str(runs_dir),
            "training_job_epochs": 3,
            "training_job_workers": 1,
            **SHORT_EPOCHS,
        },
    )
    return types.SimpleNamespace(run=run, runs_dir=runs_dir, run_dir=only_run_dir(runs_dir))


@pytest.mark.slow
@pytest.mark.distributed
def test_a_later_run_takes_its_pods_memory_from_an_earlier_runs_recommendation(
    run_playbook, run_with_loader_workers, tmp_path, monkeypatch
):
    first = run_with_loader_workers
    assert first.run.rc == 0, first.run
    recommendation = json.loads((first.run_dir / "summary.json").read_text())["memory"]["recommendation"]
    print(recommendation["statement"])
    assert recommendation["shm_bytes"] > 0  # a loader worker per rank
    # The second run renders the same pod settings for Run:ai, whose CLI (a stand-in that records
    # its arguments) submits it: nothing is launched here.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "runai").write_text(FAKE_RUNAI.format(python=sys.executable))
    (bin_dir / "runai").chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ.get("PATH", "")))
    monkeypatch.setenv("FAKE_RUNAI_RECORD", str(tmp_path / "argv.json"))
    run = run_playbook(
        PLAYBOOK,
        INVENTORY,
        {
            "training_job_runs_dir": str(first.runs_dir),
            "training_job_memory_from_run": first.run_dir.name,
            "training_job_launcher": "runai",
            "training_job_image": "registry.example/gpuops-trainer:test",
            "training_job_gpus_per_node": 0,
        },
    )
    assert run.rc == 0, run
    argv = json.loads((tmp_path / "argv.json").read_text())
    for option in ("--cpu-memory-request", "--cpu-memory-limit"):
        assert argv[argv.index(option) + 1] == recommendation["limit"]
    output = " ".join(run.output.split())
    shown = "Show the memory the pods get before the launch, from run %s" % first.run_dir.name
    assert shown in output and output.index(shown) < output.index("Submit the run with runai")
    assert (
        "training_job_memory: %s, requested and limited alike (Guaranteed QoS)" % recommendation["limit"]
        in output
    )
    assert (
        "training_job_shm_size: 1Gi, the /dev/shm size in the recommendation of run %s" % first.run_dir.name
        in output
    )


def summary_in_runs_dir(runs_dir, run_id, fixture):
    (runs_dir / run_id).mkdir(parents=True)
    (runs_dir / run_id / "summary.json").write_text((SUMMARIES / fixture).read_text())


@pytest.mark.parametrize(
    ("fixture", "extra_vars", "message"),
    [
        (
            None,
            {},
            "training_job_memory_from_run: run r0 has no summary.json under training_job_runs_dir",
        ),
        (
            "no-memory-summary.json",
            {},
            "training_job_memory_from_run: run r0's summary.json has no memory recommendation "
            "(memory.recommendation is null)",
        ),
        (
            "local-2rank-summary.json",
            {"training_job_memory": "8Gi"},
            "training_job_memory_from_run=r0 conflicts with values set explicitly: training_job_memory "
            "is 8Gi, the run recommends 2415Mi (its limit: peak plus buffer); expected either the "
            "recommendation or an explicit value, not both",
        ),
        (
            "workers-summary.json",
            {"training_job_shm_size": "4Gi"},
            "training_job_shm_size is 4Gi, the run recommends 1Gi",
        ),
        (
            "local-2rank-summary.json",
            {"training_job_memory": "64Gi"},  # the default, but as an extra variable it wins over set_fact
            "training_job_memory_from_run=r0 recommends training_job_memory 2415Mi, but an extra "
            "variable (-e) keeps training_job_memory 64Gi",
        ),
        (
            "local-2rank-summary.json",
            {"training_job_memory_from_run": "../r0"},
            "must be the id of an earlier run",
        ),
    ],
)
def test_memory_from_run_fails_before_anything_starts(run_playbook, tmp_path, fixture, extra_vars, message):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    if fixture:
        summary_in_runs_dir(runs_dir, "r0", fixture)
    run = run_playbook(
        PLAYBOOK,
        INVENTORY,
        {"training_job_runs_dir": str(runs_dir), "training_job_memory_from_run": "r0", **extra_vars},
    )
    assert run.rc != 0, run
    assert message in " ".join(run.output.split()), run
    assert [path.name for path in runs_dir.iterdir()] == (["r0"] if fixture else [])


@pytest.mark.slow
@pytest.mark.distributed
def test_re_verifying_against_a_nodes_allocatable_states_the_ram_and_gpu_shares_and_warns(
    run_with_loader_workers, tmp_path
):
    from playbook_runner import run_role_locally

    first = run_with_loader_workers
    assert first.run.rc == 0, first.run
    run_dir = first.run_dir
    record = {
        "launcher": "local",
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "world_size": 2,
        "rc": 0,
        "timed_out": False,
        "log_paths": [str(run_dir / "logs" / "**" / "*.log"), str(run_dir / "launcher.log")],
        # As if the container had held one GPU of a node with 16Gi and 8 GPUs: its ~2.4Gi limit
        # is some 15 % of the node's RAM against 12.5 % of its GPUs.
        "gpus_per_pod": 1,
    }
    run = run_role_locally(
        "training_verify",
        {
            "training_verify_run": record,
            "training_verify_report_dir": str(tmp_path),
            "training_verify_report_plots": False,
            "training_verify_loader_workers": 1,
            "training_verify_node_allocatable": {"memory": "16Gi", "nvidia.com/gpu": 8},
        },
    )
    assert run.rc == 0, run  # a warning: the run still passes
    summary = json.loads((tmp_path / "summary.json").read_text())
    recommendation = summary["memory"]["recommendation"]
    share = recommendation["node_share"]
    print(recommendation["statement"])
    assert (share["node_memory"], share["node_gpus"], share["pod_gpus"]) == ("16Gi", 8, 1)
    assert share["memory_share"] > share["gpu_share"] == 0.125 and share["strands_gpus"] is True
    assert share["fair_memory"] == "2Gi"
    warning = next(w for w in summary["warnings"] if "GPUs stranded" in w)
    assert warning.startswith("memory: the recommended pod (%s, 1 GPU) takes " % recommendation["limit"])
    assert share["statement"] in (tmp_path / "report.md").read_text()
    output = " ".join(run.output.split())
    assert "WARNING: " + warning in output
    assert "of its GPUs (1 of 8 nvidia.com/gpu): a larger share of RAM than of GPUs" in output

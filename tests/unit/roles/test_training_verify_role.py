"""The training_verify role's variables and argument spec, and the verdict it prints - memory included."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jinja2
import pytest
import yaml

from ansible_collections.gpuops.training.plugins.filter.run_summary import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.training_log import SCHEMA, parse_training_logs

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "training_verify"
MiB = 1 << 20


def load(path):
    return yaml.safe_load((ROLE / path).read_text())


def test_the_memory_variables_have_the_documented_defaults():
    defaults = load("defaults/main.yml")
    assert defaults["training_verify_memory_buffer_percent"] == 10
    assert defaults["training_verify_memory_limit_margin_percent"] == 10
    assert defaults["training_verify_memory_leak_tolerance_mib"] == 16
    assert defaults["training_verify_memory_leak_fails"] is False


def metrics(rank, leak_mib=0):
    def record(event, **fields):
        return json.dumps(
            {"schema": SCHEMA, "event": event, "rank": rank, "world_size": 2, "host": "h", **fields}
        )

    lines = [record("run_start", backend="gloo")]
    for epoch in range(5):
        rss = (900 + leak_mib * epoch) * MiB
        lines.append(
            record("step", epoch=epoch, step=epoch + 1, loss=2.0 - epoch / 10, memory={"rss_bytes": rss})
        )
        lines.append(record("epoch", epoch=epoch, step=epoch + 1, loss=2.0 - epoch / 10))
        lines.append(
            record(
                "memory", phase="loader_start", epoch=epoch, step=epoch, memory={"rss_bytes": rss + 50 * MiB}
            )
        )
    lines.append(record("run_end", status="ok"))
    return "\n".join(lines)


def render_verdict(summary):
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROLE / "templates")),
        trim_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    return environment.get_template("verdict.txt.j2").render(
        training_verify_summary=summary, training_verify_dir="/runs/r1"
    )


def test_the_verdict_shows_each_ranks_memory_the_recommendation_and_a_leak_warning():
    training = parse_training_logs(
        [LogSource("r0", text=metrics(0)), LogSource("r1", text=metrics(1, leak_mib=64))]
    )
    training["failures"] = []
    run = {"run_id": "r1", "launcher": "local", "world_size": 2, "rc": 0, "started": 0.0, "ended": 9.0}
    summary = FilterModule().filters()["run_summary"](run, training, {"nccl_used": False})
    text = render_verdict(summary)
    assert text.startswith("Run r1: PASSED (2/2 ranks reported, 9.0 s)")
    assert "Memory rank 0: RSS median 925Mi, peak 950Mi in loader_start (epoch 0, step 0)\n" in text
    assert "Memory rank 1: RSS median" in text
    assert "Memory per container (h, 2 ranks): request " in text
    assert (
        "WARNING: suspected host memory leak on rank 1: its per-epoch minimum resident set (RSS) grew by 64.0"
        in text
    )


# -- stragglers: the role run by ansible-playbook on generated pod logs ------------------------

REPO = ROLE.parents[1]
BIN = pathlib.Path(sys.executable).parent
PODS = ("rn-worker-0", "rn-worker-1", "rn-worker-2")


def test_the_straggler_variables_have_the_documented_defaults():
    defaults = load("defaults/main.yml")
    assert defaults["training_verify_straggler_percent"] == 20
    assert defaults["training_verify_stragglers_fail"] is False
    options = load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options["training_verify_straggler_percent"]["type"] == "float"
    assert options["training_verify_stragglers_fail"]["type"] == "bool"


def timed_pod_log(rank, compute_s):
    def record(event, **fields):
        return json.dumps({"schema": SCHEMA, "event": event, "rank": rank, "world_size": 3,
                           "host": PODS[rank], "node": "unknown", "attempt": 0, **fields})  # fmt: skip

    timing = {"step_s": 2.0, "data_s": 0.0, "compute_s": compute_s, "collective_s": 2.0 - compute_s}
    lines = [record("run_start", backend="gloo", batch_size=4, grad_accum_steps=1)]
    lines += [
        record("step", epoch=0, step=step, loss=1.0, images_per_s=2.0, timing=timing) for step in (1, 2)
    ]
    lines += [record("epoch", epoch=0, step=2, loss=1.0), record("run_end", status="ok", step=2)]
    return "\n".join(lines) + "\n"


def verify(tmp_path, **variables):
    """training_verify on a pytorchjob run of three pods whose rank 2 computes 1.8 s a step, the
    others 1 s; the report goes to tmp_path/report."""
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    for rank, compute_s in enumerate((1.0, 1.0, 1.8)):
        (run_dir / "logs" / ("%s.log" % PODS[rank])).write_text(timed_pod_log(rank, compute_s))
    record = {"run_id": "rn", "launcher": "pytorchjob", "run_dir": str(run_dir), "world_size": 3, "rc": 0,
              "log_paths": [str(run_dir / "logs" / "*.log")],
              "pod_nodes": {pod: "gpu-node-%d" % rank for rank, pod in enumerate(PODS)}}  # fmt: skip
    return play(tmp_path, record, **variables)


def play(tmp_path, record, **variables):
    """training_verify on the run RECORD with VARIABLES; the report goes to tmp_path/report."""
    variables = {
        "training_verify_run": record,
        "training_verify_report_dir": str(tmp_path / "report"),
        "training_verify_report_plots": False,
        "training_verify_set_stats": False,
        "training_verify_checkpoint_required": False,
        "training_verify_loss_must_fall": False,
        "ansible_python_interpreter": sys.executable,
        **variables,
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    play = [{"hosts": "localhost", "gather_facts": False, "roles": ["gpuops.training.training_verify"]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "dev-collections"))  # fmt: skip
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", "@%s" % (tmp_path / "vars.json"), str(tmp_path / "play.yml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return result, " ".join(result.stdout.split())


def test_a_straggler_is_a_warning_placed_on_its_pod_and_node(tmp_path):
    result, output = verify(tmp_path)
    assert result.returncode == 0, output
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    (straggler,) = summary["stragglers"]
    assert (straggler["rank"], straggler["pod"], straggler["node"]) == (2, "rn-worker-2", "gpu-node-2")
    assert "WARNING: straggler: rank 2 (pod rn-worker-2, node gpu-node-2) computes 2.22 images/s" in output
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| 2 | rn-worker-2 | gpu-node-2 | 2.22 | 4.00 | 44.4 % |" in report


def test_with_stragglers_fail_a_straggler_fails_the_run_and_a_higher_threshold_passes_it(tmp_path):
    result, output = verify(tmp_path / "fail", training_verify_stragglers_fail=True)
    assert result.returncode != 0
    assert "straggler: rank 2 (pod rn-worker-2, node gpu-node-2)" in output
    assert json.loads((tmp_path / "fail" / "report" / "summary.json").read_text())["verdict"] == "failed"
    result, output = verify(tmp_path / "pass", training_verify_stragglers_fail=True,
                            training_verify_straggler_percent=50)  # fmt: skip
    assert result.returncode == 0, output
    assert json.loads((tmp_path / "pass" / "report" / "summary.json").read_text())["stragglers"] == []


@pytest.mark.parametrize(
    ("percent", "message"),
    [
        (100, "training_verify_straggler_percent must be a number of percent above 0 and below 100 (0 turns "
              "the straggler check off), got 100"),
        (-5, "training_verify_straggler_percent must be a number of percent above 0 and below 100 (0 turns "
             "the straggler check off), got -5"),
        ("lots", "argument 'training_verify_straggler_percent' is of type str"),
    ],
)  # fmt: skip
def test_a_straggler_percent_outside_0_to_100_fails_before_anything_is_read_or_written(
    tmp_path, percent, message
):
    result, output = verify(tmp_path, training_verify_straggler_percent=percent)
    assert result.returncode != 0
    assert message in output, output[-3000:]
    assert "Read every rank's training metrics" not in output
    assert not (tmp_path / "report").exists()


# -- GPU memory headroom: the role on the pod logs of tests/unit/fixtures/gpu-memory ------------

GPU_LOGS = REPO / "tests" / "unit" / "fixtures" / "gpu-memory" / "logs"


def test_the_gpu_memory_variables_have_the_documented_defaults():
    defaults = load("defaults/main.yml")
    assert defaults["training_verify_gpu_memory_margin_percent"] == 5
    assert defaults["training_verify_gpu_memory_margin_fails"] is False
    options = load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options["training_verify_gpu_memory_margin_percent"]["type"] == "float"
    assert options["training_verify_gpu_memory_margin_percent"]["default"] == 5
    assert options["training_verify_gpu_memory_margin_fails"]["type"] == "bool"


def verify_gpu(tmp_path, **variables):
    """training_verify on the 4-rank CUDA run of the fixture (rank 3 at 77.5 of its GPU's 80 GiB),
    launched with NCCL_DEBUG=WARN: NCCL's facts are unverifiable, not failed."""
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    for log in sorted(GPU_LOGS.glob("*.log")):
        (run_dir / "logs" / log.name).write_text(log.read_text())
    record = {"run_id": "gm-7c2e", "launcher": "pytorchjob", "run_dir": str(run_dir), "world_size": 4,
              "rc": 0, "log_paths": [str(run_dir / "logs" / "*.log")], "nccl_debug": "WARN",
              "pod_nodes": {"gm-7c2e-worker-0": "gpu-a", "gm-7c2e-worker-1": "gpu-b"}}  # fmt: skip
    return play(tmp_path, record, **variables)


def test_a_gpu_near_its_capacity_is_a_warning_naming_the_rank_its_pod_and_node(tmp_path):
    result, output = verify_gpu(tmp_path)
    assert result.returncode == 0, output[-3000:]
    output = output.replace("''", "'")  # the verdict's lines as YAML quotes them
    assert (
        "WARNING: rank 3 (pod gm-7c2e-worker-1, node gpu-b): GPU memory peaked at 79360Mi of the device's "
        "80Gi (96.9 %) in phase train (epoch 1, step 5): headroom 2560Mi (3.1 %), within the 5 % margin"
        in output
    )
    assert "WARNING: rank 2" not in output and "WARNING: rank 0" not in output
    assert (
        "Memory rank 0: " in output
        and "GPU device peak 60928Mi of 80Gi in train (headroom 20992Mi, 25.6 %)" in output
    )
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["verdict"] == "passed"
    assert summary["memory"]["gpu_within_margin"] == [3]
    assert summary["memory"]["gpu_margin_percent"] == 5
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## GPU memory" in report
    assert "| 3 | gm-7c2e-worker-1 | gpu-b | 79360Mi | train (epoch 1, step 5) | 80Gi | 2560Mi |" in report


def test_with_gpu_memory_margin_fails_the_gpu_fails_the_run_and_a_narrower_margin_passes_it(tmp_path):
    result, output = verify_gpu(tmp_path / "fail", training_verify_gpu_memory_margin_fails=True)
    assert result.returncode != 0
    assert "rank 3 (pod gm-7c2e-worker-1, node gpu-b): GPU memory peaked at 79360Mi" in output
    assert json.loads((tmp_path / "fail" / "report" / "summary.json").read_text())["verdict"] == "failed"
    result, output = verify_gpu(tmp_path / "pass", training_verify_gpu_memory_margin_fails=True,
                                training_verify_gpu_memory_margin_percent=3)  # fmt: skip
    assert result.returncode == 0, output[-3000:]
    summary = json.loads((tmp_path / "pass" / "report" / "summary.json").read_text())
    assert summary["memory"]["gpu_within_margin"] == [] and summary["verdict"] == "passed"


MARGIN = (
    "training_verify_gpu_memory_margin_percent must be a number of percent from 0 (warn only for a GPU that "
    "was full) to below 100"
)


@pytest.mark.parametrize(
    ("percent", "message"),
    [
        (100, MARGIN + ", got 100"),
        (-5, MARGIN + ", got -5"),
        ("lots", "argument 'training_verify_gpu_memory_margin_percent' is of type str"),
    ],
)  # fmt: skip
def test_a_gpu_memory_margin_outside_0_to_100_fails_before_anything_is_read_or_written(
    tmp_path, percent, message
):
    result, output = verify_gpu(tmp_path, training_verify_gpu_memory_margin_percent=percent)
    assert result.returncode != 0
    assert message in output, output[-3000:]
    assert "Read every rank's training metrics" not in output
    assert not (tmp_path / "report").exists()


# -- Each GPU against its own history ------------------------------------------------------------

WORKLOAD = "retinanet_resnet50_fpn, 4 images, 800-1333 px, fp32, cpu"


def gpu_pod_log(rank, compute_s):
    """Pod ``rn-worker-<rank>``'s log: one rank on GPU 0 of node gpu-node-<rank>, computing
    ``compute_s`` a step of 4 images."""

    def record(event, **fields):
        where = {"rank": rank, "local_rank": 0, "world_size": 3, "host": PODS[rank]}
        where["node"] = "gpu-node-%d" % rank
        return json.dumps({"schema": SCHEMA, "event": event, **where, "attempt": 0, **fields})

    timing = {"step_s": 2.0, "data_s": 0.0, "compute_s": compute_s, "collective_s": 2.0 - compute_s}
    start = record("run_start", backend="gloo", device="cpu", model="retinanet_resnet50_fpn",
                   batch_size=4, grad_accum_steps=1, min_size=800, max_size=1333)  # fmt: skip
    steps = [record("step", epoch=0, step=step, loss=1.0, images_per_s=2.0, timing=timing) for step in (1, 2)]
    end = [record("epoch", epoch=0, step=2, loss=1.0), record("run_end", status="ok", step=2)]
    return "\n".join([start, *steps, *end]) + "\n"


def earlier(node, value, count=3):
    """``count`` earlier results of GPU 0 of ``node`` for WORKLOAD, as node_history keeps them."""
    return [
        {"schema": "gpuops.node-history/v1", "time": 1795000000.0 + index, "node": node,
         "source": "training", "metric": "images_per_s", "key": WORKLOAD, "device": "GPU 0", "value": value,
         "run_id": "old-%d" % index}
        for index in range(count)
    ]  # fmt: skip


def verify_against_history(tmp_path, **variables):
    """training_verify on three pods, one GPU each, all computing 4 images in 1 s; gpu-node-0's
    GPU did 5 images/s in its last three runs (now 20 % below), gpu-node-1's 4.1 (2 % below),
    gpu-node-2 has no history. The runs directory is tmp_path/runs."""
    run_dir = tmp_path / "runs" / "rn"
    (run_dir / "logs").mkdir(parents=True)
    for rank in range(3):
        (run_dir / "logs" / ("%s.log" % PODS[rank])).write_text(gpu_pod_log(rank, 1.0))
    history = tmp_path / "runs" / "history"
    history.mkdir()
    for node, value in (("gpu-node-0", 5.0), ("gpu-node-1", 4.1)):
        lines = "".join(json.dumps(record) + "\n" for record in earlier(node, value))
        (history / ("%s.jsonl" % node)).write_text(lines)
    record = {"run_id": "rn", "launcher": "pytorchjob", "run_dir": str(run_dir), "world_size": 3, "rc": 0,
              "log_paths": [str(run_dir / "logs" / "*.log")]}  # fmt: skip
    return play(tmp_path, record, **variables)


def history_lines(tmp_path, node):
    path = tmp_path / "runs" / "history" / ("%s.jsonl" % node)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_history_variables_have_the_documented_defaults():
    defaults = load("defaults/main.yml")
    assert defaults["training_verify_history"] is True
    assert defaults["training_verify_history_dir"] == "{{ training_verify_run.run_dir | dirname }}/history"
    assert (defaults["training_verify_history_drop_percent"], defaults["training_verify_history_window"],
            defaults["training_verify_history_min_samples"]) == (15, 10, 3)  # fmt: skip


def test_a_gpu_below_its_own_median_is_a_warning_naming_it_and_every_gpu_is_kept(tmp_path):
    result, output = verify_against_history(tmp_path)
    assert result.returncode == 0, output[-3000:]
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["verdict"] == "passed" and summary["stragglers"] == []  # its peers keep the same pace
    history = summary["history"]
    assert (history["gpus_judged"], history["gpus_with_history"]) == (3, 2)
    (flagged,) = history["flagged"]
    assert (flagged["node"], flagged["device"], flagged["rank"]) == ("gpu-node-0", "GPU 0", 0)
    assert flagged["key"] == WORKLOAD
    assert (flagged["value"], flagged["median"], flagged["below_median_percent"]) == (4.0, 5.0, 20.0)
    reason = "gpu-node-0 GPU 0: throughput 4 images/s (%s) is 20 %% below this node's median of 5 images/s"
    reason %= WORKLOAD
    assert reason in (tmp_path / "report" / "report.md").read_text()
    # The verdict prints each line quoted, its apostrophes doubled: compared up to the first.
    assert "WARNING: " + reason.partition("'")[0] in output
    assert "gpu-node-0 (rn-worker-0): rank 0: 20% below this GPU" in output
    # Every GPU's result is kept, for the next run to be judged against.
    for node, before in (("gpu-node-0", 3), ("gpu-node-1", 3), ("gpu-node-2", 0)):
        lines = history_lines(tmp_path, node)
        assert len(lines) == before + 1
        assert (lines[-1]["run_id"], lines[-1]["value"], lines[-1]["key"]) == ("rn", 4.0, WORKLOAD)


def test_with_the_history_off_nothing_is_judged_or_kept(tmp_path):
    result, output = verify_against_history(tmp_path, training_verify_history=False)
    assert result.returncode == 0, output[-3000:]
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["history"] is None
    assert len(history_lines(tmp_path, "gpu-node-0")) == 3 and history_lines(tmp_path, "gpu-node-2") == []


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"training_verify_history_drop_percent": 100},
         "training_verify_history_drop_percent must be a number of percent above 0 and below 100 (got 100)"),
        ({"training_verify_history_min_samples": 12},
         "at most training_verify_history_window (got 12 and 10)"),
    ],
)  # fmt: skip
def test_bad_history_settings_fail_before_anything_is_read_or_written(tmp_path, variables, message):
    result, output = verify_against_history(tmp_path, **variables)
    assert result.returncode != 0
    assert message in output, output[-3000:]
    assert "Read every rank's training metrics" not in output
    assert not (tmp_path / "report").exists() and history_lines(tmp_path, "gpu-node-2") == []

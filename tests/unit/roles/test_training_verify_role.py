"""The training_verify role's variables and argument spec, and the verdict it prints - memory included."""

from __future__ import annotations

import json
import pathlib

import jinja2
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

"""run_report: the documents and curves a person reads after a run.

The summaries are built the way training_verify builds them, from real parsers on real
inputs: trainer metrics lines and a published NCCL log with a memory-registration failure.
"""

from __future__ import annotations

import io
import json
import pathlib

import pytest
from matplotlib import image as mpimg

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import LogSource
from ansible_collections.gpuops.training.plugins.module_utils.nccl_log import parse_nccl_logs
from ansible_collections.gpuops.training.plugins.module_utils.run_report import build_run_summary
from ansible_collections.gpuops.training.plugins.module_utils.training_log import SCHEMA, parse_training_logs
from ansible_collections.gpuops.training.plugins.modules import run_report

NCCL_FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "nccl" / "published"
REGMR_FAILURE = NCCL_FIXTURES / "perlmutter-ofi-cxi-2node-regmr-fail.log"


def metrics_lines(rank, losses, world_size=2):
    def record(event, **fields):
        return json.dumps({"schema": SCHEMA, "event": event, "rank": rank, "world_size": world_size,
                           "host": "node-%d" % rank, "node": "gpu-node-%d" % rank, "attempt": 0,
                           **fields})  # fmt: skip

    # Rank 1 runs with containerd's usual 8 MiB locked-memory limit, rank 0 unlimited.
    memlock = -1 if rank == 0 else 8 << 20
    lines = [
        record(
            "run_start", backend="nccl", model="retinanet_resnet50_fpn", device="cuda", memlock_bytes=memlock
        )
    ]
    step = 0
    for epoch, epoch_losses in enumerate(losses):
        for loss in epoch_losses:
            step += 10
            lines.append(
                record("step", epoch=epoch, step=step, loss=loss, images_per_s=40.0 + rank + step / 100)
            )
        mean, median = sum(epoch_losses) / len(epoch_losses), sorted(epoch_losses)[len(epoch_losses) // 2]
        lines.append(
            record("epoch", epoch=epoch, step=step, loss=mean, loss_median=median, images_per_s=41.0)
        )
    lines.append(record("run_end", status="ok", step=step))
    return lines


@pytest.fixture
def summary(tmp_path):
    logs = []
    for rank in (0, 1):
        path = tmp_path / "logs" / ("rank%d.log" % rank)
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            "\n".join(metrics_lines(rank, [[2.0, 1.8, 1.7], [1.5, 1.3, 1.2], [1.1, 1.0, 0.9]])) + "\n"
        )
        logs.append(str(path))
    training = parse_training_logs([LogSource(p, path=p) for p in logs])
    nccl = parse_nccl_logs([LogSource(str(REGMR_FAILURE), path=str(REGMR_FAILURE))])
    run = {"run_id": "r42", "launcher": "pytorchjob", "host": "controller", "run_dir": str(tmp_path),
           "world_size": 2, "rc": 0, "started": 100.0, "ended": 160.5,
           "log_paths": [str(tmp_path / "logs" / "*.log")]}  # fmt: skip
    return build_run_summary(run, training, nccl)


def test_the_report_has_every_section_with_remedies_and_relative_log_links(run_module, tmp_path, summary):
    run = run_module(run_report.main, {"summary": summary, "dest": str(tmp_path)})
    assert run.exit_code == 0 and run.result["changed"] is True
    assert sorted(pathlib.Path(p).name for p in run.result["changed_files"]) == [
        "loss.png", "ranks.csv", "report.html", "report.md", "throughput.png"
    ]  # fmt: skip
    markdown = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    for text in (markdown, page):
        assert "Training run r42" in text and "pytorchjob" in text
        assert "Warnings and remedies" in text
        assert "RLIMIT_MEMLOCK" in text  # the memory-registration remedy from the classifier
        assert "node-0" in text and "node-1" in text
        assert "loss.png" in text and "throughput.png" in text
    assert "| Locked memory | limited to as little as 8Mi on ranks 1 (RDMA needs unlimited) |" in markdown
    assert summary["memlock"]["limited_ranks"] == [1]
    assert [rank["memlock_bytes"] for rank in summary["ranks"]] == [-1, 8 << 20]
    assert "](logs/rank0.log)" in markdown
    assert "*" not in markdown.split("## Logs")[1]  # globs expanded to the files
    assert 'href="logs/rank1.log"' in page
    # Every rank row of the markdown table: 15 columns (compute images/s and collective s
    # included), rank first.
    rows = [
        line
        for line in markdown.splitlines()
        if line.startswith(("| 0 | node-0 | gpu-node-0", "| 1 | node-1 | gpu-node-1"))
    ]
    assert len(rows) == 2 and all(row.count(" | ") == 14 for row in rows)


def test_the_curves_are_real_plots_of_the_run(run_module, tmp_path, summary):
    run_module(run_report.main, {"summary": summary, "dest": str(tmp_path)})
    for name in ("loss.png", "throughput.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = mpimg.imread(io.BytesIO(data), format="png")
        assert pixels.shape[:2] == (360, 750)
        # A drawn line in the plot's colour, not an empty frame.
        blue_or_green = ((pixels[..., 2] > 0.5) & (pixels[..., 0] < 0.3)) | (
            (pixels[..., 1] > 0.4) & (pixels[..., 0] < 0.3) & (pixels[..., 2] < 0.4)
        )
        assert blue_or_green.sum() > 200, name
    # The loss curve falls: the line's mean height on the right is lower than on the left.
    pixels = mpimg.imread(str(tmp_path / "loss.png"))
    line = (pixels[..., 2] > 0.5) & (pixels[..., 0] < 0.3) & (pixels[..., 1] < 0.5)
    rows, cols = line.nonzero()
    left, right = rows[cols < cols.mean()].mean(), rows[cols > cols.mean()].mean()
    assert right > left  # image rows grow downwards


def test_a_second_run_changes_nothing_and_check_mode_writes_nothing(run_module, tmp_path, summary):
    dest = tmp_path / "report"
    preview = run_module(run_report.main, {"summary": summary, "dest": str(dest)}, check_mode=True)
    assert preview.result["changed"] is True and not dest.exists()
    assert run_module(run_report.main, {"summary": summary, "dest": str(dest)}).result["changed"] is True
    again = run_module(run_report.main, {"summary": summary, "dest": str(dest)})
    assert again.result["changed"] is False and again.result["changed_files"] == []
    summary["verdict"] = "failed"
    summary["failures"] = ["rank 1 exited with code 3"]
    changed = run_module(run_report.main, {"summary": summary, "dest": str(dest)}, check_mode=True)
    assert [pathlib.Path(p).name for p in changed.result["changed_files"]] == ["report.html", "report.md"]
    assert "rank 1 exited" not in (dest / "report.md").read_text()


def test_only_markdown_without_plots(run_module, tmp_path, summary):
    run = run_module(
        run_report.main, {"summary": summary, "dest": str(tmp_path), "formats": ["markdown"], "plots": False}
    )
    assert sorted(run.result["files"]) == ["markdown", "ranks_csv"]
    assert not (tmp_path / "loss.png").exists()
    assert "## Curves" not in (tmp_path / "report.md").read_text()


def test_json_writes_the_summary_as_given_and_only_when_it_changes(run_module, tmp_path, summary):
    params = {"summary": summary, "dest": str(tmp_path), "formats": ["json"], "plots": False}
    run = run_module(run_report.main, params)
    assert sorted(run.result["files"]) == ["json", "ranks_csv"]
    written = (tmp_path / "summary.json").read_text()
    assert json.loads(written) == summary  # the log globs as given, not the files they match
    assert written.endswith("}\n") and '\n    "schema": ' in written
    assert run_module(run_report.main, params).result["changed"] is False
    summary["verdict"] = "failed"
    changed = run_module(run_report.main, params)
    assert [pathlib.Path(p).name for p in changed.result["changed_files"]] == ["summary.json"]
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"] == "failed"


def test_a_summary_that_is_not_one_is_refused_naming_the_field(run_module, tmp_path):
    run = run_module(run_report.main, {"summary": {"ok": True}, "dest": str(tmp_path)})
    assert run.failed and run.result["msg"].startswith("summary: expected a run summary")
    assert list(tmp_path.iterdir()) == []


def test_html_escapes_what_came_from_the_logs(run_module, tmp_path, summary):
    summary["failures"] = ["<script>alert(1)</script>"]
    run_module(run_report.main, {"summary": summary, "dest": str(tmp_path), "plots": False})
    page = (tmp_path / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page

# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Draw a run's loss and throughput curves as PNG bytes (matplotlib, no display needed).

The same summary always gives the same bytes (no timestamps in the files), so a report
written twice reports no change.
"""

from __future__ import annotations

import io
import math

try:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
except ImportError:  # the module reports it with missing_required_lib
    Figure = None

HAS_MATPLOTLIB = Figure is not None


def _finite_points(rows, x_key, y_key):
    points = [
        (row[x_key], row[y_key])
        for row in rows
        if isinstance(row.get(x_key), (int, float))
        and isinstance(row.get(y_key), (int, float))
        and math.isfinite(row[y_key])
    ]
    return [p[0] for p in points], [p[1] for p in points]


def _png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _figure(title):
    figure = Figure(figsize=(7.5, 3.6), layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title, fontsize=11)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _no_data(axes, what):
    axes.text(0.5, 0.5, "no %s recorded" % what, ha="center", va="center", transform=axes.transAxes)
    axes.set_xticks([])
    axes.set_yticks([])


def loss_plot(summary):
    """The loss at each recorded step (mean over ranks) and each epoch's median."""
    figure, axes = _figure("Training loss, run %s" % summary.get("run_id"))
    steps_x, steps_y = _finite_points(summary.get("steps") or [], "step", "loss")
    epochs_x, epochs_y = _finite_points(summary.get("epochs") or [], "epoch", "loss_median")
    if not epochs_x:
        epochs_x, epochs_y = _finite_points(summary.get("epochs") or [], "epoch", "loss")
    if steps_x:
        axes.plot(steps_x, steps_y, color="#1f5fa8", linewidth=1.2, marker="." if len(steps_x) < 80 else None,
                  label="loss at recorded steps (mean over ranks)")  # fmt: skip
        axes.set_xlabel("optimizer step")
        axes.set_ylabel("loss")
        axes.legend(loc="upper right", fontsize=8)
    elif epochs_x:
        axes.plot(epochs_x, epochs_y, color="#1f5fa8", marker="o", label="epoch loss")
        axes.set_xlabel("epoch")
        axes.set_ylabel("loss")
    else:
        _no_data(axes, "loss")
    return _png(figure)


def throughput_plot(summary):
    """Images per second: per rank at each recorded step, all ranks together per epoch."""
    figure, axes = _figure("Throughput, run %s" % summary.get("run_id"))
    steps_x, steps_y = _finite_points(summary.get("steps") or [], "step", "images_per_s_per_rank")
    epochs_x, epochs_y = _finite_points(summary.get("epochs") or [], "epoch", "images_per_s")
    if steps_x:
        axes.plot(steps_x, steps_y, color="#2d7d46", linewidth=1.2, marker="." if len(steps_x) < 80 else None,
                  label="images/s per rank (mean over ranks)")  # fmt: skip
        axes.set_xlabel("optimizer step")
        axes.set_ylabel("images/s per rank")
        axes.set_ylim(bottom=0)
        axes.legend(loc="lower right", fontsize=8)
    elif epochs_x:
        axes.bar(epochs_x, epochs_y, color="#2d7d46", label="images/s, all ranks")
        axes.set_xlabel("epoch")
        axes.set_ylabel("images/s, all ranks")
    else:
        _no_data(axes, "throughput")
    return _png(figure)

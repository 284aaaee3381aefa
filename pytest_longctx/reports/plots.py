"""The HTML report's plots, drawn by matplotlib (the ``report`` extra) as inline SVG.
Without matplotlib there are none: ``available()`` is False and the report shows its
tables alone."""
from __future__ import annotations

import importlib.util
import io
from typing import Any, Mapping, Sequence

from pytest_longctx.data.records import FAMILIES, PLACEMENTS
from pytest_longctx.gate.distance import Bucket, DriftBucket

BASELINE_COLOUR = "#8a96a3"
MODEL_COLOUR = "#d9480f"  # the model's colour in every plot
# matplotlib rc settings (typed Any: the stubs want literal keys)
STYLE: Any = {"svg.fonttype": "none", "svg.hashsalt": "pytest-longctx", "font.size": 9, "axes.spines.top": False,
         "axes.spines.right": False}


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _svg(figure: Any) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buffer = io.StringIO()
    FigureCanvasSVG(figure).print_svg(buffer, metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def distance_plot(panels: Mapping[str, Sequence[Bucket]]) -> str:
    """Bars of the share hit per distance bucket, baseline beside model, one panel per kind."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(4.6 * len(panels), 3.2), layout="constrained")
        for ax, (title, buckets) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels.items()):
            x = list(range(len(buckets)))
            ax.bar([i - 0.2 for i in x], [b.baseline for b in buckets], 0.4, color=BASELINE_COLOUR, label="baseline")
            ax.bar([i + 0.2 for i in x], [b.model for b in buckets], 0.4, color=MODEL_COLOUR, label="model")
            ax.set_xticks(x, [f"{b.label}\nn={b.count}" for b in buckets])
            ax.set(ylim=(0, 1.05), xlabel="tokens back to what the target needs", ylabel="share right", title=title)
        figure.legend(*figure.axes[0].get_legend_handles_labels(), loc="outside upper center", ncols=2, frameon=False)
        return _svg(figure)


def drift_plot(panels: Mapping[str, Sequence[DriftBucket]]) -> str:
    """Per kind, by distance bucket (the control reads first): above, the model's mean KL_K
    from the baseline's distribution; below, the mean log-probability of the token read,
    baseline beside model."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(4.6 * len(panels), 5.4), layout="constrained")
        grid = figure.subplots(2, len(panels), squeeze=False, sharex="col")
        for column, (title, buckets) in enumerate(panels.items()):
            x = list(range(len(buckets)))
            top, bottom = grid[0][column], grid[1][column]
            top.bar(x, [b.kl or 0.0 for b in buckets], 0.6, color=MODEL_COLOUR, label="model")
            top.set(ylabel="mean KL_K from the baseline, nats", title=title)
            bottom.bar([i - 0.2 for i in x], [b.baseline or 0.0 for b in buckets], 0.4, color=BASELINE_COLOUR, label="baseline")
            bottom.bar([i + 0.2 for i in x], [b.model or 0.0 for b in buckets], 0.4, color=MODEL_COLOUR, label="model")
            bottom.set_xticks(x, [f"{b.label.replace(' (', chr(10) + '(')}\nn={b.reads}" for b in buckets])
            bottom.set(xlabel="tokens back to what the target needs", ylabel="mean log p of the token read")
        figure.legend(*grid[1][0].get_legend_handles_labels(), loc="outside upper center", ncols=2, frameon=False)
        return _svg(figure)


def effects_plot(points: Sequence[tuple[str, str, float, float]]) -> str:
    """Rule effects, the model's (eff) against the reference's (eff_ref), one panel per
    placement x family; on the solid line the rule works as in the reference, below the
    dashed one (half the reference's effect) it counts as not followed."""
    import matplotlib
    from matplotlib.figure import Figure

    values = [v for _, _, a, b in points for v in (a, b)] or [0.0, 1.0]
    low, high = min(0.0, min(values)) - 0.5, max(values) + 0.5
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(8.0, 4.6), layout="constrained")
        grid = figure.subplots(len(PLACEMENTS), len(FAMILIES), sharex=True, sharey=True, squeeze=False)
        for row, placement in enumerate(PLACEMENTS):
            for column, family in enumerate(FAMILIES):
                ax = grid[row][column]
                mine = [(ref, eff) for p, f, ref, eff in points if p == placement and f == family]
                ax.plot([low, high], [low, high], color=BASELINE_COLOUR, linewidth=1)
                ax.plot([low, high], [low / 2, high / 2], color=BASELINE_COLOUR, linewidth=1, linestyle="--")
                ax.scatter([p[0] for p in mine], [p[1] for p in mine], s=14, color=MODEL_COLOUR, alpha=0.75)
                ax.set(xlim=(low, high), ylim=(low, high), title=f"{placement} prompt, {family} (n={len(mine)})")
                if row == len(PLACEMENTS) - 1:
                    ax.set_xlabel("eff_ref (baseline), nats")
                if column == 0:
                    ax.set_ylabel("eff (model), nats")
        return _svg(figure)


RESTORE_COLOUR = "#2b8a3e"  # blame: what taking a part back from the original removes


def blame_plot(panels: Mapping[str, Sequence[tuple[str, float | None, float | None]]]) -> str:
    """Per blamed row, its parts as ranked (first on top), each with two bars: the share of the
    row's far drift that restoring it removes, and the share that damaging the original with it
    causes (a missing share: no bar). Each bar's SVG group is named ``restore-R-PART`` /
    ``damage-R-PART`` (R: the panel's index)."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    longest = max(len(parts) for parts in panels.values())
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(5.2 * len(panels), 1.2 + 0.32 * longest), layout="constrained")
        for index, (ax, (title, parts)) in enumerate(zip(figure.subplots(1, len(panels), squeeze=False)[0], panels.items())):
            y = list(range(len(parts)))
            for direction, offset, colour, column in (("restore", -0.2, RESTORE_COLOUR, 1), ("damage", 0.2, MODEL_COLOUR, 2)):
                bars = ax.barh([i + offset for i in y], [p[column] or 0.0 for p in parts], 0.4, color=colour, label=direction)
                for bar, part in zip(bars, parts):
                    bar.set_gid(f"{direction}-{index}-{part[0]}")
            ax.axvline(0.0, color=BASELINE_COLOUR, linewidth=0.8)
            ax.set_yticks(y, [p[0] for p in parts])
            ax.invert_yaxis()
            ax.xaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set(xlabel="share of the row's far drift", title=title)
        figure.legend(*figure.axes[0].get_legend_handles_labels(), loc="outside upper center", ncols=2, frameon=False)
        return _svg(figure)


PASS_COLOUR = "#2b8a3e"


def ladder_plot(points: Sequence[tuple[str, int, float, bool]], threshold: float | None) -> str:
    """A ladder's candidates: each one's size on disk (MiB) against its far drift (KL_K, nats), green where it passed
    and red where it failed, named beside its point, and the drift threshold as a dashed line. Each point's SVG
    group is named ``rung-NAME``."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(6.4, 3.8), layout="constrained")
        ax = figure.subplots()
        for name, size, far, passed in points:
            mark = ax.scatter([size / 2**20], [far], s=36, color=PASS_COLOUR if passed else MODEL_COLOUR, zorder=3)
            mark.set_gid(f"rung-{name}")
            ax.annotate(name, (size / 2**20, far), textcoords="offset points", xytext=(5, 4), fontsize=8)
        if threshold is not None:
            ax.axhline(threshold, color=BASELINE_COLOUR, linewidth=1, linestyle="--", label=f"drift threshold {threshold:g}")
            ax.legend(loc="upper right", frameon=False)
        ax.set(xlabel="size on disk, MiB", ylabel="far drift (KL_K), nats", ylim=(0, None))
        return _svg(figure)

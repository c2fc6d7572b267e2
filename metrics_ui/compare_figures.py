"""Figure builders of the compare page: several performance-test runs overlaid (pure).

Runs start at different times, so time axes are seconds since each run's measurement
window began; latency is in ms on log axes. Every axis says its unit.
"""
from __future__ import annotations

from typing import Callable, Sequence

from collector.query.bench_runs import BenchRun
from collector.query.series import TimeSeries
from metrics_ui.figures import _LAYOUT, curve_levels, empty_figure
from metrics_ui.plot import Figure, scatter

_MS = 1e6
NO_RUNS = "pick two or more runs to compare"


def run_name(r: BenchRun) -> str:
    """Return how a run is named in legends: its label and run id."""
    return f"{r.label} · {r.run}"


def latency_overlay_figure(runs: Sequence[BenchRun], title: str = "Start-to-end latency by percentile") -> Figure:
    """Return each run's full percentile curve (p0 .. p99.999) on log-log axes, one line per run."""
    if not any(r.hist.total_count for r in runs):
        return empty_figure(title, NO_RUNS if not runs else "no latency data in these runs' windows")
    levels = curve_levels()
    x = [1.0 / (1.0 - p / 100.0) for p in levels]
    fig = Figure(layout=_LAYOUT)
    for r in runs:
        if not r.hist.total_count:
            continue
        values = r.hist.percentiles(levels.tolist())
        fig.add_trace(scatter(x=x, y=[values[p] / _MS for p in levels], mode="lines", name=run_name(r),
                                 customdata=levels.tolist(), hovertemplate="p%{customdata:.4f}: %{y:.4g} ms"))
    ticks = [1.0 / (1.0 - p / 100.0) for p in (0.0, 90.0, 99.0, 99.9, 99.99, 99.999)]
    fig.update_layout(title=title, xaxis=dict(type="log", title="percentile", tickvals=ticks,
                                              ticktext=["0", "90", "99", "99.9", "99.99", "99.999"]),
                      yaxis=dict(type="log", title="latency (ms)"))
    return fig


def overlay_figure(runs: Sequence[BenchRun], pick: Callable[[BenchRun], list[TimeSeries]], title: str,
                   y_title: str, scale: float = 1.0) -> Figure:
    """Return one line per run and series over seconds since the run's window start."""
    fig = Figure(layout=_LAYOUT)
    for r in runs:
        for s in pick(r):
            if not s.values:
                continue
            name = run_name(r) + (f" · {s.name}" if s.name else "")
            fig.add_trace(scatter(x=[(t - r.window_start_ns) / 1e9 for t in s.times_ns],
                                     y=[v / scale for v in s.values], mode="lines", name=name))
    if not fig.data:
        return empty_figure(title, NO_RUNS if not runs else "no data in these runs")
    fig.update_layout(title=title, xaxis_title="time since the measurement window began (s)", yaxis_title=y_title)
    return fig

"""Figures of any streaming query's panels: sources, batches against the trigger, state, executors (pure).

Same look, units and empty states as metrics_ui/figures.py: rows/s and rows for sources and
state, ms for batches and the watermark delay, bytes in MiB, shares in %, CPU in cores.
"""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from collector.query.series import TimeSeries
from collector.query.spark_panels import ExecutorView, QueryBatchView, StateView
from metrics_ui.figures import as_times, base_figure, colour, empty_figure, fit_legend

NOT_REPORTED = "not reported by this query in the range"
_MIB = 1024 * 1024


def lines_figure(series: Sequence[TimeSeries], title: str, unit: str, axis: str, scale: float = 1.0,
                 dashed: Sequence[TimeSeries] = (), dashed_suffix: str = "", fmt: str = ",.0f",
                 message: str = NOT_REPORTED) -> go.Figure:
    """Return one line per series (its name keeps its colour), `dashed` ones beside them with the same colours."""
    if not any(s.values for s in (*series, *dashed)):
        return empty_figure(title, message)
    fig = base_figure()
    tint = {s.name: colour(s.name, i) for i, s in enumerate(series)}
    for group, dash, suffix in ((series, None, ""), (dashed, "dash", dashed_suffix)):
        for i, s in enumerate(group):
            fig.add_trace(go.Scatter(x=as_times(s.times_ns), y=[v / scale for v in s.values], mode="lines",
                                     name=f"{s.name}{suffix}", line=dict(color=tint.get(s.name, colour(s.name, i)),
                                                                         dash=dash),
                                     hovertemplate=f"%{{y:{fmt}}} {unit}"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title=axis, yaxis_rangemode="tozero")
    return fit_legend(fig)


def batch_trigger_figure(view: QueryBatchView, title: str) -> go.Figure:
    """Return the mean and slowest batch per bucket (ms) against the trigger interval (dashed)."""
    if not view.slowest_ms.values:
        return empty_figure(title, NOT_REPORTED)
    fig = base_figure()
    for s, style in ((view.mean_ms, dict(color="#1f6fb4")), (view.slowest_ms, dict(color="#222", width=2)),
                     (view.trigger, dict(color="#c0262d", dash="dash"))):
        if s.values:
            fig.add_trace(go.Scatter(x=as_times(s.times_ns), y=list(s.values), mode="lines", name=s.name, line=style,
                                     hovertemplate="%{y:,.0f} ms"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="duration (ms)", yaxis_rangemode="tozero")
    return fit_legend(fig)


def overrun_figure(view: QueryBatchView, title: str) -> go.Figure:
    """Return the share of each bucket's batches that took longer than the trigger, 0-100 %."""
    s = view.overrun_share
    if not s.values:
        return empty_figure(title, "no trigger: the query runs its batches back to back")
    fig = base_figure()
    fig.add_trace(go.Bar(x=as_times(s.times_ns), y=[v * 100 for v in s.values], name="overran",
                         marker_color="#c0262d", hovertemplate="%{y:.0f} %"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="batches over the trigger (%)",
                      yaxis_range=[0, 100], showlegend=False)
    return fig


def watermark_figure(view: StateView, title: str) -> go.Figure:
    """Return the watermark's delay behind the trigger (s, line) and the rows it dropped as late (bars)."""
    delay = view.watermark_delay_ms
    if not delay.values and not any(s.values for s in view.late):
        return empty_figure(title, "no watermark reported by this query in the range")
    fig = base_figure()
    for i, s in enumerate(view.late):
        fig.add_trace(go.Bar(x=as_times(s.times_ns), y=list(s.values), name=f"{s.name} late rows", yaxis="y2",
                             marker_color=colour(s.name, i + 1), opacity=0.6, hovertemplate="%{y:,.0f} rows"))
    if delay.values:
        fig.add_trace(go.Scatter(x=as_times(delay.times_ns), y=[v / 1000 for v in delay.values], mode="lines",
                                 name="watermark delay", line=dict(color="#222", width=2),
                                 hovertemplate="%{y:,.1f} s"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis=dict(title="watermark delay (s)", rangemode="tozero"),
                      yaxis2=dict(title="late rows", overlaying="y", side="right", rangemode="tozero",
                                  showgrid=False), barmode="stack")
    return fit_legend(fig)


def executor_figures(view: ExecutorView) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
    """Return the executors' heap (used, max dashed), GC time per s, CPU in cores and running tasks."""
    return (lines_figure(view.heap_used, "JVM heap used (max dashed)", "MiB", "heap (MiB)", _MIB,
                         dashed=view.heap_max, dashed_suffix=" max"),
            lines_figure(view.gc_ms_per_s, "GC time per second", "ms/s", "GC (ms per s)", fmt=",.1f"),
            lines_figure(view.cpu_cores, "Task CPU", "cores", "CPU (cores)", fmt=",.2f"),
            lines_figure(view.running_tasks, "Running tasks", "tasks", "tasks", fmt=",.1f"))

"""Figures of any streaming query's panels: sources, batches against the trigger, state, executors (pure).

Same look, units and empty states as metrics_ui/figures.py: rows/s and rows for sources and
state, ms for batches and the watermark delay, bytes in MiB, shares in %, CPU in cores.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from collector.query.series import TimeSeries
from collector.query.spark_panels import ExecutorView, QueryBatchView, StateView
from metrics_ui.figures import base_figure, colour, empty_figure, fit_legend
from metrics_ui.plot import Figure, bar, iso_times, scatter

NOT_REPORTED = "not reported by this query in the range"
_MIB = 1024 * 1024


def _y(values: Sequence[float], scale: float = 1.0) -> list[float]:
    return (np.asarray(values, dtype=float) / scale).tolist()


def _tints(fig: Figure) -> dict[str, str]:
    """Return each trace's line colour by its name, for series drawn beside them."""
    return {t.get("name"): t.get("line", {}).get("color") for t in fig.data}


def lines_figure(series: Sequence[TimeSeries], title: str, unit: str, axis: str, scale: float = 1.0,
                 dashed: Sequence[TimeSeries] = (), dashed_suffix: str = "", fmt: str = ",.0f",
                 message: str = NOT_REPORTED) -> Figure:
    """Return one line per series (its name keeps its colour), `dashed` ones beside them with the same colours."""
    if not any(s.values for s in (*series, *dashed)):
        return empty_figure(title, message)
    fig = base_figure()
    tint = {s.name: colour(s.name, i) for i, s in enumerate(series)}
    for group, dash, suffix in ((series, None, ""), (dashed, "dash", dashed_suffix)):
        for i, s in enumerate(group):
            fig.add_trace(scatter(x=iso_times(s.times_ns), y=_y(s.values, scale), mode="lines",
                                     name=f"{s.name}{suffix}", line=dict(color=tint.get(s.name, colour(s.name, i)),
                                                                         dash=dash),
                                     hovertemplate=f"%{{y:{fmt}}} {unit}"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title=axis, yaxis_rangemode="tozero")
    return fit_legend(fig)


def _secondary(fig: Figure, series: Sequence[TimeSeries], unit: str, axis: str, scale: float = 1.0,
               suffix: str = "", fmt: str = ",.0f", tints: dict | None = None) -> None:
    """Add `series` as dotted lines on a right-hand axis of their own."""
    for i, s in enumerate(series):
        fig.add_trace(scatter(x=iso_times(s.times_ns), y=_y(s.values, scale), mode="lines",
                                 name=f"{s.name}{suffix}", yaxis="y2",
                                 line=dict(color=(tints or {}).get(s.name, colour(s.name, i)), dash="dot"),
                                 hovertemplate=f"%{{y:{fmt}}} {unit}"))
    if series:
        fig.update_layout(yaxis2=dict(title=axis, overlaying="y", side="right", rangemode="tozero", showgrid=False))


def sources_figure(rates: Sequence[TimeSeries], processed: Sequence[TimeSeries], behind: Sequence[TimeSeries],
                   title: str) -> Figure:
    """Return each source's input rows/s (solid), processed rows/s (dashed) and rows behind (dotted, right axis)."""
    if not any(s.values for s in (*rates, *processed, *behind)):
        return empty_figure(title, NOT_REPORTED)
    fig = lines_figure(rates, title, "rows/s", "rows/s", dashed=processed, dashed_suffix=" processed")
    if not rates and not processed:
        fig = base_figure().update_layout(title=title, xaxis_title="time (UTC)")
    tints = _tints(fig)
    _secondary(fig, [s for s in behind if s.values], "behind", "rows (or files) behind", suffix=" behind",
               tints=tints)
    return fit_legend(fig)


def batch_trigger_figure(view: QueryBatchView, title: str) -> Figure:
    """Return the mean and slowest batch per bucket (ms) against the trigger (dashed), the overrun share as bars."""
    if not view.slowest_ms.values:
        return empty_figure(title, NOT_REPORTED)
    fig = base_figure()
    s = view.overrun_share
    if s.values:
        fig.add_trace(bar(x=iso_times(s.times_ns), y=_y(s.values, 0.01), name="overran (%)", yaxis="y2",
                             marker_color="#c0262d", opacity=0.35, hovertemplate="%{y:.0f} % of batches"))
        fig.update_layout(yaxis2=dict(title="batches over the trigger (%)", overlaying="y", side="right",
                                      range=[0, 100], showgrid=False))
    for s, style in ((view.mean_ms, dict(color="#1f6fb4")), (view.slowest_ms, dict(color="#222", width=2)),
                     (view.trigger, dict(color="#c0262d", dash="dash"))):
        if s.values:
            fig.add_trace(scatter(x=iso_times(s.times_ns), y=_y(s.values), mode="lines", name=s.name, line=style,
                                     hovertemplate="%{y:,.0f} ms"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="duration (ms)", yaxis_rangemode="tozero")
    return fit_legend(fig)


def state_figure(view: StateView, title: str) -> Figure:
    """Return the rows each stateful operator holds (solid) and the watermark's delay (dotted, right axis, s)."""
    delay = view.watermark_delay_ms
    if not any(s.values for s in view.rows) and not delay.values:
        return empty_figure(title, NOT_REPORTED)
    fig = lines_figure(view.rows, title, "rows", "rows held") if view.rows else \
        base_figure().update_layout(title=title, xaxis_title="time (UTC)")
    if delay.values:
        _secondary(fig, [delay], "s", "watermark delay (s)", scale=1000, fmt=",.1f", tints={delay.name: "#222"})
    return fit_legend(fig)


def executor_figures(view: ExecutorView) -> tuple[Figure, Figure]:
    """Return the executors' heap (used, max dashed), and their GC time per s with task CPU (dotted, cores)."""
    heap = lines_figure(view.heap_used, "JVM heap used (max dashed)", "MiB", "heap (MiB)", _MIB,
                        dashed=view.heap_max, dashed_suffix=" max")
    if not any(s.values for s in (*view.gc_ms_per_s, *view.cpu_cores)):
        return heap, empty_figure("GC time per second and task CPU", NOT_REPORTED)
    work = lines_figure(view.gc_ms_per_s, "GC time per second and task CPU (dotted)", "ms/s", "GC (ms per s)",
                        fmt=",.1f") if view.gc_ms_per_s else \
        base_figure().update_layout(title="Task CPU", xaxis_title="time (UTC)")
    _secondary(work, view.cpu_cores, "cores", "task CPU (cores)", suffix=" CPU", fmt=",.2f",
               tints=_tints(work))
    return heap, fit_legend(work)

"""Plotly figure builders for the dashboard (pure: typed records in, figures out).

Latencies are plotted in ms on log axes, throughput in events/s, shares of time in % (0-100),
backlogs in events, time in UTC; every axis says its unit. An empty input gives an empty
figure carrying the page's empty-state text.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from collector.bins import UiBin
from collector.histogram import LatencyHistogram

from .data import TimeSeries

NO_DATA = "no data yet for this run in the selected range"
_MS = 1e6
_HEIGHT = 320
# The legend sits at the foot of the figure (container coordinates): Plotly then reserves
# its height below the x-axis title, so a legend of any length never covers the axis.
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=40, b=50), height=_HEIGHT,
               legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"),
               font=dict(size=12))
_LEGEND_ROW_PX = 20
#: Legend entries that fit one row of a half-width chart (~600 px); more rows make the figure taller.
LEGEND_PER_ROW = 4
#: Percentile levels of the full curve: 0 .. 99.999 % in steps that densify towards the tail.
CURVE_NINES = 5


def _times(ns: Sequence[int]) -> list[datetime]:
    return [datetime.fromtimestamp(t / 1e9, timezone.utc) for t in ns]


def fit_legend(fig: go.Figure, per_row: int = LEGEND_PER_ROW) -> go.Figure:
    """Grow `fig` by a legend row's height for each row past the first, so the plot keeps its size."""
    entries = sum(1 for t in fig.data if t.showlegend is not False)
    rows = -(-entries // per_row)
    fig.update_layout(height=(fig.layout.height or _HEIGHT) + _LEGEND_ROW_PX * max(0, rows - 1))
    return fig


def empty_figure(title: str, message: str = NO_DATA) -> go.Figure:
    """Return an axis-less figure that shows `message` in its middle."""
    fig = go.Figure(layout=_LAYOUT)
    fig.update_layout(title=title, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=message, showarrow=False, font=dict(size=14, color="#666"),
                                        xref="paper", yref="paper", x=0.5, y=0.5)])
    return fig


def throughput_figure(series: Sequence[TimeSeries], title: str = "Throughput") -> go.Figure:
    """Return events/s over time, one line per series."""
    if not any(s.values for s in series):
        return empty_figure(title)
    fig = go.Figure(layout=_LAYOUT)
    for s in series:
        fig.add_trace(go.Scatter(x=_times(s.times_ns), y=list(s.values), mode="lines", name=s.name or "all"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="throughput (events/s)")
    return fit_legend(fig)


def percentiles_over_time_figure(series: Sequence[TimeSeries], title: str) -> go.Figure:
    """Return latency percentiles over time (ms, log axis), one line per percentile."""
    if not any(s.values for s in series):
        return empty_figure(title)
    fig = go.Figure(layout=_LAYOUT)
    for s in series:
        fig.add_trace(go.Scatter(x=_times(s.times_ns), y=[v / _MS for v in s.values], mode="lines", name=s.name))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="latency (ms)", yaxis_type="log")
    return fit_legend(fig)


def busy_share_figure(busy: Sequence[TimeSeries], backpressured: Sequence[TimeSeries], title: str,
                      message: str = NO_DATA) -> go.Figure:
    """Return busy (solid) and backpressured (dashed) shares of time per step, 0-100 %."""
    if not any(s.values for s in (*busy, *backpressured)):
        return empty_figure(title, message)
    fig = go.Figure(layout=_LAYOUT)
    for s in busy:
        fig.add_trace(go.Scatter(x=_times(s.times_ns), y=[v * 100 for v in s.values], mode="lines",
                                 name=f"{s.name} busy"))
    for s in backpressured:
        fig.add_trace(go.Scatter(x=_times(s.times_ns), y=[v * 100 for v in s.values], mode="lines",
                                 name=f"{s.name} backpressured", line=dict(dash="dash")))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="share of time (%)",
                      yaxis_range=[0, 100])
    return fit_legend(fig)


def backlog_figure(series: Sequence[TimeSeries], title: str, message: str = NO_DATA) -> go.Figure:
    """Return the backlog (events not yet processed) over time, one line per step."""
    if not any(s.values for s in series):
        return empty_figure(title, message)
    fig = go.Figure(layout=_LAYOUT)
    for s in series:
        fig.add_trace(go.Scatter(x=_times(s.times_ns), y=list(s.values), mode="lines", name=s.name))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="backlog (events)", yaxis_rangemode="tozero")
    return fit_legend(fig)


def bins_figure(bins: Sequence[UiBin], title: str = "Percent of events by latency bin") -> go.Figure:
    """Return Wallaroo's bar chart: the share of events in each latency bin."""
    if not sum(b.count for b in bins):
        return empty_figure(title)
    fig = go.Figure(layout=_LAYOUT)
    fig.add_trace(go.Bar(x=[b.label for b in bins], y=[b.percent for b in bins],
                         customdata=[b.count for b in bins],
                         hovertemplate="%{x}: %{y:.3f} %% (%{customdata} events)<extra></extra>",
                         marker_color="#3b6ea5"))
    fig.update_layout(title=title, xaxis_title="latency bin", yaxis_title="events (%)",
                      xaxis_type="category")
    return fig


def curve_levels(nines: int = CURVE_NINES, per_decade: int = 20) -> np.ndarray:
    """Return percentile levels from 0 to 100 - 10**-(nines-2), evenly spaced in log(1/(1-p))."""
    x = np.linspace(0.0, nines, nines * per_decade + 1)
    return 100.0 * (1.0 - 10.0 ** -x)


def percentile_curve_figure(hist: LatencyHistogram, marks: dict[float, int] | None = None,
                            title: str = "Latency by percentile") -> go.Figure:
    """Return the full percentile curve (p0 .. p99.999) of a histogram, both axes log."""
    if not hist.total_count:
        return empty_figure(title)
    levels = curve_levels()
    values = hist.percentiles(levels.tolist())
    x = [1.0 / (1.0 - p / 100.0) for p in levels]
    fig = go.Figure(layout=_LAYOUT)
    curve = [values[p] / _MS for p in levels]
    fig.add_trace(go.Scatter(x=x, y=curve, mode="lines", name="latency",
                             customdata=levels, hovertemplate="p%{customdata:.4f}: %{y:.4g} ms<extra></extra>"))
    marked = [v / _MS for v in (marks or {}).values()]
    if marks:
        fig.add_trace(go.Scatter(x=[1.0 / (1.0 - p / 100.0) for p in marks], y=marked,
                                 mode="markers+text", name="Wallaroo percentiles", cliponaxis=False,
                                 text=[f"p{p:g}" for p in marks], textposition="top left"))
    ticks = [1.0 / (1.0 - p / 100.0) for p in (0.0, 90.0, 99.0, 99.9, 99.99, 99.999)]
    fig.update_layout(title=title, xaxis=dict(type="log", title="percentile", tickvals=ticks,
                                              ticktext=["0", "90", "99", "99.9", "99.99", "99.999"]),
                      yaxis=dict(type="log", title="latency (ms)", range=_log_range_with_headroom(curve + marked)))
    return fig


def _log_range_with_headroom(values: Sequence[float]) -> list[float] | None:
    """Return a log axis range (in decades) with room above the top value for a marker's label.

    Plotly's autorange pads for markers but not for their text, so labels of the highest
    points ("p99.9", "p99.99" on a flat tail) would be cut at the top of the plot.
    """
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    low, high = float(np.log10(min(positive))), float(np.log10(max(positive)))
    span = max(high - low, 0.1)          # a flat curve still gets a readable band
    return [low - 0.05 * span, high + 0.2 * span]

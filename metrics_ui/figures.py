"""Plotly figure builders for the dashboard (pure: typed records in, figures out).

Latencies are plotted in ms on log axes labelled in their unit ("500 µs", "2 s"), throughput
in events/s, shares of time in % (0-100), backlogs in events, time in UTC; every axis says its
unit, and a series name keeps its colour on every chart. An empty input gives an empty
figure carrying the page's empty-state text.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from dash import Patch

from collector.bins import UiBin, format_ns
from collector.histogram import LatencyHistogram

from collector.query.panels import BatchView, IngressView, Marker
from collector.query.series import MARKET_SPREAD_STEPS, TimeSeries
from collector.query.ranges import TimeRange
from collector.vocabulary import PIPELINE_NBBO, PIPELINE_ORDERS, STEP_E2E, STEP_JOB
from metrics_ui.plot import Figure, bar, iso_times, scatter

NO_DATA = "no data yet for this run in the selected range"
_MS = 1e6
_HEIGHT = 320
# The legend sits at the foot of the figure (container coordinates): Plotly then reserves
# its height below the x-axis title, so a legend of any length never covers the axis.
# A small white template: the same look as "plotly_white" without its trace defaults. Tick
# labels are not measured one by one to hide those past the chart's edge (`ticklabeloverflow`):
# the margins hold them, and the measuring was a quarter of the time plotly.js spent drawing a page.
_AXIS = dict(gridcolor="#ebf0f8", linecolor="#ebf0f8", zerolinecolor="#ebf0f8", zerolinewidth=2, ticks="",
             ticklabeloverflow="allow", automargin=True)
_TEMPLATE = dict(layout=dict(paper_bgcolor="white", plot_bgcolor="white", xaxis=_AXIS, yaxis=_AXIS,
                             font=dict(color="#2a3f5f"), hoverlabel=dict(align="left")))
# Margins that already hold what Plotly's automargin would make room for: the y ticks' labels
# (l), the last time label (r; a right-hand axis: `_Y2_R`), two-line time labels and the axis
# title (b; a legend: `_LEGEND_B`). plotly.js draws a chart again whenever automargin moves a
# margin, so these halve a page's drawing (docs/PERFORMANCE.md, "Design decisions"); automargin
# stays on for labels wider than usual.
_MARGIN = dict(l=66, r=32, t=40, b=58)
_Y2_R = 66
_LEGEND_B = 87
_LAYOUT = dict(template=_TEMPLATE, margin=_MARGIN, height=_HEIGHT,
               legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"),
               font=dict(size=12))
_LEGEND_ROW_PX = 20
#: Legend entries that fit one row of a half-width chart (~600 px); more rows make the figure taller.
LEGEND_PER_ROW = 4
#: Percentile levels of the full curve: 0 .. 99.999 % in steps that densify towards the tail.
CURVE_NINES = 5


#: One colour per series name on every chart (pipelines, percentiles, the whole query), so a name
#: keeps its colour from chart to chart; and a dash style per pipeline, so equal lines stay visible.
COLOURS = {PIPELINE_NBBO: "#1f6fb4", PIPELINE_ORDERS: "#e6731c", "all": "#1f6fb4",
           "p50": "#2c9c4a", "p99": "#e6731c", "p999": "#c0262d", "p9999": "#7b3fa0",
           STEP_E2E: "#555555", STEP_JOB: "#c0262d"}
_PALETTE = ("#1f6fb4", "#e6731c", "#2c9c4a", "#c0262d", "#7b3fa0", "#8c564b", "#d6589f", "#7f7f7f")
#: Steps take their colour from their place in the run's step order (Market Spread's: ingress,
#: source, check_market_data, sink), so a step keeps its colour on every chart of its run.
_STEP_PALETTE = ("#1f6fb4", "#2c9c4a", "#e6731c", "#7b3fa0", "#8c564b", "#d6589f", "#17becf", "#bcbd22")
DASHES = {PIPELINE_ORDERS: "dash"}
#: Legend names of the stored percentile fields.
PERCENTILE_NAMES = {"p50": "p50", "p95": "p95", "p99": "p99", "p999": "p99.9", "p9999": "p99.99"}
_MARKER_COLOURS = {"start": "#2c9c4a", "end": "#555555", "firing": "#c0262d", "resolved": "#1f6fb4", "rescale": "#8a4fbf"}


def colour(name: str, index: int = 0, steps: Mapping[str, str] | None = None) -> str:
    """Return the colour of a series: its step's, else its own if it has one, else the palette's `index`-th."""
    return (steps or {}).get(name) or COLOURS.get(name, _PALETTE[index % len(_PALETTE)])


def step_colours(order: Sequence[str] = MARKET_SPREAD_STEPS) -> dict[str, str]:
    """Return each step's colour by its place in the run's step `order` (start-to-end and the query keep theirs)."""
    steps = [s for s in order if s not in COLOURS]
    return {s: _STEP_PALETTE[i % len(_STEP_PALETTE)] for i, s in enumerate(steps)}


def base_figure() -> Figure:
    """Return an empty figure with the dashboard's layout, for builders in other modules."""
    return Figure(layout=_LAYOUT)


def latency_ticks(values_ms: Sequence[float], want: int = 3) -> tuple[list[float], list[str]]:
    """Return log-axis ticks (ms) within `values_ms`, labelled in their unit ("500 µs", "2 s").

    Decades where the values span several, else 1-2-5 steps, else every digit, so that at
    least `want` ticks fall inside; a range narrower still gets its two ends (3 digits).
    """
    positive = [v for v in values_ms if v and v > 0]
    if not positive:
        return [], []
    lo, hi = min(positive), max(positive)
    first, last = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))
    ticks: list[float] = []
    for steps in ((1,), (1, 2, 5), tuple(range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in steps if lo <= m * 10.0 ** e <= hi]
        if len(ticks) >= want:
            break
    if len(ticks) < 2:
        ticks = sorted({float(f"{lo:.3g}"), float(f"{hi:.3g}")})
    return ticks, [format_ns(t * _MS) for t in ticks]


def time_axes(fig: Figure, rng: TimeRange | None, revision: str | None = None,
              markers: Sequence[Marker] = ()) -> Figure:
    """Give a time chart the page's shared range, a hover across its series, `markers` as lines.

    `revision` becomes the figure's `uirevision`: while it stays the same, a live update keeps
    the series hidden from the legend and the user's y zoom (plotly.js keeps edited UI state
    unless the figure itself changes that attribute: a new range brings its own x range).
    """
    if rng is not None:
        fig.update_layout(xaxis=dict(range=iso_times((rng.start_ns, rng.end_ns)), type="date"))
    fig.update_layout(hovermode="x unified", uirevision=revision)
    for m in markers:
        at = iso_times((m.time_ns,))[0]
        tint = _MARKER_COLOURS.get(m.kind, "#555")
        fig.add_shape(type="line", x0=at, x1=at, yref="paper", y0=0, y1=1, line=dict(color=tint, width=1, dash="dot"))
        fig.add_annotation(x=at, yref="paper", y=1, text=m.text, showarrow=False, xanchor="left", yanchor="top",
                           font=dict(size=10, color=tint), bgcolor="rgba(255,255,255,0.7)")
    return fig


def hide_series(fig: Figure, names) -> Figure:
    """Show the series named in `names` in the legend only (the user hid them)."""
    hidden = set(names or ())
    for t in fig.data:
        if t.get("name") in hidden:
            t["visible"] = "legendonly"
    return fig


def legend_hidden(restyle, figure: dict | None, hidden) -> list[str]:
    """Return the hidden series' names after a chart's `restyleData` (a legend click)."""
    out = list(hidden or ())
    if not (isinstance(restyle, list) and len(restyle) == 2 and isinstance(restyle[0], dict)):
        return out
    changes, indices = restyle
    if "visible" not in changes or not isinstance(figure, dict):
        return out
    data = figure.get("data") or []
    values = changes["visible"] if isinstance(changes["visible"], list) else [changes["visible"]] * len(indices or [])
    for i, v in zip(indices or [], values):
        name = data[i].get("name") if isinstance(i, int) and 0 <= i < len(data) else None
        if not isinstance(name, str):
            continue
        if v == "legendonly" and name not in out:
            out.append(name)
        elif v in (True, "true") and name in out:
            out.remove(name)
    return out


def fit_legend(fig: Figure, per_row: int = LEGEND_PER_ROW) -> Figure:
    """Grow `fig` by a legend row's height for each row past the first, so the plot keeps its size.

    Its margins make room for the legend and a right-hand axis, as automargin would (`_MARGIN`).
    """
    entries = sum(1 for t in fig.data if t.get("showlegend") is not False)
    rows = -(-entries // per_row)
    fig.update_layout(height=(fig.layout.get("height") or _HEIGHT) + _LEGEND_ROW_PX * max(0, rows - 1))
    shown = fig.layout.get("showlegend")
    if shown if shown is not None else entries > 1:
        fig.update_layout(margin=dict(b=_LEGEND_B + _LEGEND_ROW_PX * max(0, rows - 1)))
    if any(t.get("yaxis") == "y2" for t in fig.data):
        fig.update_layout(margin=dict(r=_Y2_R))
    return fig


def empty_figure(title: str, message: str = NO_DATA) -> Figure:
    """Return an axis-less figure that shows `message` in its middle."""
    fig = Figure(layout=_LAYOUT)
    fig.update_layout(title=title, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=message, showarrow=False, font=dict(size=14, color="#666"),
                                        xref="paper", yref="paper", x=0.5, y=0.5)])
    return fig


def throughput_figure(series: Sequence[TimeSeries], title: str = "Throughput") -> Figure:
    """Return events/s over time, one line per series."""
    if not any(s.values for s in series):
        return empty_figure(title)
    fig = Figure(layout=_LAYOUT)
    for i, s in enumerate(series):
        name = s.name or "all"
        fig.add_trace(scatter(x=iso_times(s.times_ns), y=list(s.values), mode="lines", name=name,
                                 line=dict(color=colour(name, i), dash=DASHES.get(name), width=2),
                                 hovertemplate="%{y:,.0f} events/s"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="throughput (events/s)",
                      yaxis_rangemode="tozero")
    return fit_legend(fig)


def percentiles_over_time_figure(series: Sequence[TimeSeries], title: str) -> Figure:
    """Return latency percentiles over time (ms, log axis), one line per percentile."""
    if not any(s.values for s in series):
        return empty_figure(title)
    fig = Figure(layout=_LAYOUT)
    ys = []
    for i, s in enumerate(series):
        y = [v / _MS for v in s.values]
        ys += y
        fig.add_trace(scatter(x=iso_times(s.times_ns), y=y, mode="lines", name=PERCENTILE_NAMES.get(s.name, s.name),
                                 line=dict(color=colour(s.name, i)), customdata=[format_ns(v) for v in s.values],
                                 hovertemplate="%{customdata}"))
    ticks, labels = latency_ticks(ys)
    fig.update_layout(title=title, xaxis_title="time (UTC)",
                      yaxis=dict(type="log", title="latency", tickvals=ticks, ticktext=labels))
    return fit_legend(fig)


def busy_share_figure(busy: Sequence[TimeSeries], backpressured: Sequence[TimeSeries], title: str,
                      message: str = NO_DATA, order: Sequence[str] = MARKET_SPREAD_STEPS) -> Figure:
    """Return busy (solid) and backpressured (dashed) shares of time per step, 0-100 %."""
    if not any(s.values for s in (*busy, *backpressured)):
        return empty_figure(title, message)
    fig = Figure(layout=_LAYOUT)
    steps = step_colours(order)
    for i, s in enumerate(busy):
        fig.add_trace(scatter(x=iso_times(s.times_ns), y=[v * 100 for v in s.values], mode="lines",
                                 name=f"{s.name} busy", line=dict(color=colour(s.name, i, steps)),
                                 hovertemplate="%{y:.0f} %"))
    for i, s in enumerate(backpressured):
        fig.add_trace(scatter(x=iso_times(s.times_ns), y=[v * 100 for v in s.values], mode="lines",
                                 name=f"{s.name} backpressured", line=dict(dash="dash", color=colour(s.name, i, steps)),
                                 hovertemplate="%{y:.0f} %"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="share of time (%)",
                      yaxis_range=[0, 100])
    return fit_legend(fig)


def backlog_figure(series: Sequence[TimeSeries], title: str, message: str = NO_DATA,
                   order: Sequence[str] = MARKET_SPREAD_STEPS) -> Figure:
    """Return the backlog (events not yet processed) over time, one line per step."""
    if not any(s.values for s in series):
        return empty_figure(title, message)
    fig = Figure(layout=_LAYOUT)
    steps = step_colours(order)
    for i, s in enumerate(series):
        fig.add_trace(scatter(x=iso_times(s.times_ns), y=list(s.values), mode="lines", name=s.name,
                                 line=dict(color=colour(s.name, i, steps)), hovertemplate="%{y:,.0f} events"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="backlog (events)", yaxis_rangemode="tozero")
    return fit_legend(fig)


def bins_figure(bins: Sequence[UiBin], title: str = "Percent of events by latency bin") -> Figure:
    """Return Wallaroo's bar chart: the share of events in each latency bin."""
    if not sum(b.count for b in bins):
        return empty_figure(title)
    fig = Figure(layout=_LAYOUT)
    fig.add_trace(bar(x=[b.label for b in bins], y=[b.percent for b in bins],
                         customdata=[b.count for b in bins],
                         hovertemplate="%{x}: %{y:.3f} %% (%{customdata:,} events)<extra></extra>",
                         text=[bin_label(b.percent) for b in bins], textposition="outside", cliponaxis=False,
                         marker_color="#3b6ea5"))
    top = max(b.percent for b in bins)
    fig.update_layout(title=title, xaxis_title="latency bin", yaxis_title="events (%)",
                      xaxis_type="category", yaxis_range=[0, min(100.0, top * 1.15) or 1.0])
    return fig


def bin_label(percent: float) -> str:
    """Return a bar's value label: empty bins unlabelled, small shares still readable ("<0.01 %")."""
    if percent <= 0:
        return ""
    if percent < 0.01:
        return "<0.01 %"
    return f"{percent:.3g} %"


def batch_figure(view: BatchView, title: str = "Spark micro-batches") -> Figure:
    """Return each bucket's mean batch phases (ms, stacked) and its slowest batch (line)."""
    if not view.slowest_ms.values:
        return empty_figure(title, "no Spark progress written for this run in the range")
    fig = Figure(layout=_LAYOUT)
    for i, s in enumerate(view.phases_ms):
        fig.add_trace(scatter(x=iso_times(s.times_ns), y=list(s.values), mode="lines", name=s.name,
                                 stackgroup="phases", line=dict(width=0.5, color=_PALETTE[i % len(_PALETTE)]),
                                 hovertemplate="%{y:,.0f} ms"))
    s = view.slowest_ms
    fig.add_trace(scatter(x=iso_times(s.times_ns), y=list(s.values), mode="lines", name=s.name,
                             line=dict(color="#222", width=2), hovertemplate="%{y:,.0f} ms"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="duration (ms)", yaxis_rangemode="tozero")
    return fit_legend(fig)


def bad_frames_figure(view: IngressView, title: str = "Bad frames set aside by the ingress") -> Figure:
    """Return the frames the ingress set aside per bucket, stacked by reason."""
    if not view.bad_by_reason:
        return empty_figure(title, "no bad frames in the range")
    fig = Figure(layout=_LAYOUT)
    for i, s in enumerate(view.bad_by_reason):
        fig.add_trace(bar(x=iso_times(s.times_ns), y=list(s.values), name=s.name,
                             marker_color=_PALETTE[i % len(_PALETTE)], hovertemplate="%{y:,.0f} frames"))
    fig.update_layout(title=title, barmode="stack", xaxis_title="time (UTC)", yaxis_title="bad frames")
    return fit_legend(fig)


def muted_figure(view: IngressView, title: str = "Ingress muted (backpressure)") -> Figure:
    """Return the share of each bucket the ingress' sockets were muted, 0-100 %."""
    s = view.muted_share
    if not s.values:
        return empty_figure(title, "no ingress figures for this run in the range")
    fig = Figure(layout=_LAYOUT)
    fig.add_trace(scatter(x=iso_times(s.times_ns), y=[v * 100 for v in s.values], mode="lines", name="muted",
                             fill="tozeroy", line=dict(color=COLOURS[STEP_JOB]), hovertemplate="%{y:.0f} %"))
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="time muted (%)", yaxis_range=[0, 100],
                      showlegend=False)
    return fig


def curve_levels(nines: int = CURVE_NINES, per_decade: int = 20) -> np.ndarray:
    """Return percentile levels from 0 to 100 - 10**-(nines-2), evenly spaced in log(1/(1-p))."""
    x = np.linspace(0.0, nines, nines * per_decade + 1)
    return 100.0 * (1.0 - 10.0 ** -x)


def percentile_curve_figure(hist: LatencyHistogram, marks: dict[float, int] | None = None,
                            title: str = "Latency by percentile") -> Figure:
    """Return the full percentile curve (p0 .. p99.999) of a histogram, both axes log."""
    if not hist.total_count:
        return empty_figure(title)
    levels = curve_levels()
    values = hist.percentiles(levels.tolist())
    x = [1.0 / (1.0 - p / 100.0) for p in levels]
    fig = Figure(layout=_LAYOUT)
    curve = [values[p] / _MS for p in levels]
    fig.add_trace(scatter(x=x, y=curve, mode="lines", name="latency",
                             customdata=[[f"{p:.4g}", format_ns(values[p])] for p in levels],
                             hovertemplate="p%{customdata[0]}: %{customdata[1]}<extra></extra>"))
    marked = [v / _MS for v in (marks or {}).values()]
    if marks:
        fig.add_trace(scatter(x=[1.0 / (1.0 - p / 100.0) for p in marks], y=marked,
                                 mode="markers+text", name="Wallaroo percentiles", cliponaxis=False,
                                 text=[f"p{p:g}" for p in marks], textposition="top left"))
    ticks = [1.0 / (1.0 - p / 100.0) for p in (0.0, 90.0, 99.0, 99.9, 99.99, 99.999)]
    fig.update_layout(title=title, xaxis=dict(type="log", title="percentile", tickvals=ticks,
                                              ticktext=["0", "90", "99", "99.9", "99.99", "99.999"]),
                      yaxis=dict(type="log", title="latency", range=_log_range_with_headroom(curve + marked),
                                 tickvals=latency_ticks(curve + marked)[0], ticktext=latency_ticks(curve + marked)[1]))
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


#: A trace's per-point arrays: a live update trims them at the front and extends them at the back.
POINT_ARRAYS = ("x", "y", "customdata", "text", "hovertext")


def _points(trace: Mapping) -> list[tuple]:
    """Return a trace's points, each the tuple of its per-point values (x, y, customdata, ...)."""
    arrays = [list(trace[k]) for k in POINT_ARRAYS if k in trace and trace[k] is not None]
    return list(zip(*arrays)) if arrays else []


def figure_patch(old: Mapping, new: Mapping, max_share: float = 0.5) -> Patch | None:
    """Return the Patch that turns figure `old` into `new` by points dropped and appended; None if it does not pay.

    `old` and `new` are figures as plotly.js's JSON (`plot.Figure`). A live chart's
    window slides: points leave at the front, new ones arrive at the back, and the last few
    may be revised (a second still being written). So, per trace, the points of `old`
    before `new`'s first are deleted, the longest run of equal points is kept, the rest of
    `old` is deleted and the rest of `new` appended; layout keys that differ (the x range,
    the markers, ticks) are assigned whole. None, meaning "send the whole figure", when
    the traces differ in number or style, or when more than `max_share` of the points change.
    """
    old_data, new_data = list(old.get("data", ())), list(new.get("data", ()))
    if len(old_data) != len(new_data):
        return None
    patch, changed, total = Patch(), 0, 0
    for i, (a, b) in enumerate(zip(old_data, new_data)):
        if {k: v for k, v in a.items() if k not in POINT_ARRAYS} != {k: v for k, v in b.items() if k not in POINT_ARRAYS}:
            return None
        arrays = [k for k in POINT_ARRAYS if k in b and b[k] is not None]
        if arrays != [k for k in POINT_ARRAYS if k in a and a[k] is not None]:
            return None
        was, now = _points(a), _points(b)
        xs = [p[0] for p in was] if arrays and arrays[0] == "x" else was
        first = (now[0][0] if arrays and arrays[0] == "x" else now[0]) if now else None
        drop = xs.index(first) if now and first in xs else len(was)
        keep = 0
        while keep < len(now) and drop + keep < len(was) and was[drop + keep] == now[keep]:
            keep += 1
        cut = len(was) - drop - keep
        changed += drop + cut + len(now) - keep
        total += len(now)
        for j, k in enumerate(arrays):
            for _ in range(drop):
                del patch["data"][i][k][0]
            for _ in range(cut):
                del patch["data"][i][k][keep]
            if keep < len(now):
                patch["data"][i][k].extend([p[j] for p in now[keep:]])
    if changed > max_share * max(total, 1):
        return None
    old_layout, new_layout = old.get("layout", {}), new.get("layout", {})
    for k in new_layout:
        if old_layout.get(k) != new_layout[k]:
            patch["layout"][k] = new_layout[k]
    for k in old_layout:
        if k not in new_layout:
            del patch["layout"][k]
    return patch

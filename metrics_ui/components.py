"""Layout pieces the pages share: range picker, error banner, tables, and the store lookup."""
from __future__ import annotations

import time
from typing import Sequence

from dash import Input, dcc, html
from flask import current_app

from collector.bins import format_ns
from collector.influx import InfluxError

from .data import GroupStats, MetricsStore, StepBackpressure
from .ranges import DEFAULT_RANGE, RANGE_CUSTOM, RANGES, TimeRange, picker_time, resolve_range

EXTENSION = "metrics_ui"                 # key of the MetricsStore in the Flask app's extensions
REFRESH_MS = 1000


def store() -> MetricsStore:
    """Return the app's MetricsStore (callbacks run inside a Flask request)."""
    return current_app.extensions[EXTENSION]


def now_ns() -> int:
    """Return the wall clock in ns."""
    return time.time_ns()


def influx_error_banner(error: InfluxError) -> html.Div:
    """Return the banner shown when InfluxDB cannot be reached or refuses a query."""
    what = "is unreachable" if error.status is None else "failed a query"
    return html.Div([html.B(f"InfluxDB at {store().client.url} {what}. "),
                     html.Span("Figures resume when it answers again. "),
                     html.Code(str(error)[:300])], className="banner banner-error", role="alert")


def warning_banner(text: str) -> html.Div:
    """Return a banner for a problem of the user's input (a bad custom range)."""
    return html.Div(text, className="banner banner-warning", role="alert")


def range_picker(prefix: str, value: str = DEFAULT_RANGE) -> html.Div:
    """Return the time range picker: last 5 min / 1 h / 24 h, or custom dates and UTC times.

    Ids: `<prefix>-range`, and for custom `<prefix>-from-date`, `-from-time`, `-to-date`, `-to-time`.
    """
    options = [{"label": label, "value": key} for key, (label, _) in RANGES.items()]
    options.append({"label": "custom", "value": RANGE_CUSTOM})

    def bound(which: str, hint: str) -> html.Span:
        return html.Span([
            html.Label(which, className="range-label"),
            dcc.DatePickerSingle(id=f"{prefix}-{which}-date", display_format="YYYY-MM-DD", placeholder="date",
                                 clearable=True, className="range-date"),
            dcc.Input(id=f"{prefix}-{which}-time", type="text", placeholder=hint, debounce=True,
                      className="range-input range-time"),
        ], className="range-bound")

    return html.Div([
        dcc.RadioItems(id=f"{prefix}-range", options=options, value=value, inline=True, className="range-choice"),
        html.Span([bound("from", "HH:MM:SS UTC"), bound("to", "HH:MM:SS (default: end)")],
                  id=f"{prefix}-custom", className="range-custom"),
    ], className="range-picker")


def range_inputs(prefix: str) -> list[Input]:
    """Return the callback inputs of a range picker, in `picked_range`'s argument order."""
    return [Input(f"{prefix}-range", "value")] + [Input(f"{prefix}-{w}-{p}", "value" if p == "time" else "date")
                                                  for w in ("from", "to") for p in ("date", "time")]


def picked_range(choice: str | None, anchor: int, from_date=None, from_time=None, to_date=None,
                 to_time=None) -> TimeRange:
    """Return the range the picker's values select; raise ValueError with a reason."""
    if choice != RANGE_CUSTOM:
        return resolve_range(choice, anchor)
    return resolve_range(choice, anchor, picker_time(from_date, from_time, "start"),
                         picker_time(to_date, to_time, "end"))


def fmt_latency(ns: int | None) -> str:
    """Return a latency for a table cell ("—" when unknown)."""
    return "—" if ns is None else format_ns(ns)


def fmt_duration(seconds: float) -> str:
    """Return a run's length compactly in its two largest units ("45 s", "12 min 05 s", "3 h 07 min")."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"


def fmt_rate(eps: float | None) -> str:
    """Return events/s for a table cell."""
    return "—" if eps is None else f"{eps:,.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence], table_id: str | None = None,
          empty: str = "no data yet for this run") -> html.Table:
    """Return a plain HTML table; one row with `empty` when there are no rows."""
    head = html.Thead(html.Tr([html.Th(h) for h in header]))
    if not rows:
        body = html.Tbody(html.Tr(html.Td(empty, colSpan=len(header), className="empty")))
    else:
        body = html.Tbody([html.Tr([html.Td(c) for c in r]) for r in rows])
    kwargs = {"id": table_id} if table_id else {}
    return html.Table([head, body], className="data-table", **kwargs)


STATS_HEADER = ("", "events", "p50", "p95", "p99", "min events/s", "median events/s", "max events/s")


def stats_rows(stats: Sequence[GroupStats]) -> list[list[str]]:
    """Return breakdown table rows (latency percentiles and throughput) for GroupStats."""
    return [[s.label, f"{s.events:,}", fmt_latency(s.p50_ns), fmt_latency(s.p95_ns), fmt_latency(s.p99_ns),
             fmt_rate(s.eps_min), fmt_rate(s.eps_median), fmt_rate(s.eps_max)] for s in stats]


BP_HEADER = ("step", "status", "busy %", "backpressured %", "idle %", "backlog (events)", "backlog growth (events/s)")
BP_EMPTY = "no backpressure figures for this run yet"


def fmt_share(share: float | None) -> str:
    """Return a share of time (0..1) as a percentage (the header says %) for a table cell."""
    return "—" if share is None else f"{share * 100:.0f}"


def bp_badge(status: str | None) -> html.Span:
    """Return a backpressure status as a badge coloured by its level (static/style.css)."""
    known = status if status in ("OK", "LOW", "HIGH") else None
    return html.Span(known or "—", className=f"bp bp-badge bp-{(known or 'none').lower()}")


def backpressure_rows(latest: Sequence[StepBackpressure]) -> list[list]:
    """Return the backpressure table's rows: status badge, shares, backlog and its growth."""
    return [[b.step, bp_badge(b.status), fmt_share(b.busy_share), fmt_share(b.backpressured_share),
             fmt_share(b.idle_share), "—" if b.backlog is None else f"{b.backlog:,}",
             "—" if b.backlog_growth_per_s is None else f"{b.backlog_growth_per_s:+,.0f}"] for b in latest]

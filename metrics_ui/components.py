"""Layout pieces the pages share: range picker (and its URL), refresh control, banners, tables, the store lookup."""
from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Collection, Mapping, Sequence

from dash import Input, Patch, dcc, html, no_update
from flask import current_app

from collector.bins import format_ns
from collector.influx import InfluxError

from collector.query.panels import StepBackpressure
from collector.query.series import MARKET_SPREAD_STEPS, START_TO_END, GroupStats
from collector.query.store import MetricsStore
from collector.vocabulary import STEP_CHECK, STEP_INGRESS, STEP_JOB, STEP_SINK, STEP_SOURCE
from metrics_ui import table as data_table
from metrics_ui.figures import figure_patch
from metrics_ui.plot import Figure
from collector.query.ranges import (DEFAULT_RANGE, RANGE_CUSTOM, RANGE_RUN, RANGE_RUN_LABEL, RANGES, TimeRange,
                                    picker_time, resolve_range)

#: What the product is, in the dashboard's title, its pages' titles and its login realm.
PRODUCT = "Spark streaming monitor"
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
    """Return the time range picker: the whole run, last 5 min / 1 h / 24 h, or custom dates and UTC times.

    Ids: `<prefix>-range`, and for custom `<prefix>-from-date`, `-from-time`, `-to-date`, `-to-time`.
    """
    options = [{"label": RANGE_RUN_LABEL, "value": RANGE_RUN}]
    options += [{"label": label, "value": key} for key, (label, _) in RANGES.items()]
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
                 to_time=None, start_ns: int | None = None) -> TimeRange:
    """Return the range the picker's values select (`start_ns`: the run's start, for the whole run); raise
    ValueError with a reason."""
    if choice != RANGE_CUSTOM:
        return resolve_range(choice, anchor, start_ns=start_ns)
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
          empty: str = "no data yet for this run"):
    """Return a plain HTML table; one row with `empty` when there are no rows.

    One component (`metrics_ui.table.Table`) when every cell is text or a link or span of
    text, else html components."""
    data = data_table.cells(rows)
    if data is not None:
        return data_table.Table(header, data, empty=empty, className="data-table", id=table_id)
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
#: What a page's charts and tables say when InfluxDB failed at its first load (nothing drawn to keep).
UNREADABLE = "InfluxDB could not be read: see the message above"


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


# -- the job and step pages' shared controls: range in the URL, refresh rate, job graph

#: Refresh choices of a live page: query value -> (label, ms); "off" pauses.
REFRESH_CHOICES = {"1": ("every 1 s", 1000), "5": ("5 s", 5000), "30": ("30 s", 30000), "off": ("paused", None)}
DEFAULT_REFRESH = "1"
_URL_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[T ](\d{1,2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?))?Z?$")


@dataclass(frozen=True)
class PageQuery:
    """A page's range and refresh rate as its URL carries them (`?range=custom&from=...&to=...&refresh=5`)."""
    choice: str = DEFAULT_RANGE
    from_date: str | None = None
    from_time: str | None = None
    to_date: str | None = None
    to_time: str | None = None
    refresh: str = DEFAULT_REFRESH
    error: str | None = None              # what was wrong with the URL's values (they are then ignored)


def page_query(query: Mapping[str, object]) -> PageQuery:
    """Read the range and refresh rate from a page's query parameters; bad values give defaults and a reason."""
    def text(key: str) -> str | None:
        value = query.get(key)
        return value[:40] if isinstance(value, str) and value else None

    choice, refresh = text("range") or DEFAULT_RANGE, text("refresh") or DEFAULT_REFRESH
    try:
        if choice not in (RANGE_CUSTOM, RANGE_RUN) and choice not in RANGES:
            raise ValueError(f"unknown range {choice!r} in the address: pick one of "
                             f"{', '.join((RANGE_RUN, *RANGES))} or custom")
        if refresh not in REFRESH_CHOICES:
            raise ValueError(f"unknown refresh {refresh!r} in the address: one of {', '.join(REFRESH_CHOICES)}")
        bounds = []
        for key, what in (("from", "start"), ("to", "end")):
            raw = text(key)
            m = _URL_DATE.match(raw) if raw else None
            if raw and not m:
                raise ValueError(f"the address' {key}={raw!r} is not YYYY-MM-DDTHH:MM:SSZ (UTC)")
            date, clock = (m.group(1), m.group(2)) if m else (None, None)
            picker_time(date, clock, what)           # a real date and time, or ValueError
            bounds += [date, clock]
        if choice == RANGE_CUSTOM:
            resolve_range(choice, 1 << 62, picker_time(bounds[0], bounds[1], "start"),
                          picker_time(bounds[2], bounds[3], "end"))
    except ValueError as e:
        return PageQuery(error=str(e))
    return PageQuery(choice, *bounds, refresh=refresh) if choice == RANGE_CUSTOM else PageQuery(choice, refresh=refresh)


def range_picker_from(prefix: str, q: PageQuery) -> html.Div:
    """Return `range_picker` holding the values of a page's URL."""
    picker = range_picker(prefix, q.choice)
    values = {f"{prefix}-from-date": q.from_date, f"{prefix}-from-time": q.from_time,
              f"{prefix}-to-date": q.to_date, f"{prefix}-to-time": q.to_time}
    for bound in picker.children[1].children:
        for part in bound.children:
            if getattr(part, "id", None) in values and values[part.id]:
                if isinstance(part, dcc.DatePickerSingle):
                    part.date = values[part.id]
                else:
                    part.value = values[part.id]
    return picker


def refresh_control(prefix: str, value: str = DEFAULT_REFRESH) -> dcc.RadioItems:
    """Return the live page's refresh choice (id `<prefix>-refresh`): every 1 s, 5 s, 30 s or paused."""
    return dcc.RadioItems(id=f"{prefix}-refresh", value=value, inline=True, className="refresh-choice",
                          options=[{"label": label, "value": key} for key, (label, _) in REFRESH_CHOICES.items()])


def shown_range(rng: TimeRange, first_ns: int, end_ns: int) -> TimeRange:
    """Return the x range every chart of a page shows: the picked range, without the part before the run began.

    `end_ns` is where the page reads to (past a finished run's last latency point, for its
    final backpressure figures), so the charts are not squeezed into a corner of a range
    longer than the run, and still line up.
    """
    start = max(rng.start_ns, first_ns)
    return TimeRange(start, end_ns) if start < end_ns else TimeRange(rng.start_ns, end_ns)


def page_controls(prefix: str, q: PageQuery) -> html.Div:
    """Return a page's range picker and refresh choice, holding the values of its address."""
    return html.Div([range_picker_from(prefix, q),
                     html.Span([html.Span("refresh", className="range-label"), refresh_control(prefix, q.refresh)],
                               className="refresh-control")], className="page-controls")


def refresh_state(refresh: str | None, live: bool | None) -> tuple[bool, int]:
    """Return (disabled, interval ms) of a page's dcc.Interval: ticking only for a live run, not paused."""
    ms = REFRESH_CHOICES.get(refresh or DEFAULT_REFRESH, REFRESH_CHOICES[DEFAULT_REFRESH])[1]
    return (not live or ms is None), (ms or REFRESH_MS)


#: Clientside: write a page's range and refresh choice into its address (replaceState: no reload,
#: no history entry per tick), so the page can be bookmarked and shared as the user sees it.
#: The address' other parameters (the job page's open rows) stay as they are.
URL_SYNC_JS = """
function(choice, fromDate, fromTime, toDate, toTime, refresh) {
    const q = new URLSearchParams(window.location.search);
    ['range', 'from', 'to', 'refresh'].forEach(k => q.delete(k));
    const at = (d, t) => d ? d + (t ? 'T' + t.trim() : '') + 'Z' : null;
    if (choice && choice !== '%s') { q.set('range', choice); }
    if (choice === 'custom') {
        if (at(fromDate, fromTime)) { q.set('from', at(fromDate, fromTime)); }
        if (at(toDate, toTime)) { q.set('to', at(toDate, toTime)); }
    }
    if (refresh && refresh !== '%s') { q.set('refresh', refresh); }
    const search = q.toString() ? '?' + q.toString() : '';
    if (window.location.search !== search) {
        window.history.replaceState(window.history.state, '', window.location.pathname + search);
    }
    return search;
}
""" % (DEFAULT_RANGE, DEFAULT_REFRESH)


def url_sync_inputs(prefix: str) -> list[Input]:
    """Return the inputs URL_SYNC_JS reads: the range picker's values and the refresh choice."""
    return range_inputs(prefix) + [Input(f"{prefix}-refresh", "value")]


# An x-axis end as Plotly (`2026-01-02 03:04:05.123`) or the server (`…T03:04:05.859671+00:00`)
# writes it: date, optional time with any fraction, optional `Z` or UTC offset.
_AXIS_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?"
                        r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?$")


def axis_time_utc(text: str) -> datetime | None:
    """Read one end of a time axis as an aware UTC datetime (no offset: UTC); None if it is not one."""
    m = _AXIS_TIME.match(text.strip()) if len(text) <= 64 else None
    if m is None:
        return None
    y, mo, d, h, mi, sec, frac, zone = m.groups()
    offset = timedelta()
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0)) * (-1 if zone[0] == "-" else 1)
    try:
        t = datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(sec or 0),
                     int((frac or "0")[:6].ljust(6, "0")), tzinfo=timezone.utc)
    except ValueError:
        return None
    return t - offset


def zoom_to_range(relayout: Mapping | None) -> tuple[str, str, str, str] | None:
    """Return (from date, from time, to date, to time) of an x-axis zoom (whole seconds, UTC), else None."""
    if not isinstance(relayout, Mapping):
        return None
    lo, hi = relayout.get("xaxis.range[0]"), relayout.get("xaxis.range[1]")
    if lo is None and isinstance(relayout.get("xaxis.range"), list) and len(relayout["xaxis.range"]) == 2:
        lo, hi = relayout["xaxis.range"]
    if not isinstance(lo, str) or not isinstance(hi, str):
        return None
    start, end = axis_time_utc(lo), axis_time_utc(hi)
    if start is None or end is None:
        return None
    start = start.replace(microsecond=0)
    end = end.replace(microsecond=0) + (timedelta(seconds=1) if end.microsecond else timedelta())
    if end <= start:
        return None
    return (start.strftime("%Y-%m-%d"), start.strftime("%H:%M:%S"), end.strftime("%Y-%m-%d"), end.strftime("%H:%M:%S"))


#: What "busy" means for a micro-batch engine, shown under the backpressure table.
BUSY_NOTE = ("Busy, for the job, is the share of time a micro-batch was running. Spark starts the next batch as "
             "soon as one ends while events are waiting, so a job near 100 % busy is working at its capacity, "
             "not failing: it is behind only if the backlog grows or the ingress is muted (backpressured).")
#: What Market Spread's steps do, under their names in the job graph (other jobs' steps go by name alone).
_STEP_NOTES = {STEP_INGRESS: "TCP ingress, ordered log", STEP_SOURCE: "Spark source: log ranges",
               STEP_CHECK: "the rule (stateful)", STEP_SINK: "results, fsync"}


def job_graph(latest: Sequence[StepBackpressure], graph_id: str, order: Sequence[str] = MARKET_SPREAD_STEPS
              ) -> html.Div:
    """Return the run's steps (in its job's `order`) as a chain of boxes, each with its backpressure badge and busy share."""
    by_step = {b.step: b for b in latest}

    def node(step: str, what: str) -> html.Div:
        b = by_step.get(step)
        busy = "—" if b is None or b.busy_share is None else f"{b.busy_share * 100:.0f} % busy"
        status = b.status if b is not None and b.status in ("OK", "LOW", "HIGH") else None
        return html.Div([html.Div(step, className="graph-step"), html.Div(what, className="graph-what"),
                         bp_badge(status), html.Span(busy, className="graph-busy")],
                        className=f"graph-node bp-node-{(status or 'none').lower()}", **{"data-step": step})

    chain: list = []
    for i, step in enumerate(s for s in order if s != START_TO_END):
        if i:
            chain.append(html.Span("→", className="graph-arrow"))
        chain.append(node(step, _STEP_NOTES.get(step, "")))
    job = by_step.get(STEP_JOB)
    job_text = ("Spark query: " + ("—" if job is None or job.busy_share is None
                                    else f"{job.busy_share * 100:.0f} % of the time in a micro-batch"))
    return html.Div([html.Div(chain, className="graph-chain"),
                     html.Div([bp_badge(job.status if job else None), " ", job_text], className="graph-job",
                              **{"data-step": STEP_JOB})], id=graph_id, className="job-graph")


class FigureMemo:
    """The figures lately sent to pages, by the digest of their source, so a live tick can send a figure's change.

    A page's digests store says which figure each chart holds (the digest of what it was
    built from); the memo keeps that figure, so the next tick can send a Patch of the
    points dropped and appended (`figures.figure_patch`) instead of the whole figure. The
    digest comes from the page, so a response the page dropped, another server process or
    an evicted entry only costs a whole figure, never a wrong one.
    """

    def __init__(self, size: int = 64):
        self._size = size
        self._figures: OrderedDict[tuple[str, str], dict] = OrderedDict()
        self._lock = threading.Lock()

    def send(self, name: str, held: str | None, digest: str, fig: Figure) -> dict | Patch:
        """Remember `fig` as `name`'s figure of `digest`; return the Patch from the page's `held` one, else `fig`.

        The figure remembered is the one sent: a builder makes a new one each time, never changed after.
        """
        new = fig
        with self._lock:
            old = self._figures.get((name, held)) if held else None
            self._figures[(name, digest)] = new
            self._figures.move_to_end((name, digest))
            while len(self._figures) > self._size:
                self._figures.popitem(last=False)
        patch = figure_patch(old, new) if old is not None else None
        return new if patch is None else patch


_MEMO_LOCK = threading.Lock()


def figure_memo() -> FigureMemo:
    """Return the app's FigureMemo (made on first use)."""
    with _MEMO_LOCK:
        return current_app.extensions.setdefault("ms_figure_memo", FigureMemo())


def only_changed(outputs: Mapping[str, tuple[object, Callable[[], object]]], previous: Mapping | None,
                 patch: Collection[str] = (), scope: str = "", tick: bool = True) -> tuple[list, dict[str, str]]:
    """Return each output built, or `no_update` when its source is what it was at the last answer; and the digests.

    `outputs` maps a name to (source, build): the source is what the output is made of
    (typed records, the range, text), so an unchanged one costs neither building nor
    sending. A live page's tick then sends only the figures and tables that changed; the
    digests (a few bytes each) go back to the page in a dcc.Store and come with the next tick.
    The figures named in `patch` go as a Patch of the figure the page holds (its new points
    and trimmed old ones, `FigureMemo`) when that is smaller; `scope` (the page) names them in the memo.
    Unless `tick` (a refresh, not the user's new range or filter), they go whole, and are remembered.
    """
    digests = {k: hashlib.blake2b(repr(src).encode(), digest_size=12).hexdigest() for k, (src, _) in outputs.items()}
    before = previous if isinstance(previous, Mapping) else {}
    out = []
    for k, (_, build) in outputs.items():
        if before.get(k) == digests[k]:
            out.append(no_update)
            continue
        value = build()
        if k in patch and isinstance(value, Figure):
            value = figure_memo().send(f"{scope}:{k}", before.get(k) if tick else None, digests[k], value)
        out.append(value)
    return out, digests


def as_is(value) -> tuple[object, Callable[[], object]]:
    """Return an `only_changed` entry for a value that is its own source (text, a small component)."""
    return value, lambda: value

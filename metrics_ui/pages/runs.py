"""Runs page: every run with how it ended, its timing, throughput, p99 and the alert rules
firing on it (a rule without a job fires on every run).

A run is one start of a streaming query (Spark's runId); the runs of one query (its id, kept
across restarts from one checkpoint) are listed together, newest first, under the query's
name (an unnamed query: its application and short id), the queries by their newest run; an
earlier run's name is marked `↳`. Two queries never share an entry, whatever their names.

A run's status is live, finished, stopped, failed (with its exception's class and message, the
whole of it in the tooltip) or lost (when its driver was last heard from): `run_end`.
Any monitored streaming query's run is listed by its name with its query id: its throughput is
the rows of its batches that started in the 60 s before its newest batch's end, over 60 s
(rows/s), its p99 that of its last declared step; a run that records the start-to-end step (Market
Spread's) gives events/s and the p99 of that step, from its latency histograms.

Throughput and p99 cover a run's last minute, or, for a performance-test run, its measurement
window (warm-up excluded), the same figures the compare page judges; performance-test runs
can be picked here for the compare page."""
from __future__ import annotations

from datetime import datetime, timezone
from urllib.parse import urlencode

import dash
from dash import Input, Output, callback, dcc, html
from flask import current_app

from collector.influx import InfluxError
from collector.run_status import LOST_AFTER_S

from metrics_ui import alerts_banner
from metrics_ui import components as c
from metrics_ui import run_end
from metrics_ui import run_links as links
from collector.query.bench_runs import BenchStore
from collector.query.run_groups import group_runs, short_id
from collector.query.series import START_TO_END, RunInfo

dash.register_page(__name__, path="/", title=f"Runs · {c.PRODUCT}", name="Runs")

RUNS_TABLE = "runs-table"
RUNS_BANNER = "runs-banner"
RUNS_INTERVAL = "runs-interval"
RUNS_PICK = "runs-pick"
RUNS_PICK_LINK = "runs-pick-link"
PICK_RUNS = 20
RUNS_PICK_BOX = "runs-pick-box"
_HIDDEN = {"display": "none"}
# "\n": where a long header breaks (th is white-space: pre-line), so the table fits a 1280-px window
RUNS_HEADER = ("query", "status", "start (UTC)", "duration", "events",
               "throughput\nlast 60 s or test window", "p99 last step\nlast min or test window",
               "backpressure", "query id\nrun id", "alerts firing")
RUNS_NOTE = "runs-note"
THROUGHPUT_NOTE = ("Throughput, last 60 s: for a query, the rows of its batches that started in the 60 s before its "
                   "newest batch ended, divided by 60 s (by its length when it ran for less); for a run that times its "
                   "events start-to-end (Market Spread), those events in its last minute of data per second; for a performance test, over its "
                   "measurement window. A lost run said it was running and then went quiet for "
                   f"{LOST_AFTER_S:.0f} s: its driver was killed or lost.")
#: Marks a query's earlier runs, listed under its newest.
EARLIER = "↳ "


def layout(**_query) -> html.Div:
    """Return the runs page with its table and picker filled (the interval's ticks refresh them)."""
    table, banner = _runs_outputs(0)
    options, pick_style = _pick_outputs(0)
    return html.Div([
        html.Div([html.H2("Runs"), dcc.Link("compare performance-test runs", href="/compare", id="runs-compare")],
                 className="page-head"),
        html.Div(banner, id=RUNS_BANNER),
        html.Div([html.Label("Compare performance-test runs (the first is the baseline): ", htmlFor=RUNS_PICK),
                  dcc.Checklist(id=RUNS_PICK, options=[] if options is dash.no_update else options, value=[],
                                inline=True, className="runs-pick"),
                  dcc.Link("compare", id=RUNS_PICK_LINK, href="/compare", className="button")],
                 id=RUNS_PICK_BOX, className="compare-controls",
                 style=_HIDDEN if pick_style is dash.no_update else pick_style),
        html.Div(table, id=RUNS_TABLE),
        html.P(THROUGHPUT_NOTE, className="note", id=RUNS_NOTE),
        dcc.Interval(id=RUNS_INTERVAL, interval=current_app.config["MS_UI"].refresh_ms, n_intervals=0),
    ])


def _firing_by_run(runs: list[RunInfo]) -> dict[str, list[str]]:
    """Names of the unmuted FIRING rules per run; empty when alerts can't be read."""
    src = alerts_banner.source()
    try:
        rules = [rule for rule, _ in alerts_banner.firing(src.store.rules(), src.history)]
    except (InfluxError, ValueError):
        return {}
    return {r.run: [rule.name for rule in rules if rule.job in (None, r.run)] for r in runs}


def _row(r: RunInfo, firing: list[str], name: str, earlier: bool = False) -> list:
    start = datetime.fromtimestamp(r.first_ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return [dcc.Link((EARLIER if earlier else "") + name, href=links.run_url(r.run, r.run_id),
                     title=f"job {r.run}" + (f" · run {r.run_id}" if r.run_id else "")),
            run_end.status_cell(r), start,
            html.Span(c.fmt_duration(r.duration_s), title=f"{r.duration_s:,.0f} s"),
            f"{r.events:,}", _throughput(r), _p99(r),
            html.Span(r.backpressure or "—", className=f"bp bp-{(r.backpressure or 'none').lower()}"),
            _ids(r),
            dcc.Link(", ".join(firing), href="/alerts", className="alert-state alert-firing") if firing else "—"]


def _ids(r: RunInfo):
    """Return the query id and run id cell: their first characters, the whole ids in the tooltip."""
    if not r.query_id and not r.run_id:
        return "—"
    return html.Span(f"{short_id(r.query_id) or '—'} / {short_id(r.run_id) or '—'}",
                     title=f"query id {r.query_id or '—'}\nrun id {r.run_id or '—'}", className="query-id")


def _throughput(r: RunInfo) -> str:
    """Return the run's throughput with its unit: events/s for a run counted start-to-end, else rows/s
    (the rows of its last 60 s of batches / 60 s); one column holds both, so each cell names its own."""
    return "—" if r.throughput_eps is None else f"{c.fmt_rate(r.throughput_eps)} {r.throughput_unit}"


def _p99(r: RunInfo):
    """Return the p99 of the run's last step, named when it is not start-to-end."""
    if r.p99_ns is None or r.last_step in (None, START_TO_END):
        return c.fmt_latency(r.p99_ns)
    return html.Span([c.fmt_latency(r.p99_ns), html.Span(f" {r.last_step}", className="step-name")],
                     title=f"p99 of step {r.last_step}")


@callback(Output(RUNS_TABLE, "children"), Output(RUNS_BANNER, "children"), Input(RUNS_INTERVAL, "n_intervals"),
          prevent_initial_call=True)
def refresh_runs(n):
    """Reload the runs table (on an InfluxDB error: the last rows stay, with the banner)."""
    return _runs_outputs(n)


def _runs_outputs(n: int | None) -> tuple:
    """Return `refresh_runs`' outputs for tick `n` (0: the page's first layout)."""
    try:
        runs = c.store().runs(c.now_ns(), windows=BenchStore(c.store().client).windows())
    except InfluxError as e:
        # The page's first load has no rows to keep: say why the table is empty.
        table = c.table(RUNS_HEADER, [], empty="runs could not be read: see the message above") if not n \
            else dash.no_update
        return table, c.influx_error_banner(e)
    firing = _firing_by_run(runs)
    rows = [_row(r, firing.get(r.run, []), g.name, i > 0) for g in group_runs(runs) for i, r in enumerate(g.runs)]
    return c.table(RUNS_HEADER, rows, empty="no runs yet: start a job with metrics on"), None


@callback(Output(RUNS_PICK, "options"), Output(RUNS_PICK_BOX, "style"), Input(RUNS_INTERVAL, "n_intervals"),
          prevent_initial_call=True)
def refresh_pick(n):
    """Offer the newest recorded performance-test runs (reloaded every tenth tick; hidden while none)."""
    return _pick_outputs(n)


def _pick_outputs(n: int | None) -> tuple:
    """Return `refresh_pick`'s outputs for tick `n` (0: the page's first layout)."""
    if n and n % 10:
        return dash.no_update, dash.no_update
    try:
        listing = BenchStore(c.store().client).listing()
    except InfluxError:
        return dash.no_update, dash.no_update      # the table's callback shows the banner
    options = [{"label": f" {r.label} · {r.run} ", "value": r.run} for r in listing[:PICK_RUNS]]
    return options, (None if options else _HIDDEN)


@callback(Output(RUNS_PICK_LINK, "href"), Input(RUNS_PICK, "value"), prevent_initial_call=True)
def pick_link(names):
    """Point the compare link at the picked runs (the layout's link is already the empty pick's)."""
    return "/compare?" + urlencode({"runs": ",".join(names or [])}) if names else "/compare"

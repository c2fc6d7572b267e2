"""Runs page: every run, live or finished, with its status, timing, throughput, p99 and the
alert rules firing on it (a rule without a job fires on every run)."""
from __future__ import annotations

from datetime import datetime, timezone
from urllib.parse import quote

import dash
from dash import Input, Output, callback, dcc, html
from flask import current_app

from collector.influx import InfluxError

from metrics_ui import alerts_banner
from metrics_ui import components as c
from metrics_ui.data import RunInfo

dash.register_page(__name__, path="/", title="Runs · Market Spread metrics", name="Runs")

RUNS_TABLE = "runs-table"
RUNS_BANNER = "runs-banner"
RUNS_INTERVAL = "runs-interval"
# "\n": where a long header breaks (th is white-space: pre-line), so the table fits a 1280-px window
RUNS_HEADER = ("run", "status", "start (UTC)", "duration", "events", "throughput\n(events/s, last min)",
               "p99 start-to-end\n(last min)", "backpressure", "alerts firing")


def layout(**_query) -> html.Div:
    """Return the runs page (data arrives with the first interval tick)."""
    return html.Div([
        html.Div([html.H2("Runs"), dcc.Link("compare performance-test runs", href="/compare", id="runs-compare")],
                 className="page-head"),
        html.Div(id=RUNS_BANNER),
        html.Div(c.table(RUNS_HEADER, [], empty="loading…"), id=RUNS_TABLE),
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


def _row(r: RunInfo, firing: list[str]) -> list:
    start = datetime.fromtimestamp(r.first_ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return [dcc.Link(r.run, href=f"/run/{quote(r.run, safe='')}"),
            html.Span(r.status, className=f"status status-{r.status}"), start,
            html.Span(c.fmt_duration(r.duration_s), title=f"{r.duration_s:,.0f} s"),
            f"{r.events:,}", c.fmt_rate(r.throughput_eps), c.fmt_latency(r.p99_ns),
            html.Span(r.backpressure or "—", className=f"bp bp-{(r.backpressure or 'none').lower()}"),
            dcc.Link(", ".join(firing), href="/alerts", className="alert-state alert-firing") if firing else "—"]


@callback(Output(RUNS_TABLE, "children"), Output(RUNS_BANNER, "children"), Input(RUNS_INTERVAL, "n_intervals"))
def refresh_runs(_n):
    """Reload the runs table."""
    try:
        runs = c.store().runs(c.now_ns())
    except InfluxError as e:
        return dash.no_update, c.influx_error_banner(e)
    firing = _firing_by_run(runs)
    return c.table(RUNS_HEADER, [_row(r, firing.get(r.run, [])) for r in runs],
                   empty="no runs yet: start a job with metrics on"), None

"""Job page: one run's pipelines, workers, steps and backpressure over the chosen range, live while it runs."""
from __future__ import annotations

from urllib.parse import quote, unquote

import dash
from dash import Input, Output, State, callback, dcc, html
from flask import current_app

from collector.influx import InfluxError

from metrics_ui import components as c
from metrics_ui import figures
from metrics_ui.data import BackpressureView
from metrics_ui.ranges import NS, TimeRange, check_name
from metrics_ui.resolution import bucket_s

dash.register_page(__name__, path_template="/run/<run_id>", title="Run · Market Spread metrics", name="Run")

JOB_RUN = "job-run"
JOB_RANGE = "job"                  # range picker prefix: job-range, job-from-date, ...
JOB_TITLE = "job-title"
JOB_BANNER = "job-banner"
JOB_SUMMARY = "job-summary"
JOB_THROUGHPUT = "job-throughput"
JOB_PERCENTILES = "job-percentiles"
JOB_STEPS = "job-steps"
JOB_PIPELINES = "job-pipelines"
JOB_WORKERS = "job-workers"
JOB_INTERVAL = "job-interval"
JOB_BP = "job-backpressure"
JOB_BP_BUSY = "job-bp-busy"
JOB_BP_BACKLOG = "job-bp-backlog"
_BUSY_TITLE = "Busy and backpressured share per step"
_BACKLOG_TITLE = "Backlog"
#: How far past a finished run's last `latency` point its backpressure panel reads: the ingress
#: and the job write their last figures (the backlog drained to 0) a few seconds after it.
BP_GRACE_NS = 15 * NS


def layout(run_id: str | None = None, **_query) -> html.Div:
    """Return the job page for `run_id` (data arrives with the first interval tick)."""
    run = unquote(run_id or "")
    return html.Div([
        dcc.Store(id=JOB_RUN, data=run),
        html.Div([dcc.Link("← runs", href="/"), html.H2(["Run ", html.Code(run)]),
                  html.Span(id=JOB_TITLE, className="status")], className="page-head"),
        c.range_picker(JOB_RANGE),
        html.Div(id=JOB_BANNER),
        html.P(id=JOB_SUMMARY, className="summary"),
        html.Div([dcc.Graph(id=JOB_THROUGHPUT, figure=figures.empty_figure("Throughput", "loading…")),
                  dcc.Graph(id=JOB_PERCENTILES, figure=figures.empty_figure("Start-to-end latency", "loading…"))],
                 className="grid2"),
        html.H3("Steps"), html.Div(id=JOB_STEPS),
        html.H3("Backpressure"), html.Div(id=JOB_BP),
        html.Div([dcc.Graph(id=JOB_BP_BUSY, figure=figures.empty_figure(_BUSY_TITLE, "loading…")),
                  dcc.Graph(id=JOB_BP_BACKLOG, figure=figures.empty_figure(_BACKLOG_TITLE, "loading…"))],
                 className="grid2"),
        html.H3("Pipelines (start-to-end)"), html.Div(id=JOB_PIPELINES),
        html.H3("Workers"), html.Div(id=JOB_WORKERS),
        dcc.Interval(id=JOB_INTERVAL, interval=current_app.config["MS_UI"].refresh_ms, n_intervals=0),
    ])


@callback(Output(JOB_TITLE, "children"), Output(JOB_TITLE, "className"), Output(JOB_SUMMARY, "children"),
          Output(JOB_THROUGHPUT, "figure"), Output(JOB_PERCENTILES, "figure"),
          Output(JOB_STEPS, "children"), Output(JOB_PIPELINES, "children"), Output(JOB_WORKERS, "children"),
          Output(JOB_BP, "children"), Output(JOB_BP_BUSY, "figure"), Output(JOB_BP_BACKLOG, "figure"),
          Output(JOB_BANNER, "children"), Output(JOB_INTERVAL, "disabled"),
          Input(JOB_INTERVAL, "n_intervals"), *c.range_inputs(JOB_RANGE), State(JOB_RUN, "data"))
def refresh_job(_n, choice, from_date, from_time, to_date, to_time, run):
    """Reload the job page's figures and tables for the chosen range."""
    keep = [dash.no_update] * 11
    try:
        check_name(run, "run id")
    except ValueError as e:
        empty = c.table(c.STATS_HEADER, [], empty="no such run")
        return ("bad run id", "status", "", figures.empty_figure("Throughput", "no such run"),
                figures.empty_figure("Start-to-end latency", "no such run"), empty, empty, empty,
                *_backpressure_empty("no such run"), c.warning_banner(str(e)), True)
    try:
        store, now = c.store(), c.now_ns()
        info = store.run(run, now)
        if info is None:
            empty = c.table(c.STATS_HEADER, [])
            return ("no data yet", "status", "no data yet for this run",
                    figures.empty_figure("Throughput"), figures.empty_figure("Start-to-end latency"),
                    empty, empty, empty, *_backpressure_empty(c.BP_EMPTY), None, False)
        try:
            rng = c.picked_range(choice, info.anchor_ns(now), from_date, from_time, to_date, to_time)
        except ValueError as e:
            return keep + [c.warning_banner(str(e)), not info.live]
        interval = bucket_s(rng)
        view = store.job_view(run, rng, interval)
        bp = store.backpressure_view(run, _backpressure_range(rng, info.anchor_ns(now), info.live), interval)
    except InfluxError as e:
        return keep + [c.influx_error_banner(e), False]
    step_rows = c.stats_rows(view.steps)
    for row in step_rows:
        row[0] = dcc.Link(row[0], href=f"/step/{quote(run, safe='')}/{quote(row[0], safe='')}")
    summary = (f"{view.events:,} events start-to-end in the range · {info.events:,} in the whole run · "
               f"{'refreshing every second' if info.live else 'finished'}")
    return (info.status, f"status status-{info.status}", summary,
            figures.throughput_figure(view.throughput, "Throughput (start-to-end, per pipeline)"),
            figures.percentiles_over_time_figure(view.percentiles, "Start-to-end latency (max over workers)"),
            c.table(c.STATS_HEADER, step_rows, JOB_STEPS + "-table"),
            c.table(c.STATS_HEADER, c.stats_rows(view.pipelines), JOB_PIPELINES + "-table"),
            c.table(c.STATS_HEADER, c.stats_rows(view.workers), JOB_WORKERS + "-table"),
            *_backpressure_panel(bp), None, not info.live)


def _backpressure_range(rng: TimeRange, anchor: int, live: bool) -> TimeRange:
    """Return the range the backpressure panel reads: to the run's true end when `rng` ends where the run does.

    Only this panel reads past the range: the latency tables keep counting the events in `rng`.
    """
    if live or rng.end_ns != anchor:
        return rng
    return TimeRange(rng.start_ns, rng.end_ns + BP_GRACE_NS)


def _backpressure_panel(bp: BackpressureView) -> tuple:
    """Return the backpressure table and its two charts (the empty state when none was written)."""
    if not bp.latest and not bp.backlog:
        return _backpressure_empty(c.BP_EMPTY)
    busy = figures.busy_share_figure(bp.busy, bp.backpressured, _BUSY_TITLE)
    backlog = figures.backlog_figure(bp.backlog, _BACKLOG_TITLE)
    height = max(busy.layout.height, backlog.layout.height)     # side by side: equally tall
    return (c.table(c.BP_HEADER, c.backpressure_rows(bp.latest), JOB_BP + "-table", empty=c.BP_EMPTY),
            busy.update_layout(height=height), backlog.update_layout(height=height))


def _backpressure_empty(message: str) -> tuple:
    """Return the backpressure table and charts showing `message` instead of figures."""
    return (c.table(c.BP_HEADER, [], JOB_BP + "-table", empty=message),
            figures.empty_figure(_BUSY_TITLE, message), figures.empty_figure(_BACKLOG_TITLE, message))

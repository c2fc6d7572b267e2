"""Step page: one step's latency distribution (Wallaroo bins, full percentile curve), throughput, workers.

Its bins are Wallaroo's up to 1 s, then minutes and up to an hour as far as the step's slowest
events reach (`collector.bins.step_bins`): a Spark job's event-time latencies are seconds to minutes.

Like the job page, its range and refresh rate live in the address, a zoom of the throughput
chart's time axis becomes the range, charts keep the user's view across live updates, and
a tick sends only the outputs that changed (the throughput chart as a Patch of its new points).
"""
from __future__ import annotations

from urllib.parse import unquote

import dash
from dash import Input, Output, State, callback, clientside_callback, ctx, dcc, html

from collector.bins import format_ns
from collector.influx import InfluxError

from metrics_ui import components as c
from metrics_ui import figures
from metrics_ui import run_links as links
from metrics_ui.export import export_url
from collector.query.ranges import RANGE_CUSTOM, check_name, check_worker
from collector.query.resolution import bucket_s

dash.register_page(__name__, path_template="/step/<run_id>/<step>", title=f"Step · {c.PRODUCT}",
                   name="Step")

STEP_KEY = "step-key"
STEP_RANGE = "step"               # range picker prefix: step-range, step-from-date, ...
STEP_PIPELINE = "step-pipeline"
STEP_WORKER = "step-worker"
STEP_BANNER = "step-banner"
STEP_SUMMARY = "step-summary"
STEP_BINS = "step-bins"
STEP_CURVE = "step-curve"
STEP_THROUGHPUT = "step-throughput"
STEP_PERCENTILES = "step-percentiles"
STEP_WORKERS = "step-workers"
STEP_CSV = "step-csv"
STEP_HGRM = "step-hgrm"
STEP_INTERVAL = "step-interval"
STEP_REFRESH = "step-refresh"
STEP_URL = "step-url"
STEP_URL_ERROR = "step-url-error"       # what was wrong with the address' range, said while the page is open
STEP_LIVE = "step-live"
STEP_DIGESTS = "step-digests"
PERCENTILE_HEADER = ("p50", "p95", "p99", "p99.9", "p99.99", "max")


def layout(run_id: str | None = None, step: str | None = None, **query) -> html.Div:
    """Return the step page with the range and refresh rate of its address, its figures filled.

    As on the job page, the page arrives with its figures (the callback's own function builds
    them here), so its charts are drawn once, without a round of callbacks first; the
    callback answers later ticks, a picked range or filter, a zoom.
    """
    run, step = unquote(run_id or ""), unquote(step or "")
    q = c.page_query(query)
    spark_run, run_error = links.asked_run_id(query)
    key = {"run": run, "step": step, "run_id": spark_run}
    first = _step_outputs(key, q.choice, q.from_date, q.from_time, q.to_date, q.to_time,
                          None, None, {}, q.error or run_error, tick=False)
    defaults = ("", None, *_empty_charts(figures.NO_DATA), None, export_url(run, step, "csv", run_id=spark_run),
                export_url(run, step, "hgrm", run_id=spark_run), [], [], None, False, {})
    (summary, percentiles, bins, curve, throughput, workers, csv, hgrm, pipelines, worker_options, banner, live,
     digests) = (d if v is dash.no_update else v for v, d in zip(first, defaults))
    disabled, interval = c.refresh_state(q.refresh, live)
    return html.Div([
        dcc.Store(id=STEP_KEY, data=key), dcc.Store(id=STEP_LIVE, data=live),
        dcc.Store(id=STEP_URL), dcc.Store(id=STEP_DIGESTS, data=digests),
        dcc.Store(id=STEP_URL_ERROR, data=q.error or run_error),
        html.Div([dcc.Link("← run", href=links.run_url(run, spark_run)),
                  html.H2(["Step ", html.Code(step), " of run ", html.Code(run)])], className="page-head"),
        c.page_controls(STEP_RANGE, q),
        html.Div([dcc.Dropdown(id=STEP_PIPELINE, options=pipelines, placeholder="all pipelines", clearable=True,
                               className="filter"),
                  dcc.Dropdown(id=STEP_WORKER, options=worker_options, placeholder="all workers", clearable=True,
                               className="filter")], className="filters"),
        html.Div(banner, id=STEP_BANNER),
        html.Div([html.Span(summary, id=STEP_SUMMARY, className="summary"),
                  html.Span([" Download the histogram of this range: ",
                             html.A("CSV", id=STEP_CSV, href=csv), " · ",
                             html.A(".hgrm", id=STEP_HGRM, href=hgrm)],
                            className="export")]),
        html.Div(percentiles, id=STEP_PERCENTILES),
        html.Div([dcc.Graph(id=STEP_BINS, figure=bins), dcc.Graph(id=STEP_CURVE, figure=curve)],
                 className="grid2"),
        dcc.Graph(id=STEP_THROUGHPUT, figure=throughput),
        html.H3("Workers"), html.Div(workers, id=STEP_WORKERS),
        dcc.Interval(id=STEP_INTERVAL, interval=interval, disabled=disabled, n_intervals=0),
    ])


def _empty_charts(message: str) -> tuple:
    """Return the page's three charts (bins, percentile curve, throughput) showing `message` instead of data."""
    return (figures.empty_figure("Percent of events by latency bin", message),
            figures.empty_figure("Latency by percentile", message), figures.empty_figure("Throughput", message))


@callback(Output(STEP_SUMMARY, "children"), Output(STEP_PERCENTILES, "children"), Output(STEP_BINS, "figure"),
          Output(STEP_CURVE, "figure"), Output(STEP_THROUGHPUT, "figure"), Output(STEP_WORKERS, "children"),
          Output(STEP_CSV, "href"), Output(STEP_HGRM, "href"),
          Output(STEP_PIPELINE, "options"), Output(STEP_WORKER, "options"),
          Output(STEP_BANNER, "children"), Output(STEP_LIVE, "data"), Output(STEP_DIGESTS, "data"),
          Input(STEP_INTERVAL, "n_intervals"), *c.range_inputs(STEP_RANGE),
          Input(STEP_PIPELINE, "value"), Input(STEP_WORKER, "value"), State(STEP_KEY, "data"),
          State(STEP_DIGESTS, "data"), State(STEP_URL_ERROR, "data"), prevent_initial_call=True)
def refresh_step(_n, choice, from_date, from_time, to_date, to_time, pipeline, worker, key, digests, url_error=None):
    """Reload the step page for the chosen range, pipeline and worker."""
    return _step_outputs(key, choice, from_date, from_time, to_date, to_time, pipeline, worker, digests, url_error,
                         tick=ctx.triggered_id == STEP_INTERVAL)


def _step_outputs(key, choice, from_date, from_time, to_date, to_time, pipeline, worker, digests, url_error,
                  tick: bool) -> tuple:
    """Return `refresh_step`'s outputs (the page's first layout has them too); `tick`: charts may go as a Patch."""
    run, step = (key.get("run"), key.get("step")) if isinstance(key, dict) else (None, None)
    run_id = key.get("run_id") if isinstance(key, dict) and isinstance(key.get("run_id"), str) else None
    keep = [dash.no_update] * 10
    try:
        check_name(run, "run id")
        check_name(step, "step")
        if run_id:
            check_name(run_id, "run id")
        if pipeline:
            check_name(pipeline, "pipeline")
        if worker:
            check_worker(worker)
    except ValueError as e:
        none = "no such run or step"
        return (none, None, *_empty_charts(none), c.table(c.STATS_HEADER, [], empty=none),
                dash.no_update, dash.no_update, [], [], c.warning_banner(str(e)), False, {})
    try:
        store, now = c.store(), c.now_ns()
        info = store.run(run, now, run_id)
        if info is None:
            return (links.no_such_run(run, run_id) if run_id else "no data yet for this run", None, *_empty_charts(figures.NO_DATA),
                    c.table(c.STATS_HEADER, []), dash.no_update, dash.no_update, [], [], None, True, {})
        try:
            rng = c.picked_range(choice, info.anchor_ns(now), from_date, from_time, to_date, to_time,
                                 start_ns=info.first_ns)
        except ValueError as e:
            return keep + [c.warning_banner(str(e)), info.live, dash.no_update]
        pipelines, workers = store.step_filters(run, step)
        run_scope = info.scope
        view = store.step_view(run_scope, step, rng, bucket_s(rng), pipeline=pipeline or None, worker=worker or None)
        markers = store.markers(run_scope, rng)
    except InfluxError as e:
        if digests:         # what the page shows stays, under the banner, until InfluxDB answers again
            return keep + [c.influx_error_banner(e), True, dash.no_update]
        # the first load: nothing drawn to keep, so every chart and table says why it is empty
        return ("", None, *_empty_charts(c.UNREADABLE), c.table(c.STATS_HEADER, [], empty=c.UNREADABLE),
                dash.no_update, dash.no_update, [], [], c.influx_error_banner(e), True, {})
    p = view.percentiles
    pct_table = c.table(PERCENTILE_HEADER, [[format_ns(p[q]) for q in (50.0, 95.0, 99.0, 99.9, 99.99)]
                                            + [format_ns(view.hist.max)]] if view.events else [],
                        STEP_PERCENTILES + "-table", empty="no data in the range")
    scope = " · ".join(x for x in (pipeline, worker) if x)
    summary = (f"{view.events:,} events in the range" + (f" ({scope})" if scope else "") if view.events
               else "no data yet for this run in the range")
    revision = f"{run_scope.key}|{step}"   # a new range comes with its own x range; hidden series and y zooms stay
    frame = (c.shown_range(rng, info.first_ns, rng.end_ns), revision, markers)
    marks = p if view.events else None
    changed, digests = c.only_changed({
        "summary": c.as_is(summary), "percentiles": (p, lambda: pct_table),
        "bins": (view.bins, lambda: figures.bins_figure(view.bins).update_layout(uirevision=revision)),
        "curve": ((view.events, view.hist.max, p), lambda: figures.percentile_curve_figure(
            view.hist, marks).update_layout(uirevision=revision)),
        "throughput": ((view.throughput, frame), lambda: figures.time_axes(
            figures.throughput_figure(view.throughput, f"Throughput of {step} (per pipeline)"), *frame)),
        "workers": (view.workers, lambda: c.table(c.STATS_HEADER, c.stats_rows(view.workers), STEP_WORKERS + "-table")),
        "csv": c.as_is(export_url(run, step, "csv", rng, worker or None, pipeline or None, info.run_id)),
        "hgrm": c.as_is(export_url(run, step, "hgrm", rng, worker or None, pipeline or None, info.run_id)),
        "pipelines": c.as_is([{"label": x, "value": x} for x in pipelines]),
        "workers_filter": c.as_is([{"label": x, "value": x} for x in workers])}, digests,
        patch=("throughput",), scope="step", tick=tick)
    return (*changed, c.warning_banner(url_error) if isinstance(url_error, str) and url_error else None,
            info.live, digests)


@callback(Output(STEP_INTERVAL, "disabled"), Output(STEP_INTERVAL, "interval"),
          Input(STEP_LIVE, "data"), Input(STEP_REFRESH, "value"), prevent_initial_call=True)
def pace_step(live, refresh):
    """Tick only while the run is live and the user has not paused, at the chosen rate."""
    return c.refresh_state(refresh, live)


@callback(Output(f"{STEP_RANGE}-range", "value"), Output(f"{STEP_RANGE}-from-date", "date"),
          Output(f"{STEP_RANGE}-from-time", "value"), Output(f"{STEP_RANGE}-to-date", "date"),
          Output(f"{STEP_RANGE}-to-time", "value"), Input(STEP_THROUGHPUT, "relayoutData"),
          prevent_initial_call=True)
def zoom_step(relayout):
    """Make a zoom of the throughput chart's time axis the page's range (and the address')."""
    picked = c.zoom_to_range(relayout)
    return (dash.no_update,) * 5 if picked is None else (RANGE_CUSTOM, *picked)


clientside_callback(c.URL_SYNC_JS, Output(STEP_URL, "data"), *c.url_sync_inputs(STEP_RANGE))

"""Job page: one run of any streaming query over one range, opening on what a Spark user checks first.

It opens on the query's batches against the trigger with their input rows, and its input rate
against its processing rate with the rows behind (open rows of charts); then its latency steps,
backpressure, batch phases, state, executors and ingress. What a run shows follows from what
it declares and the data it has, never from which job it is: a part without data is left out
(no latency charts for a query that records no steps, no state charts without state).

The range, refresh rate and open rows of charts live in the page's address (`?range=1h`,
`?range=custom&from=...&to=...`, `&refresh=5`, `&open=sources,state`), so a view can be bookmarked
and shared. Throughput and latency are drawn for a run with steps; every other chart is in a row
that folds (`chart_rows`), open by default only where a run is read first (`default_open`). Zooming the
time axis of any chart makes that the page's range. The page arrives with its figures (`layout`
runs the callbacks' functions).
Then one callback resolves the range on each tick and reads the latency figures; the backpressure,
Spark and ingress panels follow from its window in callbacks of their own, and every panel sends
only the outputs that changed since its last answer: on a refresh tick a chart goes as a Patch of
its new points (and the old ones its window dropped), whole when the user picks a range. Charts
keep the user's zoom and hidden series across live updates (`uirevision`); the latency charts'
whole figures also carry the series hidden from their legends (`JOB_HIDDEN`, `remember_hidden`).
"""
from __future__ import annotations

from urllib.parse import unquote

import dash
from dash import Input, Output, State, callback, clientside_callback, ctx, dcc, html

from collector.influx import InfluxError

from metrics_ui import chart_rows as rows
from metrics_ui import components as c
from metrics_ui import figures
from metrics_ui import run_end
from metrics_ui import run_links as links
from metrics_ui import spark_components as sc
from metrics_ui import status_panels as sp
from collector.query.panels import Marker
from collector.query.series import START_TO_END
from collector.query.ranges import RANGE_CUSTOM, TimeRange, check_name
from collector.query.run_groups import pick_run, query_runs
from collector.query.series import RunInfo
from collector.units import NS
from collector.query.resolution import bucket_s

dash.register_page(__name__, path_template="/run/<run_id>", title=f"Run · {c.PRODUCT}", name="Run")

JOB_RUN = "job-run"
JOB_RANGE = "job"                  # range picker prefix: job-range, job-from-date, ..., job-refresh
JOB_REFRESH = "job-refresh"
JOB_URL = "job-url"
JOB_URL_ERROR = "job-url-error"       # what was wrong with the address' range, said while the page is open
JOB_LIVE = "job-live"
JOB_WINDOW = "job-window"
JOB_DIGESTS = "job-digests"
JOB_HIDDEN = "job-hidden"            # series the user hid from each chart's legend, by name
JOB_TITLE = "job-title"
JOB_BANNER = "job-banner"
JOB_SUMMARY = "job-summary"
JOB_THROUGHPUT = "job-throughput"
JOB_PERCENTILES = "job-percentiles"
JOB_STEPS = "job-steps"
JOB_PIPELINES = "job-pipelines"
JOB_WORKERS = "job-workers"
JOB_INTERVAL = "job-interval"
JOB_QUERY_DIGESTS = "job-query-digests"
JOB_ROWS_URL = "job-rows-url"
JOB_LATENCY = "job-latency"           # the latency charts, and below the tables through the last step:
JOB_STEP_TABLES = "job-step-tables"   # hidden for a query that records no steps
JOB_STEPS_BOX = "job-steps-box"       # the steps' table: hidden for a query that records no steps
JOB_BP_BOX = "job-bp-box"             # backpressure: hidden for a run that wrote none
#: The page's rows of charts in page order, by their name in the address (`open=sources,state`).
ROWS = {"batches": sc.QUERY_BATCHES, "sources": sc.QUERY_SOURCES, "backpressure": sp.JOB_BP_ROW,
        "spark": sp.JOB_SPARK_ROW, "state": sc.QUERY_STATE, "executors": sc.QUERY_EXECUTORS,
        "ingress": sp.JOB_INGRESS_ROW}
#: The charts over time always drawn; every other one is in a row. They share the page's range, and a
#: zoom on any of them sets it.
TIME_GRAPHS = (JOB_THROUGHPUT, JOB_PERCENTILES)
ROW_GRAPHS = (sp.JOB_BP_BUSY, sp.JOB_BP_BACKLOG, sp.JOB_BATCHES, sp.JOB_BAD, sp.JOB_MUTED, *sc.SECTION_GRAPHS)
#: How far past a finished run's last `latency` point its status panels (backpressure, Spark
#: batches, ingress) read: the ingress and the job write their last figures (the backlog
#: drained to 0, the final counters) a few seconds after it.
STATUS_GRACE_NS = 15 * NS


def layout(run_id: str | None = None, **query) -> html.Div:
    """Return the job page for `run_id` with the range, refresh rate and open rows of its address, filled.

    The callbacks' own functions fill it, so the browser draws each chart once, with no round of
    callbacks before it (the range, then the panels that follow): they answer ticks, picks, zooms.
    Only the open rows' charts are made (`default_open`, unless the address names them).
    """
    run = unquote(run_id or "")
    q = c.page_query(query)
    spark_run, run_error = links.asked_run_id(query)
    try:
        asked, url_error = rows.parse_open(query.get("open"), tuple(ROWS)), q.error or run_error
    except ValueError as e:
        asked, url_error = None, q.error or run_error or str(e)
    runs = _job_runs(run)
    main = _filled(_job_outputs(run, q.choice, q.from_date, q.from_time, q.to_date, q.to_time, {}, url_error, {},
                                tick=False, run_id=spark_run, runs=runs),
                   ("", "status", "", figures.empty_figure("Throughput"), figures.empty_figure("Start-to-end latency"),
                    None, None, None, [], None, False, None, {}))
    (title, title_class, summary, throughput, percentiles, steps, pipelines, workers, ended, banner, live, window,
     digests) = main
    opened = asked if asked is not None else default_open(window)
    is_open = {row: name in opened for name, row in ROWS.items()}
    bp = _filled(sp.backpressure_outputs(window, run, {}, is_open[sp.JOB_BP_ROW]),
                 sp.backpressure_empty(c.UNREADABLE)[:2] + ([], {}))
    spark = _filled(sp.spark_outputs(window, run, {}, is_open[sp.JOB_SPARK_ROW], is_open[sp.JOB_INGRESS_ROW]),
                    ([], "", [], "", {}, None, None))
    sections = _filled(_query_outputs(window, run, {}, *(is_open[s] for s in sc.SECTIONS)),
                       (sc.HIDDEN, None, [], sc.HIDDEN) * len(sc.SECTIONS) + ({},))
    first = {sc.QUERY_BATCHES, sc.QUERY_SOURCES}      # what a Spark user checks first, above the steps
    section = {s: sc.section_layout(s, *sections[4 * i:4 * i + 4], is_open=is_open[s])
               for i, s in enumerate(sc.SECTIONS)}
    disabled, interval = c.refresh_state(q.refresh, live)
    return html.Div([
        dcc.Store(id=JOB_RUN, data=run), dcc.Store(id=links.JOB_RUN_ID, data=spark_run),
        dcc.Store(id=JOB_LIVE, data=live), dcc.Store(id=JOB_WINDOW, data=window),
        dcc.Store(id=JOB_URL), dcc.Store(id=JOB_DIGESTS, data=digests), dcc.Store(id=JOB_HIDDEN, data={}),
        dcc.Store(id=JOB_URL_ERROR, data=url_error), dcc.Store(id=sp.JOB_BP + "-digests", data=bp[3]),
        dcc.Store(id=sp.JOB_BATCHES + "-digests", data=spark[4]), dcc.Store(id=JOB_QUERY_DIGESTS, data=sections[-1]),
        dcc.Store(id=JOB_ROWS_URL),
        html.Div([dcc.Link("← runs", href="/"), html.H2(["Run ", html.Code(run)]),
                  html.Span(title, id=JOB_TITLE, className=title_class)], className="page-head"),
        html.Div(_runs_head(spark_run, runs), id=links.JOB_QUERY_RUNS),
        html.Div(ended, id=run_end.JOB_END),
        c.page_controls(JOB_RANGE, q),
        html.Div(banner, id=JOB_BANNER),
        html.P(summary, id=JOB_SUMMARY, className="summary"),
        *(section[s] for s in sc.SECTIONS if s in first),
        html.Div([dcc.Graph(id=JOB_THROUGHPUT, figure=throughput), dcc.Graph(id=JOB_PERCENTILES, figure=percentiles)],
                 className="grid2", id=JOB_LATENCY, style=_step_style(window)),
        html.Div([html.H3("Steps"), html.Div(steps, id=JOB_STEPS)], id=JOB_STEPS_BOX, style=_step_style(window)),
        html.Div([html.H3("Backpressure"), html.Div(bp[1], id=sp.JOB_GRAPH, className="job-graph"),
                  html.Div(bp[0], id=sp.JOB_BP), html.P(c.BUSY_NOTE, className="note", id=sp.JOB_BP + "-note"),
                  rows.row_layout(sp.JOB_BP_ROW, "Busy share and backlog per step", is_open[sp.JOB_BP_ROW], bp[2],
                                  grid=True)],
                 id=JOB_BP_BOX, style=_bp_style(window)),
        html.Div([html.H3("Spark micro-batches"), html.P(spark[1], id=sp.JOB_BATCH_SUMMARY, className="summary"),
                  rows.row_layout(sp.JOB_SPARK_ROW, "Batch phases and the slowest batch", is_open[sp.JOB_SPARK_ROW],
                                  spark[0])],
                 id=sp.JOB_SPARK_BOX, style=spark[6]),
        *(section[s] for s in sc.SECTIONS if s not in first),
        html.Div([html.H3("Ingress"), html.P(spark[3], id=sp.JOB_INGRESS_SUMMARY, className="summary"),
                  rows.row_layout(sp.JOB_INGRESS_ROW, "Bad frames and muted time", is_open[sp.JOB_INGRESS_ROW], spark[2],
                                  grid=True)],
                 id=sp.JOB_INGRESS_BOX, style=spark[5]),
        html.Div([html.H3("Pipelines"), html.Div(pipelines, id=JOB_PIPELINES),
                  html.H3("Workers"), html.Div(workers, id=JOB_WORKERS)], id=JOB_STEP_TABLES, style=_step_style(window)),
        dcc.Interval(id=JOB_INTERVAL, interval=interval, disabled=disabled, n_intervals=0),
    ])


def default_open(window: dict | None) -> frozenset[str]:
    """Return the rows open when the address names none: those that say whether the run keeps up.

    For any run its batches against the trigger and its input rate against its processing
    rate (Spark's own backpressure); and the busy share and backlog per step of a run that
    records steps and writes their backpressure (Wallaroo's). The rest wait for a click.
    """
    steps_bp = bool(window and window.get("backpressure") and not window.get("stepless"))
    return frozenset({"batches", "sources"} | ({"backpressure"} if steps_bp else set()))


def _step_style(window: dict | None) -> dict | None:
    """Return the style of the charts and tables of the steps: hidden for a query with none.

    Such a query (no `record_latency` or `timed_step`) shows what Spark reports instead: its
    batches against the trigger and its rows per source, open in their rows.
    """
    return sc.HIDDEN if window and window.get("stepless") else None


def _bp_style(window: dict | None) -> dict | None:
    """Return the style of the backpressure panel: hidden for a run known to have written no backpressure
    (shown, with its message, when the run is unknown or InfluxDB unreadable)."""
    return sc.HIDDEN if window and "empty" not in window and not window.get("backpressure") else None


def _filled(outputs: tuple, defaults: tuple) -> tuple:
    """Return a panel's outputs for the first layout, `defaults` where it sent `no_update`."""
    return tuple(d if v is dash.no_update else v for v, d in zip(outputs, defaults))


def _window(rng: TimeRange, interval: int, revision: str, markers: list[Marker], status_end: int,
            shown: TimeRange, tick: bool = False, info: RunInfo | None = None) -> dict:
    """Return what the panels need of the main callback's range and run, as the JOB_WINDOW store holds it.

    `tick` says the range came from a refresh (not the user's pick), so charts may go as a Patch.
    `steps` is the run's step order, `stepless` whether it records none, `backpressure` whether it
    wrote any, `app` the Spark application whose executors it ran on.
    """
    return {"start": rng.start_ns, "end": rng.end_ns, "interval": interval, "revision": revision,
            "status_end": status_end, "markers": [[m.time_ns, m.kind, m.text] for m in markers],
            "shown": [shown.start_ns, shown.end_ns], "tick": tick,
            "steps": list(info.steps) if info else [], "app": info.app_id if info else None,
            "stepless": bool(info and _stepless(info)), "backpressure": bool(info and info.backpressure is not None),
            "rates": list(_rate_span(rng.start_ns, status_end, info)),
            "scope": sp.scope_data(info.scope) if info else None}


def _rate_span(start_ns: int, end_ns: int, info: RunInfo | None) -> TimeRange:
    """Return what the sources' rates are over: the range read, from the run's start to its newest batch's end."""
    if info is None:
        return TimeRange(start_ns, end_ns)
    start = max(start_ns, info.first_ns)
    end = min(end_ns, info.last_batch_end_ns) if info.last_batch_end_ns is not None else end_ns
    return TimeRange(start, end) if end > start else TimeRange(start_ns, end_ns)


def _stepless(info: RunInfo) -> bool:
    """Return whether a run records no latency steps (no `record_latency`, `timed_step`)."""
    return info.last_step is None


def _unreadable(error: InfluxError) -> tuple:
    """Return the main callback's outputs when InfluxDB fails at the page's first load.

    Nothing is drawn yet to keep: every chart, table and panel says why it is empty,
    instead of "loading…" (or the panels' "no data yet", a claim about the run).
    """
    empty = c.table(c.STATS_HEADER, [], empty=c.UNREADABLE)
    return ("", "status", "", figures.empty_figure("Throughput", c.UNREADABLE),
            figures.empty_figure("Start-to-end latency", c.UNREADABLE), empty, empty, empty, [],
            c.influx_error_banner(error), True, {"empty": c.UNREADABLE}, {})


@callback(Output(JOB_TITLE, "children"), Output(JOB_TITLE, "className"), Output(JOB_SUMMARY, "children"),
          Output(JOB_THROUGHPUT, "figure"), Output(JOB_PERCENTILES, "figure"),
          Output(JOB_STEPS, "children"), Output(JOB_PIPELINES, "children"), Output(JOB_WORKERS, "children"),
          Output(run_end.JOB_END, "children"), Output(JOB_BANNER, "children"), Output(JOB_LIVE, "data"), Output(JOB_WINDOW, "data"),
          Output(JOB_DIGESTS, "data"),
          Input(JOB_INTERVAL, "n_intervals"), *c.range_inputs(JOB_RANGE), State(JOB_RUN, "data"),
          State(JOB_DIGESTS, "data"), State(JOB_URL_ERROR, "data"), State(JOB_HIDDEN, "data"),
          State(links.JOB_RUN_ID, "data"), prevent_initial_call=True)
def refresh_job(_n, choice, from_date, from_time, to_date, to_time, run, digests, url_error=None, hidden=None,
                run_id=None):
    """Resolve the range, reload the latency figures and tables, and hand the range to the other panels."""
    tick = ctx.triggered_id == JOB_INTERVAL        # a refresh: charts send their new points only
    return _job_outputs(run, choice, from_date, from_time, to_date, to_time, digests, url_error, hidden, tick,
                        run_id if isinstance(run_id, str) and run_id else None)


def _job_runs(run: str) -> list[RunInfo] | None:
    """Return the job's runs for the page's first layout (None: a bad name or InfluxDB failing: the main
    outputs say so)."""
    try:
        check_name(run, "run id")
        return c.store().job_runs(run, c.now_ns())
    except (ValueError, InfluxError):
        return None


def _runs_head(run_id: str | None, runs: list[RunInfo] | None) -> list:
    """Return the head's run id and the list of the shown run's query's runs."""
    shown = pick_run(runs or [], run_id)
    return links.query_runs_panel(shown, query_runs(runs or [], shown) if shown is not None else [])


def _job_outputs(run, choice, from_date, from_time, to_date, to_time, digests, url_error, hidden, tick: bool,
                 run_id: str | None = None, runs: list[RunInfo] | None = None) -> tuple:
    """Return `refresh_job`'s outputs (the page's first layout has them too); `tick`: charts may go as a Patch.

    `run_id`: Spark's run the page shows (None: the job's newest); `runs`: the job's runs when already read.
    """
    keep = [dash.no_update] * 9
    try:
        check_name(run, "run id")
    except ValueError as e:
        empty = c.table(c.STATS_HEADER, [], empty="no such run")
        return ("bad run id", "status", "", figures.empty_figure("Throughput", "no such run"),
                figures.empty_figure("Start-to-end latency", "no such run"), empty, empty, empty, [],
                c.warning_banner(str(e)), False, None, {})
    try:
        store, now = c.store(), c.now_ns()
        info = pick_run(runs, run_id) if runs is not None else store.run(run, now, run_id)
        if info is None:
            empty = c.table(c.STATS_HEADER, [])
            return ("no data yet", "status", links.no_such_run(run, run_id) if run_id else "no data yet for this run",
                    figures.empty_figure("Throughput"), figures.empty_figure("Start-to-end latency"),
                    empty, empty, empty, [], None, not run_id, None, {})
        try:
            rng = c.picked_range(choice, info.anchor_ns(now), from_date, from_time, to_date, to_time,
                                 start_ns=info.first_ns)
        except ValueError as e:
            return keep + [c.warning_banner(str(e)), info.live, dash.no_update, dash.no_update]
        interval = bucket_s(rng)
        end_step = info.last_step or START_TO_END
        scope = info.scope
        view = store.job_view(scope, rng, interval, info.steps, end_step)
        markers = store.markers(scope, _status_range(rng, info.anchor_ns(now), info.live))
    except InfluxError as e:
        if digests:         # what the page shows stays, under the banner, until InfluxDB answers again
            return keep + [c.influx_error_banner(e), True, dash.no_update, dash.no_update]
        return _unreadable(e)
    revision = scope.key        # a new range comes with its own x range; hidden series and y zooms stay
    step_rows = c.stats_rows(view.steps)
    for row in step_rows:
        row[0] = dcc.Link(row[0], href=links.step_url(run, row[0], info.run_id))
    summary, throughput_title, latency_title = run_end.summary(info, view.events, end_step)
    no_steps = "no data yet for this run"
    status_end = _status_range(rng, info.anchor_ns(now), info.live).end_ns
    shown = c.shown_range(rng, info.first_ns, status_end)
    frame = (shown, revision, markers)
    changed, digests = c.only_changed({
        "title": c.as_is(info.status), "class": c.as_is(f"status status-{info.status}"), "summary": c.as_is(summary),
        "throughput": ((view.throughput, frame), lambda: figures.hide_series(figures.time_axes(
            figures.throughput_figure(view.throughput, throughput_title), *frame),
            (hidden or {}).get(JOB_THROUGHPUT, ()))),
        "percentiles": ((view.percentiles, frame), lambda: figures.hide_series(figures.time_axes(
            figures.percentiles_over_time_figure(view.percentiles, latency_title), *frame),
            (hidden or {}).get(JOB_PERCENTILES, ()))),
        "steps": (view.steps, lambda: c.table(c.STATS_HEADER, step_rows, JOB_STEPS + "-table", empty=no_steps)),
        "pipelines": ((view.pipelines, end_step), lambda: [
            html.P(START_TO_END if end_step == START_TO_END else f"through step {end_step}", className="summary",
                   id=JOB_PIPELINES + "-step"),
            c.table(c.STATS_HEADER, c.stats_rows(view.pipelines), JOB_PIPELINES + "-table")]),
        "workers": (view.workers, lambda: c.table(c.STATS_HEADER, c.stats_rows(view.workers), JOB_WORKERS + "-table")),
        "end": ((info.status, info.ended_ns, info.error, info.seen_ns if info.status == "lost" else None),
                lambda: run_end.end_panel(info)),
    }, digests, patch=("throughput", "percentiles"), scope="job", tick=tick)
    return (*changed, _url_banner(url_error), info.live,
            _window(rng, interval, revision, markers, status_end, shown, tick, info), digests)


@callback(Output(JOB_HIDDEN, "data"), Input(JOB_THROUGHPUT, "restyleData"), Input(JOB_PERCENTILES, "restyleData"),
          State(JOB_THROUGHPUT, "figure"), State(JOB_PERCENTILES, "figure"), State(JOB_HIDDEN, "data"),
          prevent_initial_call=True)
def remember_hidden(_throughput, _percentiles, throughput_fig, percentiles_fig, hidden):
    """Keep, by name, the series the user hid from a chart's legend, for the next whole figure to hide too.

    plotly.js keeps a legend click across a new figure with the same `uirevision`, but not
    always: two renders in quick succession (a live tick, then a picked range's whole
    figure) showed the series again.
    """
    graph = ctx.triggered_id
    fig = throughput_fig if graph == JOB_THROUGHPUT else percentiles_fig
    hidden = dict(hidden or {})
    hidden[graph] = figures.legend_hidden(ctx.triggered[0]["value"], fig, hidden.get(graph, ()))
    return hidden


def _section_view(store, section: str, run: str, window: dict):
    """Read one section's typed view for the page's window (None: an application with no id)."""
    rates = window.get("rates")
    return sc.read_section(store, section, sp.scope(window, run), sp.status_read(window), int(window["interval"]), window.get("app"),
                           TimeRange(int(rates[0]), int(rates[1])) if rates else None)


def _frame(window: dict) -> sc.Frame:
    """Return the charts' shared frame of the page's window."""
    rng, _, revision, markers = sp.unpack(window)
    return sc.Frame(TimeRange(*window.get("shown", rng)), revision, markers)


def _query_outputs(window, run, digests, *opens):
    """Reload the query's sources, batches against its trigger, stateful operators and executors for the range.

    A section without data is left out. Its charts are made here when its row is open (`opens`, in `sc.SECTIONS` order)
    and it has some, with their figures; their later figures come from the row's
    `chart_rows.figures_callback`, to the same mounted graphs.
    """
    if not window or "empty" in window:
        return (*[sc.HIDDEN, None, [], sc.HIDDEN] * len(sc.SECTIONS), {})
    frame = _frame(window)
    try:
        store = c.store()
        views = {section: _section_view(store, section, run, window) for section in sc.SECTIONS}
    except InfluxError:
        return (dash.no_update,) * (4 * len(sc.SECTIONS) + 1)
    parts = {}
    for section, is_open in zip(sc.SECTIONS, opens):
        view, built = views[section], sc.BUILDERS[section](views[section], frame)
        made = tuple(built.charts)                  # which charts the section has: made again only when it changes
        parts[f"{section}:style"] = c.as_is(None if built.body is not None else sc.HIDDEN)
        parts[f"{section}:body"] = (view, lambda b=built: b.body)
        parts[f"{section}:charts"] = rows.mounted(is_open and made, lambda v=view, b=built, sec=section: sc.make_charts(
            sec, v, b, frame), made)
        parts[f"{section}:row"] = c.as_is(None if made else sc.HIDDEN)
    changed, digests = c.only_changed(parts, digests, scope="job-query")
    return (*changed, digests)


def _section_chart_parts(section: str):
    """Return the function giving a section's chart entries for `chart_rows.figures_callback`."""
    def parts_of(window: dict, run: str) -> dict | None:
        try:
            view = _section_view(c.store(), section, run, window)
        except InfluxError:
            return None
        frame = _frame(window)
        return sc.chart_parts(view, sc.BUILDERS[section](view, frame), frame)
    return parts_of


for _section in sc.SECTIONS:
    rows.figures_callback(_section, [f"{_section}-{name}" for name in sc.CHARTS[_section]],
                          _section_chart_parts(_section), JOB_WINDOW, JOB_RUN, scope=f"job-{_section}")
rows.figures_callback(sp.JOB_BP_ROW, (sp.JOB_BP_BUSY, sp.JOB_BP_BACKLOG), sp.bp_chart_parts, JOB_WINDOW, JOB_RUN, scope="job-bp")
rows.figures_callback(sp.JOB_SPARK_ROW, (sp.JOB_BATCHES,), sp.batch_chart_parts, JOB_WINDOW, JOB_RUN, scope="job-spark")
rows.figures_callback(sp.JOB_INGRESS_ROW, (sp.JOB_BAD, sp.JOB_MUTED), sp.ingress_chart_parts, JOB_WINDOW, JOB_RUN,
                      scope="job-ingress")
for _row in ROWS.values():
    rows.toggle_callback(_row)
rows.address_callback(ROWS, JOB_ROWS_URL)


@callback(Output(sp.JOB_BP, "children"), Output(sp.JOB_GRAPH, "children"), Output(sp.JOB_BP_ROW + rows.CHARTS, "children"),
          Output(sp.JOB_BP + "-digests", "data"), Input(JOB_WINDOW, "data"), Input(sp.JOB_BP_ROW + rows.OPEN, "data"),
          State(JOB_RUN, "data"), State(sp.JOB_BP + "-digests", "data"), prevent_initial_call=True)
def refresh_backpressure(window, is_open, run, digests):
    """Answer a new range or tick, or the row opening or closing, with the backpressure panel."""
    return sp.backpressure_outputs(window, run, digests, is_open)


@callback(Output(sp.JOB_SPARK_ROW + rows.CHARTS, "children"), Output(sp.JOB_BATCH_SUMMARY, "children"),
          Output(sp.JOB_INGRESS_ROW + rows.CHARTS, "children"), Output(sp.JOB_INGRESS_SUMMARY, "children"),
          Output(sp.JOB_BATCHES + "-digests", "data"), Output(sp.JOB_INGRESS_BOX, "style"), Output(sp.JOB_SPARK_BOX, "style"),
          Input(JOB_WINDOW, "data"),
          Input(sp.JOB_SPARK_ROW + rows.OPEN, "data"), Input(sp.JOB_INGRESS_ROW + rows.OPEN, "data"),
          State(JOB_RUN, "data"), State(sp.JOB_BATCHES + "-digests", "data"), prevent_initial_call=True)
def refresh_spark_and_ingress(window, spark_open, ingress_open, run, digests):
    """Answer a new range or tick, or a row opening or closing, with the Spark batch and ingress panels."""
    return sp.spark_outputs(window, run, digests, spark_open, ingress_open)


@callback(*(o for section in sc.SECTIONS for o in (
              Output(section, "style"), Output(f"{section}-body", "children"),
              Output(section + rows.CHARTS, "children"), Output(section + rows.ROW, "style"))),
          Output(JOB_QUERY_DIGESTS, "data"), Input(JOB_WINDOW, "data"),
          *(Input(section + rows.OPEN, "data") for section in sc.SECTIONS), State(JOB_RUN, "data"),
          State(JOB_QUERY_DIGESTS, "data"), prevent_initial_call=True)
def refresh_query(window, *opens_run_digests):
    """Answer a new range or tick, or a section's row opening or closing, with the query's sections."""
    *opens, run, digests = opens_run_digests
    return _query_outputs(window, run, digests, *opens)
@callback(Output(JOB_INTERVAL, "disabled"), Output(JOB_INTERVAL, "interval"),
          Input(JOB_LIVE, "data"), Input(JOB_REFRESH, "value"), prevent_initial_call=True)
def pace_job(live, refresh):
    """Tick only while the run is live and the user has not paused, at the chosen rate."""
    return c.refresh_state(refresh, live)


def _range_outputs(duplicate: bool = False) -> list[Output]:
    return [Output(f"{JOB_RANGE}-{part}", prop, allow_duplicate=duplicate) for part, prop in (
        ("range", "value"), ("from-date", "date"), ("from-time", "value"), ("to-date", "date"), ("to-time", "value"))]


def _zoom(*relayouts):
    """Make a zoom on any chart's time axis the page's range (and so every chart's, and the address')."""
    picked = next((p for t in ctx.triggered if (p := c.zoom_to_range(t["value"])) is not None), None)
    return (dash.no_update,) * 5 if picked is None else (RANGE_CUSTOM, *picked)


zoom_job = callback(*_range_outputs(), *[Input(g, "relayoutData") for g in TIME_GRAPHS],
                    prevent_initial_call=True)(_zoom)


# The rows make their charts only when open: a zoom callback per chart, as a callback waits for all
# its inputs to exist and a folded row would hold back the others.
for _graph in ROW_GRAPHS:
    callback(*_range_outputs(duplicate=True), Input(_graph, "relayoutData"), prevent_initial_call=True)(_zoom)


clientside_callback(c.URL_SYNC_JS, Output(JOB_URL, "data"), *c.url_sync_inputs(JOB_RANGE))
clientside_callback("""function(w) {
    const hide = {display: 'none'}, s = w && w.stepless ? hide : null;
    return [s, s, s, !w || w.empty || w.backpressure ? null : hide];
}""", Output(JOB_LATENCY, "style"), Output(JOB_STEP_TABLES, "style"), Output(JOB_STEPS_BOX, "style"),
                    Output(JOB_BP_BOX, "style"), Input(JOB_WINDOW, "data"), prevent_initial_call=True)


def _url_banner(error) -> html.Div | None:
    """Return the banner saying what was wrong with the page's address (None if nothing was)."""
    return c.warning_banner(error) if isinstance(error, str) and error else None


def _status_range(rng: TimeRange, anchor: int, live: bool) -> TimeRange:
    """Return the range the status panels read: to the run's true end when `rng` ends where the run does.

    A finished run's last status points (backlogs, the ingress' final counters, the last
    Spark batch) are written when it stops, after its last latency point. Only the
    backpressure, Spark batch and ingress panels (and the markers) read past the range:
    the latency tables keep counting the events in `rng`.
    """
    if live or rng.end_ns != anchor:
        return rng
    return TimeRange(rng.start_ns, rng.end_ns + STATUS_GRACE_NS)

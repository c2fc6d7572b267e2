"""The job page's status panels: backpressure per step, Spark's batch phases, the ingress.

Each panel answers the page's window (the JOB_WINDOW store the main callback fills: the
range read, its bucket, the charts' shared axis and markers) with its table and summary,
and, when its row of charts is open (`chart_rows`), the charts made with their figures;
the row's later figures come from `*_chart_parts`, through `chart_rows.figures_callback`.
Every output is sent only when what it is made of changed (`components.only_changed`).
"""
from __future__ import annotations

import dash

from collector.influx import InfluxError
from collector.query.panels import BackpressureView, Marker
from collector.query.ranges import TimeRange
from collector.query.run_scope import RunScope
from metrics_ui import chart_rows as rows
from metrics_ui import components as c
from metrics_ui import figures

JOB_BP = "job-backpressure"
JOB_GRAPH = "job-graph"
JOB_BP_BUSY = "job-bp-busy"
JOB_BP_BACKLOG = "job-bp-backlog"
JOB_BATCHES = "job-batches"
JOB_BATCH_SUMMARY = "job-batch-summary"
JOB_BAD = "job-bad-frames"
JOB_MUTED = "job-muted"
JOB_INGRESS_SUMMARY = "job-ingress-summary"
JOB_INGRESS_BOX = "job-ingress"
JOB_SPARK_BOX = "job-spark-box"       # the micro-batch phases: left out of a run with no batches in the range
JOB_BP_ROW = "job-bp"                # rows of charts that fold (chart_rows): their parts are `<row>-row`, ...
JOB_SPARK_ROW = "job-spark"
JOB_INGRESS_ROW = "job-ingress"
_BUSY_TITLE = "Busy and backpressured share per step"
_BACKLOG_TITLE = "Backlog"
_BATCH_TITLE = "Spark micro-batches: phases (mean) and slowest batch"
_BAD_TITLE = "Bad frames set aside by the ingress, by reason"
_MUTED_TITLE = "Ingress muted (backpressure)"


def status_read(window: dict) -> TimeRange:
    """Return the range the status panels read: the page's, to a finished run's true end (`_status_range`)."""
    return TimeRange(int(window["start"]), int(window["status_end"]))


def unpack(window: dict) -> tuple[TimeRange, int, str, list[Marker]]:
    """Return the range read, the bucket, the charts' uirevision and the markers."""
    return (TimeRange(int(window["start"]), int(window["end"])), int(window["interval"]), str(window["revision"]),
            [Marker(int(t), str(k), str(x)) for t, k, x in window.get("markers", [])])



def scope(window: dict, run: str) -> RunScope | str:
    """Return the points the window's run owns (`RunScope`, as the main callback put it), else job `run`'s."""
    found = window.get("scope")
    if not isinstance(found, list) or len(found) != 5 or found[0] != run or not isinstance(found[1], str):
        return run
    _, run_id, query, start, end = found
    return RunScope(run, run_id, query if isinstance(query, str) else None, _opt_int(start), _opt_int(end))


def scope_data(s: RunScope) -> list | None:
    """Return a run scope as the page's window keeps it (None: the whole job)."""
    return None if s.run_id is None else [s.job, s.run_id, s.query, s.start_ns, s.end_ns]


def _opt_int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def step_order(window: dict) -> tuple:
    """Return the step order of the window's run (a query that records no steps: none)."""
    return tuple(window.get("steps", ()))


def bp_parts(bp: BackpressureView, order: tuple, window: dict) -> tuple[dict, dict]:
    """Return the `only_changed` entries of the backpressure table and job graph, and of its row's charts:
    those with figures (both, saying so, when neither has any).

    The panel is built once, if any part changed.
    """
    rng, _, revision, markers = unpack(window)
    shown = TimeRange(*window.get("shown", rng))
    built: list[tuple] = []

    def panel(i: int):
        def build():
            if not built:
                built.append(backpressure_panel(bp, order))
            out = built[0][i]
            return figures.time_axes(out, shown, revision, markers) if i >= 2 and out.data else out
        return build

    charts = (bp, shown, revision, markers)
    drawn = {JOB_BP_BUSY: (charts, panel(2)), JOB_BP_BACKLOG: (charts, panel(3))}
    has = {JOB_BP_BUSY: any(s.values for s in (*bp.busy, *bp.backpressured)),
           JOB_BP_BACKLOG: any(s.values for s in bp.backlog)}
    if any(has.values()):            # a chart without figures is left out (a query's job writes no backlog)
        drawn = {g: part for g, part in drawn.items() if has[g]}
    return {"table": (bp.latest, panel(0)), "graph": (bp.latest, panel(1))}, drawn


def bp_view(window: dict, run: str) -> BackpressureView:
    return c.store().backpressure_view(scope(window, run), status_read(window), int(window["interval"]),
                                       step_order(window))


def bp_chart_parts(window: dict, run: str) -> dict | None:
    """Return the backpressure row's chart entries for `chart_rows.figures_callback` (None: InfluxDB failed)."""
    try:
        bp = bp_view(window, run)
    except InfluxError:
        return None
    return bp_parts(bp, step_order(window), window)[1]


def backpressure_outputs(window, run, digests, is_open=False):
    """Reload the backpressure table and job graph for the page's range; make its row's charts when it opens."""
    if not window or "empty" in window:
        message = (window or {}).get("empty", c.BP_EMPTY)
        table, graph, busy, backlog = backpressure_empty(message)
        parts = {JOB_BP_BUSY: (message, lambda: busy), JOB_BP_BACKLOG: (message, lambda: backlog)}
        charts = rows.make(JOB_BP_ROW, parts, scope="job-bp") if is_open else []
        return table, graph, charts, {}
    try:
        bp = bp_view(window, run)
    except InfluxError:
        return (dash.no_update,) * 4                  # the main callback's banner says so
    order = step_order(window)
    panel, charts = bp_parts(bp, order, window)
    changed, digests = c.only_changed({
        **panel, "charts": rows.mounted(is_open, lambda: rows.make(JOB_BP_ROW, charts, scope="job-bp",
                                                                   ids=(JOB_BP_BUSY, JOB_BP_BACKLOG)), charts)},
        digests, scope="job-bp")
    return (*changed, digests)


def batch_chart_parts_of(batches, window: dict) -> dict:
    """Return the Spark row's chart entry (batch phases and the slowest batch) of a batch view."""
    return {JOB_BATCHES: chart_entry(figures.batch_figure, batches, _BATCH_TITLE, window)}


def ingress_chart_parts_of(ingress, window: dict) -> dict:
    """Return the ingress row's chart entries (bad frames, muted time) of an ingress view."""
    return {JOB_BAD: chart_entry(figures.bad_frames_figure, ingress, _BAD_TITLE, window),
            JOB_MUTED: chart_entry(figures.muted_figure, ingress, _MUTED_TITLE, window)}


def chart_entry(build_figure, view, title: str, window: dict) -> tuple:
    """Return the `only_changed` entry of one chart of a view on the page's time axis."""
    rng, _, revision, markers = unpack(window)
    shown = TimeRange(*window.get("shown", rng))

    def build():
        fig = build_figure(view, title)
        return figures.time_axes(fig, shown, revision, markers) if fig.data else fig
    return (view, shown, revision, markers), build


def batch_chart_parts(window: dict, run: str) -> dict | None:
    try:
        return batch_chart_parts_of(c.store().batch_view(scope(window, run), status_read(window),
                                                         int(window["interval"])), window)
    except InfluxError:
        return None


def ingress_chart_parts(window: dict, run: str) -> dict | None:
    try:
        return ingress_chart_parts_of(c.store().ingress_view(scope(window, run), status_read(window),
                                                             int(window["interval"])),
                                       window)
    except InfluxError:
        return None


def spark_outputs(window, run, digests, spark_open=False, ingress_open=False):
    """Reload the Spark batch summary and the ingress' bad frames and muted time for the page's range;
    make the charts of each row when it opens. The last two outputs hide the ingress and the batch
    phases when the run has none in the range."""
    if not window or "empty" in window:
        why = (window or {}).get("empty", figures.NO_DATA)
        spark = rows.make(JOB_SPARK_ROW, {JOB_BATCHES: (why, lambda: figures.empty_figure(_BATCH_TITLE, why))},
                          scope="job-spark") if spark_open else []
        ingress = rows.make(JOB_INGRESS_ROW, {JOB_BAD: (why, lambda: figures.empty_figure(_BAD_TITLE, why)),
                                              JOB_MUTED: (why, lambda: figures.empty_figure(_MUTED_TITLE, why))},
                            scope="job-ingress") if ingress_open else []
        return spark, "", ingress, "", {}, None, None
    try:
        store = c.store()
        status = status_read(window)
        batches = store.batch_view(scope(window, run), status, int(window["interval"]))
        ingress = store.ingress_view(scope(window, run), status, int(window["interval"]))
    except InfluxError:
        return (dash.no_update,) * 7
    slowest = max(batches.slowest_ms.values, default=None)
    batch_summary = (f"{batches.batches:,} micro-batches in the range · slowest {slowest:,.0f} ms"
                     if batches.batches and slowest is not None else "no Spark progress in the range")
    reasons = ", ".join(f"{s.name} {int(sum(s.values)):,}" for s in ingress.bad_by_reason if sum(s.values))
    ingress_summary = (f"{ingress.bad_frames:,} bad frames set aside" + (f" ({reasons})" if reasons else "")
                       + f" · muted {ingress.muted_s:,.1f} s in {ingress.mute_episodes:,} episodes")
    # shown when the run's job has an ingress that wrote its figures (Market Spread's), as any other panel
    no_ingress = not ingress.muted_share.values and not ingress.bad_by_reason
    changed, digests = c.only_changed({
        "batches": rows.mounted(spark_open, lambda: rows.make(
            JOB_SPARK_ROW, batch_chart_parts_of(batches, window), scope="job-spark")),
        "batch_summary": c.as_is(batch_summary),
        "ingress": rows.mounted(ingress_open and not no_ingress, lambda: rows.make(
            JOB_INGRESS_ROW, ingress_chart_parts_of(ingress, window), scope="job-ingress")),
        "ingress_summary": c.as_is(ingress_summary)}, digests, scope="job-spark")
    hidden = {"display": "none"}
    return (*changed, digests, hidden if no_ingress else None, hidden if not batches.batches else None)




def backpressure_panel(bp: BackpressureView, order=()) -> tuple:
    """Return the backpressure table, the job graph and the two charts (the empty state when none was written)."""
    if not bp.latest and not bp.backlog:
        return backpressure_empty(c.BP_EMPTY, order)
    busy = figures.busy_share_figure(bp.busy, bp.backpressured, _BUSY_TITLE, order=order)
    backlog = figures.backlog_figure(bp.backlog, _BACKLOG_TITLE, order=order)
    height = max(busy.layout["height"], backlog.layout["height"])     # side by side: equally tall
    return (c.table(c.BP_HEADER, c.backpressure_rows(bp.latest), JOB_BP + "-table", empty=c.BP_EMPTY),
            c.job_graph(bp.latest, JOB_GRAPH + "-chain", order),
            busy.update_layout(height=height), backlog.update_layout(height=height))


def backpressure_empty(message: str, order=()) -> tuple:
    """Return the backpressure table, job graph and charts showing `message` instead of figures."""
    return (c.table(c.BP_HEADER, [], JOB_BP + "-table", empty=message), c.job_graph([], JOB_GRAPH + "-chain", order),
            figures.empty_figure(_BUSY_TITLE, message), figures.empty_figure(_BACKLOG_TITLE, message))

"""The job page's sections of any streaming query: sources, batches against the trigger, state, executors.

Each section is built from its typed view (collector/query/spark_panels.py) into a fixed
frame of the page (`section_layout`): its heading, a table of the newest figures, then its
charts in a row that folds (`chart_rows`), mounted while it is open. What a run shows
follows from the data it has, whatever the job: a section without data is left out (a query
without state has no state section), and so is a chart without figures (no memory chart for
an operator that reports none). Names from the data (runs, sources, operators, executors) go
in as text, never as markup.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from dash import html

from collector.query.panels import Marker
from collector.query.ranges import TimeRange
from collector.query.spark_panels import ExecutorView, QueryBatchView, SourceView, StateView
from metrics_ui import chart_rows as rows
from metrics_ui import figures
from metrics_ui import query_figures as qf
from metrics_ui.components import table

QUERY_SOURCES = "job-sources"
QUERY_BATCHES = "job-query-batches"
QUERY_STATE = "job-state"
QUERY_EXECUTORS = "job-executors"
#: The sections in page order, and each one's charts (graph id: `<section>-<chart>`).
SECTIONS = (QUERY_BATCHES, QUERY_SOURCES, QUERY_STATE, QUERY_EXECUTORS)
CHARTS = {QUERY_SOURCES: ("rates",), QUERY_BATCHES: ("duration", "input"), QUERY_STATE: ("rows", "memory", "late"),
          QUERY_EXECUTORS: ("heap", "gc")}
#: The sections' time charts (a zoom on any of them sets the page's range).
SECTION_GRAPHS = tuple(f"{s}-{chart}" for s in SECTIONS for chart in CHARTS[s])
#: Each section's row of charts: its title.
ROW_LABELS = {QUERY_BATCHES: "Batch duration against the trigger, input rows per batch",
              QUERY_SOURCES: "Input rate against processing rate, rows behind",
              QUERY_STATE: "State rows and memory, rows dropped by the watermark",
              QUERY_EXECUTORS: "Heap and GC time over time"}
HIDDEN = {"display": "none"}
SOURCES_HEADER = ("source", "rows in range", "input rows/s\nover the range", "processed rows/s\nover batch time",
                  "rows behind\nnewest", "files behind\nnewest")
SOURCES_NOTE = ("Rates over the range: input rows/s is the rows of the range's batches divided by the seconds of the "
                "range the run covers (from its start, to its newest batch's end); processed rows/s divides them by "
                "the time those batches took, as Spark's processedRowsPerSecond does for one batch.")
STATE_HEADER = ("operator", "rows held", "memory", "late rows in range")
EXECUTORS_HEADER = ("executor", "heap used", "heap max", "GC time", "task CPU", "running tasks", "shuffle read",
                    "shuffle written")


def fmt_count(v: float | None, digits: int = 0) -> str:
    """Return a count or rate for a table cell ("—" when not reported)."""
    return "—" if v is None else f"{v:,.{digits}f}"


def fmt_bytes(n: float | None) -> str:
    """Return bytes in their largest binary unit ("512 KiB", "1.5 GiB")."""
    if n is None:
        return "—"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def fmt_ms(ms: float | None) -> str:
    """Return a duration given in ms compactly ("850 ms", "12.3 s")."""
    if ms is None:
        return "—"
    return f"{ms:,.0f} ms" if ms < 10_000 else f"{ms / 1000:,.1f} s"


class Frame:
    """What every chart of the page shares: the x range shown, the uirevision, the markers."""

    def __init__(self, shown: TimeRange, revision: str, markers: Sequence[Marker]):
        self.shown, self.revision, self.markers = shown, revision, list(markers)

    def axes(self, fig):
        """Return a chart on the page's time axis (an empty figure keeps its message)."""
        return figures.time_axes(fig, self.shown, self.revision, self.markers) if fig.data else fig


@dataclass(frozen=True)
class Section:
    """One section as the page draws it into its frame (`section_layout`).

    `body` is its heading, summary and table (None: the section is left out); `charts` builds
    each chart's figure by graph id, only when asked, so an unchanged chart is neither built
    nor sent.
    """
    body: list | None
    charts: dict[str, Callable[[], object]] = field(default_factory=dict)


def section_layout(section: str, style: dict | None = HIDDEN, body: list | None = None,
                   charts: Sequence = (), row_style: dict | None = HIDDEN, is_open: bool = False) -> html.Div:
    """Return a section's frame: its body, then its charts in a row that folds (`chart_rows`), hidden until filled.

    The charts are made when the row opens, with their first figures, and then stay mounted
    while it is open: later figures go to them by id (`chart_rows.figures_callback`), so the
    user's zoom, hidden series and an interaction in progress survive a live refresh.
    `style`, `body`, `charts` and `row_style` (hidden: the section has no charts) are what the
    page's first layout fills it with (the job page's `refresh_query` outputs).
    """
    return html.Div([html.Div(body, id=f"{section}-body"),
                     rows.row_layout(section, ROW_LABELS[section], is_open, charts, grid=len(CHARTS[section]) > 1,
                                     style=row_style)],
                    id=section, style=style)


def _section(section: str, title: str, body: list, note: str | None = None) -> list:
    head = [html.H3(title)] + ([html.P(note, className="note", id=f"{section}-note")] if note else [])
    return head + body


def sources_section(view: SourceView, frame: Frame) -> Section:
    """Return the Sources section: each source's newest rates and rows behind, its rates and backlog over time."""
    if not view.latest:
        return Section(None)
    rows = [[s.source, f"{s.rows:,}", fmt_count(s.input_rows_per_s, 1), fmt_count(s.processed_rows_per_s, 1),
             fmt_count(s.rows_behind), fmt_count(s.files_behind)] for s in view.latest]
    return Section(_section(QUERY_SOURCES, "Sources", [table(SOURCES_HEADER, rows, f"{QUERY_SOURCES}-table")],
                            note=SOURCES_NOTE),
                   {f"{QUERY_SOURCES}-rates": lambda: frame.axes(qf.sources_figure(
                       view.input_rate, view.processed_rate, view.behind,
                       "Input rate against processing rate, rows/s (processed dashed, rows behind dotted)"))})


def batches_section(view: QueryBatchView, frame: Frame) -> Section:
    """Return the Batches section: duration against the trigger interval, the share of batches that overran it,
    and the rows each batch took in (Spark UI's Input Rows)."""
    if not view.batches:
        return Section(None)
    if view.trigger_ms is None:
        summary = f"{view.batches:,} micro-batches in the range · no trigger interval: batches run back to back"
    else:
        summary = (f"{view.batches:,} micro-batches in the range · {view.overran:,} took longer than the "
                   f"{view.trigger_ms:,} ms trigger ({(view.share or 0) * 100:.0f} %)")
    return Section(_section(QUERY_BATCHES, "Batches", [html.P(summary, className="summary",
                                                              id=f"{QUERY_BATCHES}-summary")]),
                   {f"{QUERY_BATCHES}-duration": lambda: frame.axes(qf.batch_trigger_figure(
                       view, "Batch duration vs trigger (share of batches over it: bars)")),
                    f"{QUERY_BATCHES}-input": lambda: frame.axes(qf.lines_figure(
                        [view.input_rows], "Input rows per batch (largest dashed)", "rows", "rows per batch",
                        dashed=[view.input_rows_max._replace(name=view.input_rows.name)],
                        dashed_suffix=" (largest)"))})


def state_section(view: StateView, frame: Frame) -> Section:
    """Return the Stateful operators section: rows and memory held, rows dropped by the watermark, its delay.

    Each chart is there when its figures are: an operator's memory, its dropped rows (Spark
    reports them, 0 or more, for every stateful operator), the rows it holds or the watermark.
    """
    delay = view.watermark_delay_ms.values
    if not view.operators and not delay:
        return Section(None)
    rows = [[o.operator, fmt_count(o.rows_total), fmt_bytes(o.memory_bytes), f"{o.late_rows:,}"]
            for o in view.operators]
    summary = f"watermark {fmt_ms(delay[-1])} behind the newest trigger" if delay else "no watermark"
    return Section(_section(QUERY_STATE, "Stateful operators", [
        html.P(summary, className="summary", id=f"{QUERY_STATE}-summary"),
        table(STATE_HEADER, rows, f"{QUERY_STATE}-table", empty="no stateful operator")]),
        _state_charts(view, frame))


def _state_charts(view: StateView, frame: Frame) -> dict[str, Callable[[], object]]:
    charts = {f"{QUERY_STATE}-rows": lambda: frame.axes(qf.state_figure(
        view, "State rows per operator (watermark delay dotted)"))}
    if any(s.values for s in view.memory):
        charts[f"{QUERY_STATE}-memory"] = lambda: frame.axes(qf.lines_figure(
            view.memory, "State memory per operator", "MiB", "memory (MiB)", scale=1024 * 1024, fmt=",.1f"))
    if any(s.values for s in view.late):
        charts[f"{QUERY_STATE}-late"] = lambda: frame.axes(qf.lines_figure(
            view.late, "Rows dropped by the watermark per operator", "rows", "rows dropped (per bucket)"))
    return charts


def losses_line(view: ExecutorView) -> html.P | None:
    """Return the line of executors active and lost and the batches whose tasks ran again (None: no roster,
    or nothing to say: `local[*]` has no executors but the driver)."""
    losses = view.losses
    if losses is None or not (losses.active or losses.lost or losses.retried):
        return None
    text = f"executors: {fmt_count(losses.active)} active, {losses.lost} lost"
    if losses.last_lost:
        text += f" (last: {losses.last_lost})"
    if losses.retried:
        shown = ", ".join(f"{b} ({n} failed task{'s' if n != 1 else ''})" for b, n in losses.retried[-5:])
        more = f" and {len(losses.retried) - 5} more" if len(losses.retried) > 5 else ""
        text += f"; batches whose tasks ran again: {shown}{more}"
    return html.P(text, className="summary", id=f"{QUERY_EXECUTORS}-losses")


def executors_section(view: ExecutorView | None, frame: Frame) -> Section:
    """Return the Executors section: heap, GC, CPU, tasks and shuffle of the run's Spark application,
    and the executors it lost."""
    losses = None if view is None else losses_line(view)
    if view is not None and not view.latest and losses is not None:     # the roster without Spark's metrics sink
        return Section(_section(QUERY_EXECUTORS, "Executors", [
            html.P(["Spark application ", html.Code(view.app_id)], className="summary",
                   id=f"{QUERY_EXECUTORS}-summary"), losses]))
    if view is None or not view.latest:
        return Section(None)
    rows = [[e.executor, fmt_bytes(e.heap_used_bytes), fmt_bytes(e.heap_max_bytes), fmt_ms(e.gc_time_ms),
             fmt_ms(None if e.cpu_time_ns is None else e.cpu_time_ns / 1e6), fmt_count(e.running_tasks),
             fmt_bytes(e.shuffle_read_bytes), fmt_bytes(e.shuffle_write_bytes)] for e in view.latest]
    built: list = []

    def chart(i: int):
        def build():
            if not built:
                built.extend(qf.executor_figures(view))
            return frame.axes(built[i])
        return build
    work = any(s.values for s in (*view.gc_ms_per_s, *view.cpu_cores))
    return Section(_section(QUERY_EXECUTORS, "Executors", [
        html.P(["Spark application ", html.Code(view.app_id)], className="summary", id=f"{QUERY_EXECUTORS}-summary"),
        *([losses] if losses is not None else []),
        table(EXECUTORS_HEADER, rows, f"{QUERY_EXECUTORS}-table")],
        note="GC time, CPU time and shuffle bytes are totals since each JVM started."),
        {f"{QUERY_EXECUTORS}-heap": chart(0),
         **({f"{QUERY_EXECUTORS}-gc": chart(1)} if work else {})})


BUILDERS = {QUERY_SOURCES: sources_section, QUERY_BATCHES: batches_section, QUERY_STATE: state_section,
            QUERY_EXECUTORS: executors_section}


def read_section(store, section: str, run: str, status: TimeRange, interval_s: int, app: str | None,
                 rates: TimeRange | None = None):
    """Read one section's typed view over `status` (None: executors of an application with no id).

    `rates`: what the sources' rates are over (the part of `status` the run covers; `status` by default).
    """
    if section == QUERY_SOURCES:
        return store.source_view(run, status, interval_s, rates)
    if section == QUERY_BATCHES:
        return store.query_batch_view(run, status, interval_s)
    if section == QUERY_STATE:
        return store.state_view(run, status, interval_s)
    return store.executor_view(app, status, interval_s) if isinstance(app, str) and app else None


def chart_parts(view, built: Section, frame: Frame) -> dict:
    """Return `only_changed` entries of a section's charts: each made from the view and the page's frame."""
    return {g: ((view, frame.shown, frame.revision, frame.markers), build) for g, build in built.charts.items()}


def make_charts(section: str, view, built: Section, frame: Frame) -> list:
    """Return a section's charts made with their figures, remembered for the next refresh's Patch."""
    return rows.make(section, chart_parts(view, built, frame), scope=f"job-{section}",
                     ids=[f"{section}-{chart}" for chart in CHARTS[section]])

"""The job page's sections of any streaming query: sources, batches against the trigger, state, executors.

Each section is built whole from its typed view (collector/query/spark_panels.py) into the
page's container of the same name: its heading, a table of the newest figures and its
charts. A section without data is left out for Market Spread's runs, and says "not
reported by this query" for any other (a source that does not tell how far behind it is,
an application without Spark's metrics sink): never an error. Names from the data (runs,
sources, operators, executors) go in as text, never as markup.
"""
from __future__ import annotations

from typing import Sequence

from dash import dcc, html

from collector.query.panels import Marker
from collector.query.ranges import TimeRange
from collector.query.spark_panels import ExecutorView, QueryBatchView, SourceView, StateView
from metrics_ui import figures
from metrics_ui import query_figures as qf
from metrics_ui.components import table

QUERY_SOURCES = "job-sources"
QUERY_BATCHES = "job-query-batches"
QUERY_STATE = "job-state"
QUERY_EXECUTORS = "job-executors"
#: The sections' time charts (a zoom on any of them sets the page's range).
SECTION_GRAPHS = (f"{QUERY_SOURCES}-rates", f"{QUERY_BATCHES}-duration", f"{QUERY_STATE}-rows",
                  f"{QUERY_EXECUTORS}-heap", f"{QUERY_EXECUTORS}-gc")
SOURCES_HEADER = ("source", "rows in range", "input rows/s", "processed rows/s", "rows behind", "files behind")
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

    def graph(self, graph_id: str, fig) -> dcc.Graph:
        """Return a chart on the page's time axis (an empty figure keeps its message)."""
        if fig.data:
            fig = figures.time_axes(fig, self.shown, self.revision, self.markers)
        return dcc.Graph(id=graph_id, figure=fig)


def _section(section: str, title: str, body: list, note: str | None = None) -> list:
    head = [html.H3(title)] + ([html.P(note, className="note", id=f"{section}-note")] if note else [])
    return head + body


def _not_reported(section: str, title: str, generic: bool, what: str) -> list | None:
    return _section(section, title, [html.P(f"{what}: not reported by this query", className="summary",
                                            id=f"{section}-summary")]) if generic else None


def sources_section(view: SourceView, frame: Frame, generic: bool) -> list | None:
    """Return the Sources section: each source's newest rates and rows behind, its rates and backlog over time."""
    if not view.latest:
        return _not_reported(QUERY_SOURCES, "Sources", generic, "per-source figures")
    rows = [[s.source, f"{s.rows:,}", fmt_count(s.input_rows_per_s, 1), fmt_count(s.processed_rows_per_s, 1),
             fmt_count(s.rows_behind), fmt_count(s.files_behind)] for s in view.latest]
    fig = qf.sources_figure(view.input_rate, view.processed_rate, view.behind,
                            "Rows/s per source (processed dashed, behind dotted)")
    return _section(QUERY_SOURCES, "Sources", [html.Div([table(SOURCES_HEADER, rows, f"{QUERY_SOURCES}-table"),
                                                         frame.graph(f"{QUERY_SOURCES}-rates", fig)],
                                                        className="grid2")])


def batches_section(view: QueryBatchView, frame: Frame, generic: bool) -> list | None:
    """Return the Batches section: duration against the trigger interval and the share of batches that overran it."""
    if not view.batches:
        return _not_reported(QUERY_BATCHES, "Batches", generic, "micro-batches")
    if view.trigger_ms is None:
        summary = f"{view.batches:,} micro-batches in the range · no trigger interval: batches run back to back"
    else:
        summary = (f"{view.batches:,} micro-batches in the range · {view.overran:,} took longer than the "
                   f"{view.trigger_ms:,} ms trigger ({(view.share or 0) * 100:.0f} %)")
    return _section(QUERY_BATCHES, "Batches", [
        html.P(summary, className="summary", id=f"{QUERY_BATCHES}-summary"),
        frame.graph(f"{QUERY_BATCHES}-duration", qf.batch_trigger_figure(
            view, "Batch duration vs trigger (share of batches over it: bars)"))])


def state_section(view: StateView, frame: Frame, generic: bool) -> list | None:
    """Return the Stateful operators section: rows and memory held, rows dropped as late, the watermark's delay."""
    delay = view.watermark_delay_ms.values
    if not view.operators and not delay:
        return _not_reported(QUERY_STATE, "Stateful operators", generic, "state and watermark")
    rows = [[o.operator, fmt_count(o.rows_total), fmt_bytes(o.memory_bytes), f"{o.late_rows:,}"]
            for o in view.operators]
    summary = f"watermark {fmt_ms(delay[-1])} behind the newest trigger" if delay else "no watermark"
    return _section(QUERY_STATE, "Stateful operators", [
        html.P(summary, className="summary", id=f"{QUERY_STATE}-summary"),
        html.Div([table(STATE_HEADER, rows, f"{QUERY_STATE}-table", empty="no stateful operator"),
                  frame.graph(f"{QUERY_STATE}-rows", qf.state_figure(
                      view, "State rows per operator (watermark delay dotted)"))], className="grid2")])


def executors_section(view: ExecutorView | None, frame: Frame, generic: bool) -> list | None:
    """Return the Executors section: heap, GC, CPU, tasks and shuffle of the run's Spark application."""
    if view is None or not view.latest:
        return _not_reported(QUERY_EXECUTORS, "Executors", generic,
                             "executors (Spark's metrics system, relayed by the monitor)")
    rows = [[e.executor, fmt_bytes(e.heap_used_bytes), fmt_bytes(e.heap_max_bytes), fmt_ms(e.gc_time_ms),
             fmt_ms(None if e.cpu_time_ns is None else e.cpu_time_ns / 1e6), fmt_count(e.running_tasks),
             fmt_bytes(e.shuffle_read_bytes), fmt_bytes(e.shuffle_write_bytes)] for e in view.latest]
    heap, work = qf.executor_figures(view)
    return _section(QUERY_EXECUTORS, "Executors", [
        html.P(["Spark application ", html.Code(view.app_id)], className="summary", id=f"{QUERY_EXECUTORS}-summary"),
        table(EXECUTORS_HEADER, rows, f"{QUERY_EXECUTORS}-table"),
        html.Div([frame.graph(f"{QUERY_EXECUTORS}-heap", heap), frame.graph(f"{QUERY_EXECUTORS}-gc", work)],
                 className="grid2")], note="GC time, CPU time and shuffle bytes are totals since each JVM started.")

"""The job page's reads of what any streaming query reports: its runs, sources, batches, state, executors.

Each panel is one InfluxQL request (statements joined with `; `) aggregated by InfluxDB
over the range shown, of measurements a query may not have written (`spark_source`,
`spark_state`, `spark_executor`; schema: docs/METRICS.md): a run without them reads as an
empty view, which the page hides or says is not reported. Every value from a user (run,
application id, times) is a bound parameter.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence


from collector.query.panels import PanelStore
from collector.query.ranges import TimeRange, format_time
from collector.query.run_ends import RunError, run_error
from collector.run_status import (FIELD_ERROR, FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE,
                                  FIELD_LAST_SEEN_NS, FIELD_STATUS)
from collector.query.series import TimeSeries
from collector.vocabulary import (RUNS, SPARK_EXECUTOR, SPARK_EXECUTORS, SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE,
                                  SPARK_TASK_FAILURES)
_EXECUTOR_FIELDS = ("heap_used_bytes", "heap_max_bytes", "gc_time_ms", "gc_count", "cpu_time_ns", "running_tasks",
                    "shuffle_read_bytes", "shuffle_write_bytes")


@dataclass(frozen=True)
class QueryRun:
    """A query's newest `runs` row: what the runs page lists and the job page follows."""
    query: str
    query_id: str | None
    status: str | None                   # the row's: running, finished, stopped, failed (collector/run_status.py)
    app_id: str | None
    trigger_ms: int | None
    steps: tuple[str, ...]               # the latency steps the job declared, in order
    started_ns: int | None = None        # the row's time: the query's start
    ended_ns: int | None = None          # its recorded end (`end_ns`), None while running
    last_seen_ns: int | None = None      # the monitor's newest heartbeat for it (None: rows from before heartbeats)
    error: RunError | None = None        # why it failed
    batch_end_ns: int | None = None      # its newest batch's end (trigger start + duration)


@dataclass(frozen=True)
class QuerySummary:
    """One run's queries as `runs` and `spark_progress` tell them, for the runs page."""
    run: str
    first_ns: int | None                 # the first and newest micro-batch's trigger start (None: no progress yet)
    last_ns: int | None
    rows: int                            # numInputRows over the whole run
    queries: tuple[QueryRun, ...]
    started_ns: int | None = None        # the first query's start (`runs`), for a run with no batch yet
    last_end_ns: int | None = None       # the newest batch's end, over the run's queries

    @property
    def declared_steps(self) -> tuple[str, ...]:
        """Return the steps the run's queries declared (first query's first), without repeats."""
        return tuple(dict.fromkeys(s for q in self.queries for s in q.steps))


@dataclass(frozen=True)
class SourceLatest:
    """One source over a range: its rows, its rates over the range and how far behind it was last."""
    source: str
    rows: int                            # in the range's batches
    input_rows_per_s: float | None       # rows / the seconds the range covers of the run (`source_view`'s span)
    processed_rows_per_s: float | None   # rows / the time its query's batches in the range took
    rows_behind: int | None              # the newest in the range
    files_behind: int | None


@dataclass(frozen=True)
class SourceView:
    """A query's sources over a range: their rates and how far behind they are, per chart bucket."""
    latest: list[SourceLatest]
    input_rate: list[TimeSeries]          # mean rows/s per source (Spark's inputRowsPerSecond)
    processed_rate: list[TimeSeries]      # mean rows/s per source (processedRowsPerSecond)
    behind: list[TimeSeries]              # max rows behind (or files, named "… files") per source


@dataclass(frozen=True)
class QueryBatchView:
    """Micro-batch durations against the trigger interval over a range."""
    batches: int
    overran: int                          # batches that took longer than the trigger
    judged: int                           # batches with a trigger to compare with
    trigger_ms: int | None                # the largest trigger of the range (None: back to back)
    mean_ms: TimeSeries
    slowest_ms: TimeSeries
    trigger: TimeSeries
    overrun_share: TimeSeries             # 0..1 per bucket

    @property
    def share(self) -> float | None:
        """Return the share of the range's batches that overran the trigger (None without a trigger)."""
        return self.overran / self.judged if self.judged else None


@dataclass(frozen=True)
class OperatorLatest:
    """One stateful operator's newest rows and memory and its late rows in the range."""
    operator: str
    rows_total: int | None
    memory_bytes: int | None
    late_rows: int


@dataclass(frozen=True)
class StateView:
    """A query's stateful operators and its watermark delay over a range."""
    operators: list[OperatorLatest]
    rows: list[TimeSeries]                # rows held, last per bucket, per operator
    memory: list[TimeSeries]              # bytes, max per bucket, per operator
    late: list[TimeSeries]                # rows dropped by the watermark, summed per bucket, per operator
    watermark_delay_ms: TimeSeries        # max per bucket (trigger start - watermark)


@dataclass(frozen=True)
class ExecutorLatest:
    """One executor's (or the driver's) newest figures from Spark's metrics system."""
    executor: str
    heap_used_bytes: int | None
    heap_max_bytes: int | None
    gc_time_ms: int | None               # cumulative
    cpu_time_ns: int | None              # cumulative
    running_tasks: int | None
    shuffle_read_bytes: int | None       # cumulative
    shuffle_write_bytes: int | None


@dataclass(frozen=True)
class ExecutorLosses:
    """The application's executors as its driver saw them (`spark_executors`) and the batches whose tasks ran again."""
    active: int | None
    lost: int
    failed_tasks: int
    last_lost: str
    retried: tuple[tuple[int, int], ...]      # (batch id, failed tasks), oldest first


@dataclass(frozen=True)
class ExecutorView:
    """An application's executors over a range: heap, GC and CPU per second, tasks, shuffle."""
    app_id: str
    latest: list[ExecutorLatest]
    heap_used: list[TimeSeries]           # bytes, max per bucket
    heap_max: list[TimeSeries]
    gc_ms_per_s: list[TimeSeries]         # GC time per second of wall time
    cpu_cores: list[TimeSeries]           # task CPU seconds per second
    running_tasks: list[TimeSeries]
    shuffle_bytes_per_s: list[TimeSeries]  # read + written
    losses: ExecutorLosses | None = None   # None: the driver wrote no executor roster in the range


#: A `runs` row's fields the read side uses (collector/run_status.py has the statuses and error fields).
_RUNS_COLUMNS = ", ".join(f'"{f}"' for f in (
    "query_id", FIELD_STATUS, "app_id", "trigger_ms", "steps", "end_ns", FIELD_LAST_SEEN_NS, FIELD_ERROR,
    FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE))


def _query_run(query: str, r: dict, batch: tuple[int, int] | None) -> QueryRun:
    """Return a query's newest `runs` row, with its newest batch's end, as a QueryRun."""
    return QueryRun(query, r.get("query_id"), r.get(FIELD_STATUS), r.get("app_id"), _opt_int(r.get("trigger_ms")),
                    parse_steps(r.get("steps")), int(r["time"]), _opt_int(r.get("end_ns")),
                    _opt_int(r.get(FIELD_LAST_SEEN_NS)), run_error(r), batch[1] if batch else None)


def _opt_int(v) -> int | None:
    return None if v is None else int(v)


def _opt_float(v) -> float | None:
    return None if v is None else float(v)


def parse_steps(raw) -> tuple[str, ...]:
    """Return the steps of a `runs` point's JSON `steps` field; () for none or anything not a list of names."""
    if not isinstance(raw, str) or not raw:
        return ()
    try:
        steps = json.loads(raw)
    except ValueError:
        return ()
    return tuple(s for s in steps if isinstance(s, str) and s) if isinstance(steps, list) else ()


def _series(groups: dict[str, dict[int, float]], order: Iterable[str] | None = None) -> list[TimeSeries]:
    names = list(order) if order is not None else sorted(groups)
    return [TimeSeries(n, tuple(sorted(groups[n])), tuple(groups[n][t] for t in sorted(groups[n])))
            for n in names if groups.get(n)]


def _one(name: str, points: dict[int, float]) -> TimeSeries:
    return TimeSeries(name, tuple(sorted(points)), tuple(points[t] for t in sorted(points)))


def _label(tags: dict, key: str, queries: set[str]) -> str:
    """Name a per-query series by its tag, prefixed by its query when the run has several."""
    value = tags.get(key, "")
    return f"{tags.get('query', '')} · {value}" if len(queries) > 1 else value


class SparkPanelStore(PanelStore):
    """Read-only queries of any streaming query's measurements; MetricsStore is one."""

    def query_summaries(self, only: str | None = None) -> dict[str, QuerySummary]:
        """Return every run's (or `only`'s) queries with how they ended, first and newest batch, and rows.

        One request: the newest `runs` row per query (LIMIT 1 reads one block per series; a
        field a row lacks reads as None), the first and newest `spark_progress` point per
        query, and the rows over the run.
        """
        where, params = ('"run" = $run', {"run": only}) if only is not None else ("time > 0", None)
        series = self._optional("; ".join((
            f'SELECT {_RUNS_COLUMNS} FROM "{RUNS}" WHERE {where} GROUP BY "run", "query" ORDER BY time DESC LIMIT 1',
            f'SELECT "batch_ms" AS "newest_ms" FROM "{SPARK_PROGRESS}" WHERE {where} GROUP BY "run", "query" '
            'ORDER BY time DESC LIMIT 1',
            f'SELECT "batch_ms" AS "first_ms" FROM "{SPARK_PROGRESS}" WHERE {where} GROUP BY "run", "query" '
            'ORDER BY time ASC LIMIT 1',
            f'SELECT sum("input_rows") AS "rows" FROM "{SPARK_PROGRESS}" WHERE {where} GROUP BY "run"')), params)
        rows_of: dict[str, dict[str, dict]] = defaultdict(dict)
        first: dict[str, int] = {}
        newest: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)      # run -> query -> (start, end)
        rows: dict[str, int] = {}
        for s in series:
            run, query = s.tags.get("run", ""), s.tags.get("query", "")
            for r in s.rows():
                t = int(r["time"])
                if s.name == RUNS:
                    rows_of[run][query] = r
                elif "rows" in r:
                    rows[run] = int(r["rows"] or 0)
                elif "newest_ms" in r:
                    newest[run][query] = (t, t + int(r["newest_ms"] or 0) * 1_000_000)
                else:
                    first[run] = min(first.get(run, t), t)
        out = {}
        for run in set(rows_of) | set(newest):
            queries = tuple(sorted((_query_run(q, r, newest[run].get(q)) for q, r in rows_of[run].items()),
                                   key=lambda q: q.query))
            ends = newest.get(run, {})
            out[run] = QuerySummary(run, first.get(run), max((t for t, _ in ends.values()), default=None),
                                    rows.get(run, 0), queries, min((q.started_ns for q in queries
                                                                    if q.started_ns is not None), default=None),
                                    max((e for _, e in ends.values()), default=None))
        return out

    def rows_since(self, starts: dict[str, int], ends: dict[str, int]) -> dict[str, int]:
        """Return each run's rows in the batches whose trigger start lies in [starts[run], ends[run]].

        One request, a statement per run; a run without batches there reads as 0.
        """
        names = sorted(starts)
        if not names:
            return {}
        params: dict[str, str] = {}
        stmts = []
        for i, run in enumerate(names):
            params.update({f"r{i}": run, f"s{i}": format_time(starts[run]), f"e{i}": format_time(ends[run])})
            stmts.append(f'SELECT sum("input_rows") AS "rows" FROM "{SPARK_PROGRESS}" '
                         f'WHERE "run" = $r{i} AND time >= $s{i} AND time <= $e{i} GROUP BY "run"')
        found = {s.tags.get("run", ""): int(s.values[0][1] or 0) for s in self._optional("; ".join(stmts), params)
                 if s.values}
        return {run: found.get(run, 0) for run in names}

    def source_view(self, run: str, rng: TimeRange, interval_s: int, span: TimeRange | None = None) -> SourceView:
        """Return the run's sources' rates and rows behind per `interval_s` bucket, and each one's range figures.

        A source's input rows/s is its rows in the range's batches over `span` (the part of the
        range the run covers; the range itself by default), its processed rows/s those rows over
        the time its query's batches in the range took (Spark's processedRowsPerSecond, over the
        range): never one batch's figure.
        """
        where, params = self._where(run, rng)
        series = self._optional("; ".join((
            f'SELECT mean("input_rows_per_s") AS "in", mean("processed_rows_per_s") AS "out", '
            f'max("rows_behind") AS "behind", max("files_behind") AS "files" FROM "{SPARK_SOURCE}" '
            f'WHERE {where} GROUP BY time({int(interval_s)}s), "query", "source" fill(none)',
            f'SELECT last("rows_behind") AS "behind", last("files_behind") AS "files", sum("input_rows") AS "rows" '
            f'FROM "{SPARK_SOURCE}" WHERE {where} GROUP BY "query", "source"',
            f'SELECT sum("batch_ms") AS "busy_ms" FROM "{SPARK_PROGRESS}" WHERE {where} GROUP BY "query"')), params)
        seconds = (span or rng).seconds
        busy_s = {s.tags.get("query", ""): float(s.values[0][1] or 0) / 1000 for s in series
                  if s.name == SPARK_PROGRESS and s.values}
        sources = [s for s in series if s.name == SPARK_SOURCE]
        names = {s.tags.get("query", "") for s in sources}
        per: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        latest = []
        for s in sources:
            label = _label(s.tags, "source", names)
            for r in s.rows():
                if "rows" in r:
                    n, busy = int(r["rows"] or 0), busy_s.get(s.tags.get("query", ""), 0.0)
                    latest.append(SourceLatest(label, n, n / seconds if seconds > 0 else None,
                                               n / busy if busy > 0 else None,
                                               _opt_int(r["behind"]), _opt_int(r["files"])))
                    continue
                for key, name in (("in", label), ("out", label), ("behind", label), ("files", f"{label} files")):
                    if r[key] is not None:
                        per[key][name][int(r["time"])] = float(r[key])
        behind = _series(per["behind"]) + _series(per["files"])
        return SourceView(sorted(latest, key=lambda x: x.source), _series(per["in"]), _series(per["out"]), behind)

    def query_batch_view(self, run: str, rng: TimeRange, interval_s: int) -> QueryBatchView:
        """Return batch durations, the trigger and the share of batches that overran it, per `interval_s` bucket."""
        where, params = self._where(run, rng)
        series = self._optional(
            f'SELECT mean("batch_ms") AS "mean", max("batch_ms") AS "slowest", count("batch_ms") AS "batches", '
            f'sum("overran") AS "overran", count("overran") AS "judged", max("trigger_ms") AS "trigger" '
            f'FROM "{SPARK_PROGRESS}" WHERE {where} GROUP BY time({int(interval_s)}s) fill(none)', params)
        rows = [r for s in series for r in s.rows()]

        def points(key: str, scale=lambda r, v: v) -> dict[int, float]:
            return {int(r["time"]): float(scale(r, r[key])) for r in rows if r.get(key) is not None}

        share = {int(r["time"]): float(r["overran"] or 0) / r["judged"] for r in rows if r.get("judged")}
        triggers = [int(r["trigger"]) for r in rows if r.get("trigger") is not None]
        return QueryBatchView(sum(int(r["batches"] or 0) for r in rows), sum(int(r["overran"] or 0) for r in rows),
                              sum(int(r["judged"] or 0) for r in rows), max(triggers, default=None),
                              _one("mean batch", points("mean")), _one("slowest batch", points("slowest")),
                              _one("trigger", points("trigger")), _one("overran", share))

    def state_view(self, run: str, rng: TimeRange, interval_s: int) -> StateView:
        """Return each stateful operator's rows, memory and late rows per bucket, and the watermark delay."""
        where, params = self._where(run, rng)
        by_time = f"GROUP BY time({int(interval_s)}s)"
        series = self._optional("; ".join((
            f'SELECT last("rows_total") AS "rows", max("memory_bytes") AS "memory", sum("late_rows") AS "late" '
            f'FROM "{SPARK_STATE}" WHERE {where} {by_time}, "query", "operator" fill(none)',
            f'SELECT last("rows_total") AS "rows", last("memory_bytes") AS "memory", sum("late_rows") AS "late_sum" '
            f'FROM "{SPARK_STATE}" WHERE {where} GROUP BY "query", "operator"',
            f'SELECT max("watermark_delay_ms") AS "delay" FROM "{SPARK_PROGRESS}" WHERE {where} {by_time} fill(none)')),
            params)
        names = {s.tags.get("query", "") for s in series if s.name == SPARK_STATE}
        per: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        delay: dict[int, float] = {}
        operators = []
        for s in series:
            if s.name == SPARK_PROGRESS:
                delay.update((int(r["time"]), float(r["delay"])) for r in s.rows() if r["delay"] is not None)
                continue
            label = _label(s.tags, "operator", names)
            for r in s.rows():
                if "late_sum" in r:
                    operators.append(OperatorLatest(label, _opt_int(r["rows"]), _opt_int(r["memory"]),
                                                    int(r["late_sum"] or 0)))
                    continue
                for key in ("rows", "memory", "late"):
                    if r[key] is not None:
                        per[key][label][int(r["time"])] = float(r[key])
        return StateView(sorted(operators, key=lambda o: o.operator), _series(per["rows"]), _series(per["memory"]),
                         _series(per["late"]), _one("watermark delay", delay))

    def executor_view(self, app_id: str, rng: TimeRange, interval_s: int) -> ExecutorView:
        """Return an application's executors' heap, GC and CPU per second, tasks and shuffle per bucket.

        Cumulative counters become rates with InfluxDB's `non_negative_derivative` between
        points, averaged per bucket (a restarted executor counting from 0 reads as no growth).
        """
        params = {"app": app_id, "start": format_time(rng.start_ns), "end": format_time(rng.end_ns)}
        where = '"app" = $app AND time >= $start AND time < $end'
        by = f'GROUP BY time({int(interval_s)}s), "executor" fill(none)'
        counters = ("gc_time_ms", "cpu_time_ns", "shuffle_read_bytes", "shuffle_write_bytes")
        # each point's growth per second since the one before, then their mean per bucket: a partial bucket
        # (the live end of the range) reads the same rate as a whole one
        inner = ", ".join(f'non_negative_derivative("{f}", 1s) AS "{f}"' for f in counters)
        rate = ", ".join(f'mean("{f}") AS "{f}"' for f in counters)
        last = ", ".join(f'last("{f}") AS "{f}"' for f in _EXECUTOR_FIELDS)
        series = self._optional("; ".join((
            f'SELECT max("heap_used_bytes") AS "heap_used", max("heap_max_bytes") AS "heap_max", '
            f'mean("running_tasks") AS "tasks" FROM "{SPARK_EXECUTOR}" WHERE {where} {by}',
            f'SELECT {rate} FROM (SELECT {inner} FROM "{SPARK_EXECUTOR}" WHERE {where} GROUP BY "executor") '
            f'WHERE time >= $start AND time < $end {by}',
            f'SELECT {last} FROM "{SPARK_EXECUTOR}" WHERE {where} GROUP BY "executor"')), params)
        per: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        latest = []
        for s in series:
            ex = s.tags.get("executor", "")
            for r in s.rows():
                if "gc_count" in r:
                    latest.append(ExecutorLatest(ex, *(_opt_int(r[f]) for f in ("heap_used_bytes", "heap_max_bytes",
                                  "gc_time_ms", "cpu_time_ns", "running_tasks", "shuffle_read_bytes",
                                                                                "shuffle_write_bytes"))))
                    continue
                t = int(r["time"])
                for key in ("heap_used", "heap_max", "tasks", "gc_time_ms"):
                    if r.get(key) is not None:
                        per[key][ex][t] = float(r[key])
                if r.get("cpu_time_ns") is not None:
                    per["cpu"][ex][t] = float(r["cpu_time_ns"]) / 1e9
                moved = [r.get(k) for k in ("shuffle_read_bytes", "shuffle_write_bytes") if r.get(k) is not None]
                if moved:
                    per["shuffle"][ex][t] = float(sum(moved))
        order = sorted({ex for v in per.values() for ex in v} | {x.executor for x in latest}, key=executor_rank)
        return ExecutorView(app_id, sorted(latest, key=lambda x: executor_rank(x.executor)),
                            *(_series(per[k], order) for k in ("heap_used", "heap_max", "gc_time_ms", "cpu",
                                                               "tasks", "shuffle")),
                            losses=self._executor_losses(where, params))

    def _executor_losses(self, where: str, params: dict) -> ExecutorLosses | None:
        """Return the newest executor roster in the range and its batches with failed tasks (None: no roster)."""
        series = self._optional(
            f'SELECT last("active") AS "active", last("lost") AS "lost", last("failed_tasks") AS "failed_tasks", '
            f'last("last_lost") AS "last_lost" FROM "{SPARK_EXECUTORS}" WHERE {where}; '
            f'SELECT "batch_id", "failed_tasks" FROM "{SPARK_TASK_FAILURES}" WHERE {where}', params)
        roster, retried = None, {}
        for s in series:
            for r in s.rows():
                if "batch_id" in r:
                    retried[int(r["batch_id"])] = max(retried.get(int(r["batch_id"]), 0), int(r["failed_tasks"]))
                elif "lost" in r:
                    roster = r
        if roster is None:
            return None
        return ExecutorLosses(_opt_int(roster["active"]), int(roster["lost"] or 0), int(roster["failed_tasks"] or 0),
                              str(roster["last_lost"] or ""), tuple(sorted(retried.items())))


def executor_rank(executor: str) -> tuple[int, int, str]:
    """Return an executor's sort key: the driver first, then executors by number."""
    if executor == "driver":
        return (0, 0, executor)
    return (1, int(executor), executor) if executor.isdigit() else (2, 0, executor)


def newest_app(queries: Sequence[QueryRun]) -> str | None:
    """Return the Spark application id of a run's queries (the first that names one)."""
    return next((q.app_id for q in queries if q.app_id), None)

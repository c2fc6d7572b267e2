"""The job page's reads of what any streaming query reports: its runs, sources, batches, state, executors.

Each panel is one InfluxQL request (statements joined with `; `) aggregated by InfluxDB
over the range shown, of measurements a query may not have written (`spark_source`,
`spark_state`, `spark_executor`; schema: docs/METRICS.md): a run without them reads as an
empty view, which the page leaves out. Every value from a user (run,
application id, times) is a bound parameter.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence


from collector.query.panels import PanelStore
from collector.query.ranges import TimeRange, format_time
from collector.query.run_scope import RunScope
from collector.query.query_runs import (RUNS_COLUMNS, Batches, FoundRun, QueryRun, QuerySummary,  # noqa: F401
                                        next_starts, opt_int as _opt_int, parse_steps, run_id_of)
from collector.query.series import TimeSeries
from collector.vocabulary import (RUNS, SPARK_EXECUTOR, SPARK_EXECUTORS, SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE,
                                  SPARK_TASK_FAILURES, TAG_QUERY, TAG_RUN, TAG_RUN_ID)
_EXECUTOR_FIELDS = ("heap_used_bytes", "heap_max_bytes", "gc_time_ms", "gc_count", "cpu_time_ns", "running_tasks",
                    "shuffle_read_bytes", "shuffle_write_bytes")


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
    input_rows: TimeSeries = TimeSeries("rows per batch", (), ())        # mean rows per batch per bucket
    input_rows_max: TimeSeries = TimeSeries("largest batch", (), ())     # the bucket's largest batch, in rows

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


def _opt_float(v) -> float | None:
    return None if v is None else float(v)


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

    def query_summaries(self, only: str | None = None) -> list[QuerySummary]:
        """Return every query run of every job (or of job `only`): how it ended, its first and newest batch, rows.

        A run is one start of a query (Spark's runId: the `run_id` tag, or, on `runs` rows
        written before it, their `spark_run_id` field). One request reads each run's `runs`
        row, its first and newest `spark_progress` point and its rows; batches written before
        the tag are a query's, split among its untagged rows by their time spans
        (`_split_untagged`, one request more when there are several).
        """
        where, params = ('"run" = $run', {"run": only}) if only is not None else ("time > 0", None)
        by = f'GROUP BY "run", "query", "{TAG_RUN_ID}"'
        series = self._optional("; ".join((
            f'SELECT {RUNS_COLUMNS}, "spark_run_id" FROM "{RUNS}" WHERE {where} {by}',
            f'SELECT "batch_ms" AS "newest_ms" FROM "{SPARK_PROGRESS}" WHERE {where} {by} ORDER BY time DESC LIMIT 1',
            f'SELECT "batch_ms" AS "first_ms" FROM "{SPARK_PROGRESS}" WHERE {where} {by} ORDER BY time ASC LIMIT 1',
            f'SELECT sum("input_rows") AS "rows" FROM "{SPARK_PROGRESS}" WHERE {where} {by}')), params)
        rows_of: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
        figures: dict[tuple[str, str, str], Batches] = defaultdict(Batches)
        for s in series:
            key = (s.tags.get(TAG_RUN, ""), s.tags.get(TAG_QUERY, ""), s.tags.get(TAG_RUN_ID, ""))
            for r in s.rows():
                if s.name == RUNS:
                    rows_of[key].append(r)
                else:
                    figures[key].add(r)
        runs: list[FoundRun] = []
        split: list[FoundRun] = []
        for key in sorted(set(rows_of) | set(figures)):
            job, query, tagged = key
            found = sorted(rows_of.get(key, []), key=lambda r: int(r["time"]))
            if tagged or len(found) <= 1:
                row = found[-1] if found else None
                run_id = tagged or (run_id_of(row) if row is not None else None)
                runs.append(FoundRun(job, query, run_id, row, figures.get(key, Batches()), None))
                continue
            for i, row in enumerate(found):      # rows from before the tag: one series per query, a row per start
                nxt = int(found[i + 1]["time"]) if i + 1 < len(found) else None
                split.append(FoundRun(job, query, run_id_of(row), row, Batches(), nxt))
        if split:
            self._split_untagged(split)
        runs += split
        nexts = next_starts(runs)
        return sorted((f.summary(nexts.get(id(f))) for f in runs), key=lambda g: (g.run, g.run_id or ""))

    def _split_untagged(self, runs: list[FoundRun]) -> None:
        """Fill each untagged run's batches from its query's `spark_progress` points within its time span."""
        stmts, params = [], {}
        for i, f in enumerate(runs):
            start = int(f.row["time"])
            span = f"time >= $s{i}" + (f" AND time < $e{i}" if f.next_ns is not None else "")
            params.update({f"j{i}": f.job, f"q{i}": f.query, f"s{i}": format_time(start)})
            if f.next_ns is not None:
                params[f"e{i}"] = format_time(f.next_ns)
            where = f'"run" = $j{i} AND "query" = $q{i} AND "{TAG_RUN_ID}" = \'\' AND {span}'
            stmts += [f'SELECT "batch_ms" AS "newest_ms_{i}" FROM "{SPARK_PROGRESS}" WHERE {where} '
                      'ORDER BY time DESC LIMIT 1',
                      f'SELECT "batch_ms" AS "first_ms_{i}" FROM "{SPARK_PROGRESS}" WHERE {where} '
                      'ORDER BY time ASC LIMIT 1',
                      f'SELECT sum("input_rows") AS "rows_{i}" FROM "{SPARK_PROGRESS}" WHERE {where}']
        for s in self._optional("; ".join(stmts), params):
            name, _, index = s.columns[1].rpartition("_")
            for r in s.rows():
                runs[int(index)].batches.add({"time": r["time"], name: r[s.columns[1]]})

    def rows_since(self, windows: Sequence[tuple[RunScope, int, int]]) -> list[int]:
        """Return each run's rows in its batches whose trigger start lies in [start, end].

        One request, a statement per run; a run without batches there reads as 0.
        """
        if not windows:
            return []
        params: dict[str, str] = {}
        stmts = []
        for i, (scope, start, end) in enumerate(windows):
            where, p = scope.where(f"w{i}")
            params.update(p)
            params.update({f"s{i}": format_time(start), f"e{i}": format_time(end)})
            stmts.append(f'SELECT sum("input_rows") AS "rows_{i}" FROM "{SPARK_PROGRESS}" '
                         f'WHERE {where} AND time >= $s{i} AND time <= $e{i}')
        out = [0] * len(windows)
        for s in self._optional("; ".join(stmts), params):
            if s.values:
                out[int(s.columns[1].rpartition("_")[2])] = int(s.values[0][1] or 0)
        return out

    def source_view(self, run: str | RunScope, rng: TimeRange, interval_s: int, span: TimeRange | None = None) -> SourceView:
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

    def query_batch_view(self, run: str | RunScope, rng: TimeRange, interval_s: int) -> QueryBatchView:
        """Return batch durations, the trigger, the share of batches that overran it and their input rows, per
        `interval_s` bucket."""
        where, params = self._where(run, rng)
        series = self._optional(
            f'SELECT mean("batch_ms") AS "mean", max("batch_ms") AS "slowest", count("batch_ms") AS "batches", '
            f'sum("overran") AS "overran", count("overran") AS "judged", max("trigger_ms") AS "trigger", '
            f'mean("input_rows") AS "rows", max("input_rows") AS "rows_max" '
            f'FROM "{SPARK_PROGRESS}" WHERE {where} GROUP BY time({int(interval_s)}s) fill(none)', params)
        rows = [r for s in series for r in s.rows()]

        def points(key: str, scale=lambda r, v: v) -> dict[int, float]:
            return {int(r["time"]): float(scale(r, r[key])) for r in rows if r.get(key) is not None}

        share = {int(r["time"]): float(r["overran"] or 0) / r["judged"] for r in rows if r.get("judged")}
        triggers = [int(r["trigger"]) for r in rows if r.get("trigger") is not None]
        return QueryBatchView(sum(int(r["batches"] or 0) for r in rows), sum(int(r["overran"] or 0) for r in rows),
                              sum(int(r["judged"] or 0) for r in rows), max(triggers, default=None),
                              _one("mean batch", points("mean")), _one("slowest batch", points("slowest")),
                              _one("trigger", points("trigger")), _one("overran", share),
                              _one("rows per batch", points("rows")), _one("largest batch", points("rows_max")))

    def state_view(self, run: str | RunScope, rng: TimeRange, interval_s: int) -> StateView:
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

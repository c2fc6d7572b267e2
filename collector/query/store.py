"""Latency and runs as the dashboard, the alert scope checks and perf read them (schema: docs/METRICS.md).

A range is read from the collector's rollups (10 s .. 1 h, `rollup.latency`) where they
lie wholly inside it and exist, and from the 1-s points elsewhere (collector/query/resolution.py),
so a day costs ~50 intervals per series instead of 86,400 and stays exact: counts are
summed per chart bucket, percentiles over a range come from merging the `hdr` histograms
read, Wallaroo's bins from the merged histogram. Decoded histograms are cached by their
blob (collector/query/series.py), so a live page re-decodes only the intervals that are new or re-emitted.
Every value from a user (run, step, pipeline, worker, times) is a bound parameter.

`runs` and `backpressure` are optional: a run without them still lists. The job page's other
reads (backpressure, Spark batches, the ingress, markers) are in collector/query/panels.py.
"""
from __future__ import annotations

import functools
import time
from collections import defaultdict
from typing import Mapping, Sequence

from collector.bins import UiBin, ui_bins
from collector.histogram import LatencyHistogram
from collector.influx import RP_ROLLUP, InfluxClient, InfluxError
from collector.points import INTERVAL_TAG, interval_label

from collector.query.run_ends import STATUS_LIVE, QueryEnd, newest, query_end, run_status_of
from collector.query.spark_panels import QuerySummary, SparkPanelStore, newest_app, parse_steps
from collector.query.ranges import TimeRange, format_time, is_live
from collector.run_status import STATUS_FINISHED
from collector.units import NS
from collector.query.resolution import BASE_S, ROLLUPS_S, bucket_of, missing, plan, rollups_up_to
from collector.vocabulary import BACKPRESSURE, LATENCY, RUNS, STEP_JOB, TAG_PIPELINE, TAG_RUN, TAG_STEP, TAG_WORKER
from collector.query.series import (MARKET_SPREAD_STEPS, START_TO_END, WALLAROO_PERCENTILES, JobView, RunInfo, SeriesKey,
                                    StepView, TimeSeries, group_stats, is_market_spread, last_step,
                                    merge_blobs, step_order, step_rank)

RUN_SUMMARY_WINDOW_NS = 60 * NS          # the runs page's throughput and p99: a run's last minute
SETTLE_NS = 5 * NS       # rollups that ended longer ago than this have been written (2 s grace + sending)
_SERIES_TAGS = '"step", "pipeline", "worker"'


class MetricsStore(SparkPanelStore):
    """Read-only queries of the `latency` (and optional Spark) measurements of one database."""

    def __init__(self, client: InfluxClient):
        super().__init__(client)
        self._rollups = True
        self._finished_events: dict[str, tuple[tuple[int, int], int, float]] = {}

    # -- helpers

    def _blocks(self, run: str, rng: TimeRange, fields: Sequence[str], top_s: int, **tags: str | None
                ) -> dict[SeriesKey, list[tuple[int, list]]]:
        """Return {series: [(interval start ns, field values)]} covering the range exactly.

        Rollups no coarser than `top_s` where they exist, 1-s points elsewhere
        (collector/query/resolution.py). One request reads every length at once; only rollups
        found missing (a restart, old data) cost another round, for finer lengths.
        """
        where, params = self._where(run, None, **tags)
        cols = ", ".join(f'"{f}"' for f in fields)
        lengths = rollups_up_to(top_s) if self._rollups else ()
        out: dict[SeriesKey, list[tuple[int, list]]] = defaultdict(list)
        pending = [(rng, 0)]
        settled = time.time_ns() - SETTLE_NS
        while pending:
            reads = plan(pending, lengths, settled)
            stmts, p = [], dict(params)
            for i, r in enumerate(reads):
                span = f"time >= $s{i} AND time < $e{i}"
                p[f"s{i}"], p[f"e{i}"] = format_time(r.span.start_ns), format_time(r.span.end_ns)
                if r.size_s == BASE_S:
                    stmts.append(f'SELECT {cols} FROM "{LATENCY}" WHERE {where} AND {span} GROUP BY {_SERIES_TAGS}')
                else:
                    p[f"i{i}"] = interval_label(r.size_s * NS)
                    stmts.append(f'SELECT {cols} FROM "{RP_ROLLUP}"."{LATENCY}" WHERE {where} AND '
                                 f'"{INTERVAL_TAG}" = $i{i} AND {span} GROUP BY "{INTERVAL_TAG}", {_SERIES_TAGS}')
            try:
                series = self.client.query("; ".join(stmts), p)
            except InfluxError as e:
                if not lengths or e.status is None or self._has_rollup_policy():
                    raise
                self._rollups, lengths = False, ()   # a database without the rollup policy: 1-s points only
                continue
            level = {interval_label(s * NS): j for j, s in enumerate(lengths)}
            present: dict[int, set[int]] = defaultdict(set)
            for s in series:
                key = SeriesKey(s.tags.get(TAG_STEP, ""), s.tags.get(TAG_PIPELINE, ""), s.tags.get(TAG_WORKER, ""))
                out[key].extend((int(r[0]), r[1:]) for r in s.values)
                if s.tags.get(INTERVAL_TAG):
                    present[level[s.tags[INTERVAL_TAG]]].update(int(r[0]) for r in s.values)
            pending = missing(reads, present)
        return out

    def _has_rollup_policy(self) -> bool:
        return any(row[0] == RP_ROLLUP for s in self.client.query("SHOW RETENTION POLICIES") for row in s.values)

    def _counts(self, run: str, rng: TimeRange, interval_s: int, **tags: str | None
                ) -> dict[SeriesKey, list[tuple[int, int]]]:
        """Return {series: [(bucket start ns, events)]} summed per `interval_s` bucket."""
        out = {}
        for key, rows in self._blocks(run, rng, ("count",), interval_s, **tags).items():
            buckets: dict[int, int] = defaultdict(int)
            for t, (count,) in rows:
                if count is not None:
                    buckets[bucket_of(t, interval_s)] += int(count)
            out[key] = sorted(buckets.items())
        return out

    def _histograms(self, run: str, rng: TimeRange, **tags: str | None) -> dict[SeriesKey, LatencyHistogram]:
        """Return each series' histogram merged over the range (rollups where they exist)."""
        return {key: merge_blobs(r[0] for _, r in rows)
                for key, rows in self._blocks(run, rng, ("hdr",), ROLLUPS_S[0], **tags).items()}

    # -- runs

    def ping(self) -> bool:
        """Return whether InfluxDB answers."""
        return self.client.ping()

    def run_names(self) -> list[str]:
        """Return every run with latency data."""
        series = self.client.query(f'SHOW TAG VALUES FROM "{LATENCY}" WITH KEY = "run"')
        return sorted({v[1] for s in series for v in s.values})

    def runs(self, now_ns: int, only: str | None = None, summary: bool = True,
             windows: Mapping[str, TimeRange] | None = None) -> list[RunInfo]:
        """Return every run (or just `only`), newest first; `summary`: with its last minute's figures,
        or, for a run in `windows` (a performance test's measurement window), that window's.

        A run is any with `latency` points, or any streaming query's with `runs` or
        `spark_progress` points. Its status is how its queries' newest `runs` rows say they
        ended, or lost (collector/query/run_ends.py); a run without such rows is live while its
        points are fresh, else finished. Market Spread's runs count events and events/s from their
        start-to-end latency; any other query's throughput is the rows of its batches that
        started in the last 60 s before its newest batch's end, over 60 s (over its length when
        shorter), its events the rows its sources gave, its p99 that of its last step.
        """
        queries = self.query_summaries(only)
        names = [only] if only is not None else sorted(set(self.run_names()) | set(queries))
        if not names:
            return []
        where = '"run" = $run' if only is not None else "time > 0"
        params = {"run": only} if only is not None else None
        # first and last point per run and step: LIMIT 1 reads one block per series, not the whole run
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        seen: dict[str, dict[str, int]] = defaultdict(dict)
        q = "; ".join(f'SELECT "count" FROM "{LATENCY}" WHERE {where} GROUP BY "run", "step" ORDER BY time {order} '
                      'LIMIT 1' for order in ("ASC", "DESC"))
        for s in self.client.query(q, params):
            run, step = s.tags.get(TAG_RUN, ""), s.tags.get(TAG_STEP, "")
            for t, _ in s.values[:1]:
                first[run] = min(first.get(run, int(t)), int(t))
                last[run] = max(last.get(run, int(t)), int(t))
                seen[run][step] = min(seen[run].get(step, int(t)), int(t))
        bp = self._backpressure(only)
        spark_runs = {run: g for run, g in queries.items() if g.last_ns is not None and not is_market_spread(seen[run])}
        rates = self._last_minute_rates(spark_runs) if summary else {}
        out = []
        for run in names:
            g = queries.get(run)
            spark = run in spark_runs
            if run not in first and g is None:
                continue
            declared = g.declared_steps if g is not None else ()
            order, end_step = step_order(declared, seen[run]), last_step(declared, seen[run])
            times = [t for t in (first.get(run), last.get(run)) if t is not None]
            if spark:
                times += [t for t in (g.first_ns, g.last_ns, g.started_ns) if t is not None]
            elif g is not None and g.started_ns is not None and not times:
                times.append(g.started_ns)
            lo, hi = min(times), max(times)
            events = g.rows if spark else (self._run_events(run, lo, hi, is_live(hi, now_ns)) if run in first else 0)
            eps = p99 = None
            if summary and run in first and end_step is not None:
                window = (None if spark else (windows or {}).get(run)) or \
                    TimeRange(max(first[run], last[run] + NS - RUN_SUMMARY_WINDOW_NS), last[run] + NS)
                hist = LatencyHistogram()
                for h in self._histograms(run, window, step=end_step).values():
                    hist.add(h)
                if hist.total_count:
                    eps, p99 = hist.total_count / window.seconds, hist.value_at_percentile(99.0)
            if spark:
                eps = rates.get(run)
            end = _run_end(g, last[run] + NS if run in last else None, hi, now_ns)
            query_id = next((x.query_id for x in g.queries if x.query_id), None) if g is not None else None
            out.append(RunInfo(run, lo, hi, end.status == STATUS_LIVE or is_live(hi, now_ns), end.status, events,
                               eps, p99, bp.get(run), query_id, "rows/s" if spark else "events/s", end_step, order,
                               newest_app(g.queries) if g is not None else None, end.ended_ns, end.error,
                               end.seen_ns, g.last_end_ns if spark else None))
        return sorted(out, key=lambda r: r.last_ns, reverse=True)

    def _last_minute_rates(self, runs: Mapping[str, QuerySummary]) -> dict[str, float | None]:
        """Return each query run's rows/s over its last minute of batches (one request for all).

        The batches counted are those whose trigger started in the 60 s before the newest
        batch's end; a run shorter than that is taken over its length, first trigger to last end.
        """
        starts, ends, seconds = {}, {}, {}
        for run, g in runs.items():
            end = g.last_end_ns if g.last_end_ns is not None else g.last_ns
            start = max(end - RUN_SUMMARY_WINDOW_NS, g.first_ns if g.first_ns is not None else end)
            if end > start:
                starts[run], ends[run], seconds[run] = start, end, (end - start) / NS
        rows = self.rows_since(starts, ends)
        return {run: rows[run] / seconds[run] for run in seconds}

    def _run_events(self, run: str, first_ns: int, last_ns: int, live: bool) -> int:
        """Return a run's start-to-end events (remembered for a minute once it has finished)."""
        known = self._finished_events.get(run)
        if known is not None and known[0] == (first_ns, last_ns) and time.monotonic() - known[2] < 60:
            return known[1]
        whole = self._blocks(run, TimeRange(first_ns, last_ns + NS), ("count",), ROLLUPS_S[0], step=START_TO_END)
        events = sum(int(c or 0) for rows in whole.values() for _, (c,) in rows)
        if not live:
            if len(self._finished_events) > 1000:
                self._finished_events.clear()
            self._finished_events[run] = ((first_ns, last_ns), events, time.monotonic())
        return events

    def run(self, run: str, now_ns: int) -> RunInfo | None:
        """Return one run without its last-minute figures (what the run's pages need); None if no data."""
        found = self.runs(now_ns, only=run, summary=False)
        return found[0] if found else None

    def _backpressure(self, only: str | None) -> dict[str, str]:
        where, params = (f'WHERE "run" = $run AND "step" = \'{STEP_JOB}\'', {"run": only}) if only else \
            (f"WHERE \"step\" = '{STEP_JOB}'", None)
        try:
            series = self.client.query(f'SELECT last("status") FROM "{BACKPRESSURE}" {where} GROUP BY "run"', params)
        except InfluxError as e:
            if e.status is None:
                raise
            return {}
        return {s.tags.get(TAG_RUN, ""): s.values[-1][1] for s in series if s.values}

    # -- job and step pages

    def steps(self, run: str) -> list[str]:
        """Return the steps a run has data for, in its job's order (`step_order`)."""
        series = self.client.query(
            f'SELECT "count" FROM "{LATENCY}" WHERE "run" = $run GROUP BY "step" ORDER BY time ASC LIMIT 1; '
            f'SELECT "steps" FROM "{RUNS}" WHERE "run" = $run GROUP BY "query" ORDER BY time DESC LIMIT 1', {"run": run})
        seen = {s.tags.get(TAG_STEP, ""): int(s.values[0][0]) for s in series if s.name == LATENCY and s.values}
        declared = tuple(dict.fromkeys(x for s in series if s.name != LATENCY for r in s.values
                                       for x in parse_steps(r[1])))
        order = step_order(declared, seen)
        return sorted(seen, key=lambda s: step_rank(s, order))

    def job_view(self, run: str, rng: TimeRange, interval_s: int, order: Sequence[str] = MARKET_SPREAD_STEPS,
                 end_step: str = START_TO_END) -> JobView:
        """Return the job page's tables and series for one run over a range.

        Steps follow the run's `order`; throughput, pipelines and the percentiles over
        time are those of `end_step` (start-to-end for Market Spread, else its last step).
        """
        step_rank_ = functools.partial(step_rank, order=tuple(order))
        hists = self._histograms(run, rng)
        counts = self._counts(run, rng, interval_s)

        def rollup(keyf, keep=lambda k: True, order=lambda label: label):
            merged: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
            per_time: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
            for k, h in hists.items():
                if keep(k):
                    merged[keyf(k)].add(h)
            for k, rows in counts.items():
                if keep(k):
                    for t, v in rows:
                        per_time[keyf(k)][t] += v
            return [group_stats(label, merged[label], [v / interval_s for v in per_time[label].values()])
                    for label in sorted(merged, key=order)]

        is_e2e = lambda k: k.step == end_step  # noqa: E731
        steps = rollup(lambda k: k.step, order=step_rank_)
        pipelines = rollup(lambda k: k.pipeline, is_e2e)
        workers = rollup(lambda k: f"{k.worker} · {k.step}", order=lambda s: (s.split(" · ")[0],
                                                                                step_rank_(s.split(" · ")[-1])))
        throughput = _rate_series({k: v for k, v in counts.items() if is_e2e(k)}, lambda k: k.pipeline, interval_s)
        events = sum(s.events for s in pipelines)
        return JobView(events, steps, pipelines, workers, throughput,
                       self.percentiles_over_time(run, rng, interval_s, end_step), interval_s)

    def percentiles_over_time(self, run: str, rng: TimeRange, interval_s: int, step: str) -> list[TimeSeries]:
        """Return p50/p99/p99.9 per bucket: the max over the workers' (and finer intervals') values."""
        names = ("p50", "p99", "p999")
        worst: dict[str, dict[int, float]] = {n: {} for n in names}
        for rows in self._blocks(run, rng, names, interval_s, step=step).values():
            for t, values in rows:
                b = bucket_of(t, interval_s)
                for n, v in zip(names, values):
                    if v is not None and v > worst[n].get(b, -1):
                        worst[n][b] = float(v)
        return [TimeSeries(n, tuple(sorted(worst[n])), tuple(worst[n][t] for t in sorted(worst[n])))
                for n in names if worst[n]]
    def step_histogram(self, run: str, step: str, rng: TimeRange, pipeline: str | None = None,
                       worker: str | None = None) -> LatencyHistogram:
        """Return one step's histogram merged over a range (and optionally one pipeline/worker)."""
        hist = LatencyHistogram()
        for h in self._histograms(run, rng, step=step, pipeline=pipeline, worker=worker).values():
            hist.add(h)
        return hist

    def bins(self, run: str, step: str, rng: TimeRange) -> list[UiBin]:
        """Return the Wallaroo UI bins of a step over a range (from its merged histogram: exact)."""
        return ui_bins(self.step_histogram(run, step, rng))

    def step_filters(self, run: str, step: str) -> tuple[list[str], list[str]]:
        """Return the pipelines and workers a step of a run has data for."""
        series = self.client.query(f'SHOW TAG VALUES FROM "{LATENCY}" WITH KEY IN ("pipeline", "worker") '
                                   'WHERE "run" = $run AND "step" = $step', {"run": run, "step": step})
        found: dict[str, set[str]] = {"pipeline": set(), "worker": set()}
        for s in series:
            for key, value in s.values:
                found.setdefault(key, set()).add(value)
        return sorted(found["pipeline"]), sorted(found["worker"])

    def step_view(self, run: str, step: str, rng: TimeRange, interval_s: int, pipeline: str | None = None,
                  worker: str | None = None) -> StepView:
        """Return the step page's data for one step of a run over a range (optionally one pipeline/worker)."""
        hists = self._histograms(run, rng, step=step, pipeline=pipeline, worker=worker)
        counts = self._counts(run, rng, interval_s, step=step, pipeline=pipeline, worker=worker)
        total = LatencyHistogram()
        by_worker: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
        for k, h in hists.items():
            total.add(h)
            by_worker[k.worker].add(h)
        worker_rates: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for k, rows in counts.items():
            for t, v in rows:
                worker_rates[k.worker][t] += v
        workers = [group_stats(w, by_worker[w], [v / interval_s for v in worker_rates[w].values()])
                   for w in sorted(by_worker)]
        return StepView(total.total_count, ui_bins(total), total,
                        total.percentiles(WALLAROO_PERCENTILES), _rate_series(counts, lambda k: k.pipeline, interval_s),
                        workers, interval_s)


def _run_end(g: QuerySummary | None, latency_end_ns: int | None, last_ns: int, now_ns: int) -> QueryEnd:
    """Return how a run ended: its queries' `runs` rows (a running one gone quiet is lost); without rows,
    live while its points are fresh, else finished.

    A query's sign of life is the newest of its heartbeat, its newest batch's end, the run's
    newest latency interval's end and its start.
    """
    ends = [query_end(q.status, q.ended_ns, q.error, newest(q.last_seen_ns, q.batch_end_ns, latency_end_ns,
                                                              q.started_ns), now_ns)
            for q in (g.queries if g is not None else ())]
    end = run_status_of(ends)
    if end is None:
        return QueryEnd(STATUS_LIVE if is_live(last_ns, now_ns) else STATUS_FINISHED, None, None, last_ns)
    return end


def _rate_series(counts: Mapping[SeriesKey, list[tuple[int, int]]], keyf, interval_s: int) -> list[TimeSeries]:
    """Sum counts per group and bucket and return events/s series, one per group."""
    grouped: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for k, rows in counts.items():
        for t, v in rows:
            grouped[keyf(k)][t] += v
    return [TimeSeries(name, tuple(sorted(g)), tuple(g[t] / interval_s for t in sorted(g)))
            for name, g in sorted(grouped.items())]


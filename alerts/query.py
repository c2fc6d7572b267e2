"""Read a rule's metric from InfluxDB over its window (schema: docs/METRICS.md).

- latency percentiles merge the window's `hdr` histograms (exact, as the dashboard does:
  `collector.query.series.merge_blobs`, whose decode cache makes a re-evaluation decode only
  the intervals that are new);
- throughput is the window's `sum("count")` of the step divided by its length; the
  window ends `SETTLE_S` before now because intervals are written once closed, a few
  seconds late, and an open one would read as a drop;
- backlog and backpressure are the means of the `backpressure` measurement's `backlog`
  and `backpressured_share` (step `job`), the worst job when the rule names none;
- a Spark query's generic figures (`rows_behind`, `batch_duration > trigger`, ...) are read
  by `alerts.figure_query`, one request per evaluation.

Every scope value is a bound parameter; nothing a user typed is spliced into InfluxQL.
"""
from __future__ import annotations

from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient
from collector.query.series import merge_blobs
from collector.query.ranges import format_time
from collector.units import NS
from collector.vocabulary import BACKPRESSURE as BACKPRESSURE_MEASUREMENT, LATENCY, STEP_JOB, TAG_RUN, TAG_STEP

from alerts.figure_query import read_figure
from alerts.rules import BACKLOG, BACKPRESSURE, FIGURE, LATENCY as KIND_LATENCY, THROUGHPUT, Rule

SETTLE_S = 5.0
_JOB_FIELDS = {BACKLOG: "backlog", BACKPRESSURE: "backpressured_share"}


class MetricReader:
    """Return the current value of a rule's metric, None when its window holds no data."""

    def __init__(self, client: InfluxClient, settle_s: float = SETTLE_S):
        self.client = client
        self.settle_s = settle_s

    def _where(self, rule: Rule, start_ns: int, end_ns: int, scoped: bool) -> tuple[str, dict]:
        clauses, params = ["time >= $start AND time < $end"], {"start": format_time(start_ns),
                                                                 "end": format_time(end_ns)}
        tags = {TAG_RUN: rule.job}
        if scoped:
            tags.update(step=rule.step, pipeline=rule.pipeline, worker=rule.worker)
        else:
            tags[TAG_STEP] = STEP_JOB
        for key, value in tags.items():
            if value is not None:
                clauses.append(f'"{key}" = ${key}')
                params[key] = value
        return " AND ".join(clauses), params

    def value(self, rule: Rule, now_ns: int) -> float | None:
        """Return the metric of `rule` over its window ending at `now_ns` (base units)."""
        kind = rule.condition.kind
        window_ns = int(rule.window_s * NS)
        if kind == FIGURE:
            return read_figure(self.client, rule, now_ns)
        if kind == KIND_LATENCY:
            where, params = self._where(rule, now_ns - window_ns, now_ns, True)
            hist = LatencyHistogram()
            for s in self.client.query(f'SELECT "hdr" FROM "{LATENCY}" WHERE {where}', params):
                hist.add(merge_blobs(v[1] for v in s.values))
            return float(hist.value_at_percentile(rule.condition.percentile)) if hist.total_count else None
        if kind == THROUGHPUT:
            end = now_ns - int(self.settle_s * NS)
            where, params = self._where(rule, end - window_ns, end, True)
            series = self.client.query(f'SELECT sum("count") FROM "{LATENCY}" WHERE {where}', params)
            total = sum(v[1] or 0 for s in series for v in s.values)
            return total / rule.window_s if series else None
        where, params = self._where(rule, now_ns - window_ns, now_ns, False)
        q = f'SELECT mean("{_JOB_FIELDS[kind]}") FROM "{BACKPRESSURE_MEASUREMENT}" WHERE {where} GROUP BY "run"'
        means = [v[1] for s in self.client.query(q, params) for v in s.values if v[1] is not None]
        return float(max(means)) if means else None

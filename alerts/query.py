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
  by `alerts.figure_query`, one request per evaluation;
- `batch_age` and `status = failed|lost` read each query as it stands now, not over the
  window (`alerts.run_query`): a dead query writes nothing.

`read` also names the series that gave the value (job, query, run id ...): what a
notification says the alert is about.

Every scope value is a bound parameter; nothing a user typed is spliced into InfluxQL.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient
from collector.query.series import merge_blobs
from collector.query.ranges import format_time
from collector.units import NS
from collector.vocabulary import BACKPRESSURE as BACKPRESSURE_MEASUREMENT, LATENCY, STEP_JOB, TAG_RUN, TAG_STEP

from alerts.figure_query import read_figure_series
from alerts.figures import AGE, FIGURES
from alerts.rules import BACKLOG, BACKPRESSURE, FIGURE, LATENCY as KIND_LATENCY, STATUS, THROUGHPUT, Rule
from alerts.run_query import read_queries, status_now

SETTLE_S = 5.0
_JOB_FIELDS = {BACKLOG: "backlog", BACKPRESSURE: "backpressured_share"}
#: series tag -> the label a notification names it by
_LABELS = {TAG_RUN: "job", "query": "query", "run_id": "run_id", "source": "source", "operator": "operator",
           "app": "app", "executor": "executor"}


@dataclass(frozen=True)
class Reading:
    """A rule's value now (None: no data) and the labels of the series it came from."""
    value: float | None
    labels: Mapping[str, str] = field(default_factory=dict)


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
        return self.read(rule, now_ns).value

    def read(self, rule: Rule, now_ns: int) -> Reading:
        """Return the metric of `rule` at `now_ns` and the labels of the series that gave it."""
        kind = rule.condition.kind
        scope = {"job": rule.job} if rule.job else {}
        if kind == STATUS or (kind == FIGURE and FIGURES[rule.condition.metric].aggregate == AGE):
            return self._read_now(rule, now_ns)
        if kind == FIGURE:
            value, tags = read_figure_series(self.client, rule, now_ns)
            return Reading(value, {**scope, **{_LABELS[k]: v for k, v in tags.items() if k in _LABELS and v}})
        return Reading(self._value(rule, now_ns), scope)

    def _read_now(self, rule: Rule, now_ns: int) -> Reading:
        """Return `batch_age` (the oldest of the scope's live queries) or whether a newest run stands so."""
        queries = read_queries(self.client, rule.job, rule.query, now_ns)
        if rule.condition.kind == STATUS:
            judged = [(q, status_now(q, now_ns)) for q in queries]
            judged = [(q, st) for q, st in judged if st is not None]
            if not judged:
                return Reading(None, {})
            hit = [q for q, st in judged if st in rule.condition.statuses]
            q = hit[0] if hit else judged[0][0]
            return Reading(1.0 if hit else 0.0, q.labels())
        ages = [(age, q) for q in queries if (age := q.batch_age_ns(now_ns)) is not None]
        if not ages:
            return Reading(None, {})
        age, q = max(ages, key=lambda x: x[0])
        return Reading(float(age), q.labels())

    def _value(self, rule: Rule, now_ns: int) -> float | None:
        kind = rule.condition.kind
        window_ns = int(rule.window_s * NS)
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

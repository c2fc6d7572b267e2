"""Read a rule's metric now, through the metrics backend's reader (schema: docs/METRICS.md).

Every condition but two reads one catalogue figure over the rule's window
(`alerts.figure_read`: latency percentiles, throughput, backlog, backpressure and any
Spark query's figures alike). `batch_age` and `status = failed|lost` read each query as
it stands now, not over the window (`MetricsReader.queries_now`): a dead query writes
nothing, so a window would hold no data exactly when the rule matters.

- `status`: the newest run of each query of the scope is judged (`status_now`: its
  recorded status, or *lost* for a running run gone quiet); the value is 1 when one of
  them stands as the rule says, else 0;
- `batch_age`: now − the newest of (its last batch's end, the newest run's start), for a
  query whose newest run has not finished or stopped; the oldest such query counts.

`read` also names the series that gave the value (job, query, run id ...): what a
notification says the alert is about.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from collector.catalogue import OWN
from collector.metrics.views import QueryNow, status_now
from collector.vocabulary import TAG_RUN, TAG_RUN_ID

from alerts.figure_read import SETTLE_S, figure_of, read_figure_series
from alerts.figures import AGE, FIGURES
from alerts.rules import FIGURE, STATUS, Rule
from alerts.wiring import reader_of

__all__ = ["SETTLE_S", "MetricReader", "QueryNow", "Reading", "status_now"]

#: series tag -> the label a notification names it by
_LABELS = {TAG_RUN: "job", "query": "query", TAG_RUN_ID: "run_id", "source": "source", "operator": "operator",
           "app": "app", "executor": "executor"}


@dataclass(frozen=True)
class Reading:
    """A rule's value now (None: no data) and the labels of the series it came from."""
    value: float | None
    labels: Mapping[str, str] = field(default_factory=dict)


class MetricReader:
    """Return the current value of a rule's metric, None when its window holds no data.

    `source`: a `MetricsReader` (or an `InfluxClient`, read through the InfluxDB reader).
    """

    def __init__(self, source, settle_s: float = SETTLE_S):
        self.reader = reader_of(source)
        self.settle_s = settle_s

    def value(self, rule: Rule, now_ns: int) -> float | None:
        """Return the metric of `rule` over its window ending at `now_ns` (base units)."""
        return self.read(rule, now_ns).value

    def read(self, rule: Rule, now_ns: int) -> Reading:
        """Return the metric of `rule` at `now_ns` and the labels of the series that gave it."""
        kind = rule.condition.kind
        scope = {"job": rule.job} if rule.job else {}
        if kind == STATUS or (kind == FIGURE and FIGURES[rule.condition.metric].aggregate == AGE):
            return self._read_now(rule, now_ns)
        value, tags = read_figure_series(self.reader, rule, now_ns, self.settle_s)
        if figure_of(rule)[0].condition == OWN:          # a step's or the job's own figure: named by the rule
            return Reading(value, scope)
        return Reading(value, {**scope, **{_LABELS[k]: v for k, v in tags.items() if k in _LABELS and v}})

    def _read_now(self, rule: Rule, now_ns: int) -> Reading:
        """Return `batch_age` (the oldest of the scope's live queries) or whether a newest run stands so."""
        queries = self.reader.queries_now(rule.job, rule.query, now_ns)
        if rule.condition.kind == STATUS:
            judged = [(q, st) for q in queries if (st := status_now(q, now_ns)) is not None]
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

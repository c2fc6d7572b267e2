"""A rule's figure as one catalogue read: the request (pure) and its worst series.

Every condition but a run's status and `batch_age` reads one figure of the catalogue
(`collector.catalogue`) over the rule's window, through `MetricsReader.read_figure`:

- `p99 > 5ms`: the `latency` figure, the scope's histograms merged, its percentile;
- `throughput < 10k/s`: the step's events over the window's length, the window ending
  `SETTLE_S` before now (intervals are written once closed, a few seconds late, and an
  open one would read as a drop);
- `backlog > 1M`, `backpressure > 50%`: the `backpressure` measurement's means (step
  `job`), the worst job when the rule names none;
- a Spark query's generic figures (`rows_behind > 1M`, `max(batch_duration) > 30s`): one
  aggregate per series of the scope (run and query, plus source or operator; app and
  executor), scaled to base units; the worst series counts: the highest for `>`/`>=`, the
  lowest for `<`/`<=`;
- `figure op figure`: per series, the share of the window's batches that hold both
  fields and meet the comparison; the highest share counts (`alerts.figures.MOST`).

A run's start-up batch (its first: query planning and a cold JVM, often several triggers
long; tagged `phase=startup` by the listener) is left out of the batch-timing figures
(`Figure.steady`), so a restart never trips `batch_duration > trigger`.
"""
from __future__ import annotations

from collector.catalogue import FIGURES as CATALOGUE, EXECUTOR, JOB, LEVELS, OWN, STEPS, Figure
from collector.metrics.backend import MetricsReader
from collector.metrics.views import FigureRequest
from collector.units import NS
from collector.vocabulary import SPARK_PROGRESS, TAG_APP, TAG_EXECUTOR, TAG_OPERATOR, TAG_PIPELINE, TAG_QUERY, \
    TAG_RUN, TAG_SOURCE, TAG_STEP, TAG_WORKER

from alerts.figures import level_of
from alerts.rules import FIGURE, LATENCY, Rule

SETTLE_S = 5.0
#: rule attribute -> tag, for the scope values a rule may name
SCOPE_TAGS = (("job", TAG_RUN), ("query", TAG_QUERY), ("source", TAG_SOURCE), ("operator", TAG_OPERATOR),
              ("app", TAG_APP), ("executor", TAG_EXECUTOR), ("step", TAG_STEP), ("pipeline", TAG_PIPELINE),
              ("worker", TAG_WORKER))


def figure_of(rule: Rule) -> tuple[Figure, str]:
    """Return the catalogue figure a rule reads and the level it reads it at."""
    cond = rule.condition
    figure = CATALOGUE[cond.figure]
    if cond.kind == FIGURE:
        return figure, EXECUTOR if EXECUTOR in figure.fields else level_of(figure, rule.source, rule.operator)
    return figure, STEPS if STEPS in figure.fields else JOB


def figure_request(rule: Rule, start_ns: int, end_ns: int) -> FigureRequest:
    """Return the read of `rule`'s figure over [start, end) (its scope's values are the rule's)."""
    cond = rule.condition
    figure, level = figure_of(rule)
    lv = LEVELS[level]
    scope = tuple((tag, getattr(rule, attr)) for attr, tag in SCOPE_TAGS if getattr(rule, attr) is not None)
    other = CATALOGUE[cond.against] if cond.against else None
    steady = lv.measurement == SPARK_PROGRESS and (figure.steady or (other is not None and other.steady))
    aggregate = cond.metric if cond.kind == LATENCY else cond.aggregate or figure.aggregate
    return FigureRequest(lv.measurement, figure.fields[level][0], aggregate, start_ns, end_ns, lv.tags,
                         scope + lv.where, histograms=cond.kind == LATENCY,
                         against=other.fields[level][0] if other else None, op=cond.op, steady=steady)


def read_figure_series(reader: MetricsReader, rule: Rule, now_ns: int,
                       settle_s: float = SETTLE_S) -> tuple[float | None, dict[str, str]]:
    """Return the rule's figure over its window ending at `now_ns` (base units) and the tags of the worst series."""
    cond = rule.condition
    figure, level = figure_of(rule)
    end = now_ns - int(settle_s * NS) if figure.settles else now_ns
    values = reader.read_figure(figure_request(rule, end - int(rule.window_s * NS), end))
    if not values:
        return None, {}
    if cond.against is not None:
        best = max(values, key=lambda s: s.value)
        return best.value, dict(best.tags)
    scale = figure.fields[level][1]
    worst = max if cond.op in (">", ">=") or figure.condition == OWN else min
    pick = worst(values, key=lambda s: s.value)
    return pick.value * scale, dict(pick.tags)


def read_figure(reader: MetricsReader, rule: Rule, now_ns: int) -> float | None:
    """Return the rule's figure over its window ending at `now_ns` (base units), None without data."""
    return read_figure_series(reader, rule, now_ns)[0]

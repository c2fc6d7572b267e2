"""Read a Spark query's generic figure for a rule: one InfluxQL request, bound parameters only.

`figure_query` builds the request (pure); `read_figure` runs it and reduces the series:

- `figure op threshold`: one aggregate per series of the scope (`GROUP BY` the level's
  tags: run and query, plus source or operator; app and executor), scaled to base units;
  the worst series counts: the highest for `>`/`>=`, the lowest for `<`/`<=`.
- `figure op figure`: two statements in the one request count, per series, the window's
  batches that have both fields and those that meet the comparison; the value is the
  highest share (`alerts.figures.MOST` decides the breach).

A run's start-up batch (its first: query planning and a cold JVM, often several triggers
long; tagged `phase=startup` by the listener) is left out of the batch-timing figures
(`Figure.steady`), so a restart never trips `batch_duration > trigger`.

Measurement, field and aggregate names come from `alerts.figures` (never from the user);
every scope value the user typed is a `$parameter`.
"""
from __future__ import annotations

from collector.influx import InfluxClient
from collector.query.ranges import format_time
from collector.units import NS
from collector.vocabulary import (PHASE_STARTUP, SPARK_PROGRESS, TAG_APP, TAG_EXECUTOR, TAG_OPERATOR, TAG_PHASE,
                                  TAG_QUERY, TAG_RUN, TAG_SOURCE)

from alerts.figures import EXECUTOR, FIGURES, INCREASE, LEVELS, level_of
from alerts.rules import Rule

#: rule attribute -> tag, for the scope values a rule may name
_SCOPE_TAGS = (("job", TAG_RUN), ("query", TAG_QUERY), ("source", TAG_SOURCE), ("operator", TAG_OPERATOR),
               ("app", TAG_APP), ("executor", TAG_EXECUTOR))


def influx_aggregate(aggregate: str, field: str) -> str:
    """Return the InfluxQL selector of `aggregate` over `field` (both checked: never user text)."""
    quoted = '"' + field + '"'
    if aggregate == INCREASE:
        return f"spread({quoted})"
    if aggregate.startswith("p"):
        return f"percentile({quoted}, {float(aggregate[1:]):g})"
    return f"{aggregate}({quoted})"


def figure_query(rule: Rule, start_ns: int, end_ns: int) -> tuple[str, dict]:
    """Return the InfluxQL and its parameters that read `rule`'s figure over [start, end)."""
    cond = rule.condition
    figure = FIGURES[cond.metric]
    level = EXECUTOR if EXECUTOR in figure.fields else level_of(figure, rule.source, rule.operator)
    measurement, tags = LEVELS[level][:2]
    clauses = ["time >= $start AND time < $end"]
    params = {"start": format_time(start_ns), "end": format_time(end_ns)}
    for attr, tag in _SCOPE_TAGS:
        value = getattr(rule, attr)
        if value is not None:
            clauses.append(f'"{tag}" = ${tag}')
            params[tag] = value
    if measurement == SPARK_PROGRESS and (figure.steady or (cond.against and FIGURES[cond.against].steady)):
        clauses.append(f'"{TAG_PHASE}" != \'{PHASE_STARTUP}\'')      # a run's start-up batch trips no rule
    where = " AND ".join(clauses)
    group = ", ".join(f'"{t}"' for t in tags)
    field = figure.fields[level][0]
    if cond.against is None:
        select = influx_aggregate(cond.aggregate or figure.aggregate, field)
        return f'SELECT {select} AS "value" FROM "{measurement}" WHERE {where} GROUP BY {group}', params
    other = FIGURES[cond.against].fields[level][0]
    both = f'("{field}" >= 0 OR "{field}" < 0) AND ("{other}" >= 0 OR "{other}" < 0)'    # both written
    met = f'"{field}" {cond.op} "{other}"'
    return (f'SELECT count("{field}") AS "met" FROM "{measurement}" WHERE {where} AND {met} GROUP BY {group}; '
            f'SELECT count("{field}") AS "batches" FROM "{measurement}" WHERE {where} AND {both} GROUP BY {group}',
            params)


def read_figure(client: InfluxClient, rule: Rule, now_ns: int) -> float | None:
    """Return the rule's figure over its window ending at `now_ns` (base units), None without data."""
    return read_figure_series(client, rule, now_ns)[0]


def read_figure_series(client: InfluxClient, rule: Rule, now_ns: int) -> tuple[float | None, dict[str, str]]:
    """Return the rule's figure over its window and the tags of the series that gave it (the worst)."""
    cond = rule.condition
    figure = FIGURES[cond.metric]
    level = EXECUTOR if EXECUTOR in figure.fields else level_of(figure, rule.source, rule.operator)
    q, params = figure_query(rule, now_ns - int(rule.window_s * NS), now_ns)
    series = client.query(q, params)
    if cond.against is not None:
        counts: dict[tuple, dict[str, int]] = {}
        for s in series:
            column = s.columns[-1]
            key = tuple(sorted(s.tags.items()))
            counts.setdefault(key, {})[column] = sum(v[-1] for v in s.values if isinstance(v[-1], int))
        shares = [(c.get("met", 0) / c["batches"], dict(k)) for k, c in counts.items() if c.get("batches")]
        return max(shares, key=lambda x: x[0]) if shares else (None, {})
    scale = figure.fields[level][1]
    # a field written once with another type (a hand-made point) is skipped, not a failed cycle
    values = [(float(v[-1]) * scale, s.tags) for s in series for v in s.values
              if isinstance(v[-1], (int, float)) and not isinstance(v[-1], bool)]
    if not values:
        return None, {}
    value, tags = (max if cond.op in (">", ">=") else min)(values, key=lambda x: x[0])
    return value, dict(tags)

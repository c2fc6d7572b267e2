"""A figure over a window, per series, in InfluxQL: `MetricsReader.read_figure` for InfluxDB.

`figure_influxql` builds the request (pure); `read_figure` runs it and reduces the series:

- an aggregate per series of the request's `group` (`GROUP BY` its tags): mean, max, min,
  last, sum, a percentile (InfluxQL's nearest-rank `percentile`), `increase` (`spread`),
  `per_second` (the sum over the window's length);
- histograms (`hdr` blobs): the window's blobs merged exactly (as the dashboard does,
  `collector.query.series.merge_blobs`, whose decode cache makes a re-read decode only the
  intervals that are new), then the percentile;
- a comparison of two fields: two statements in one request count, per series, the
  points holding both fields and those meeting the comparison; the value is their share.

Measurement, field and tag names come from the catalogue and the vocabulary (never from a
user); every scope value is a `$parameter`.
"""
from __future__ import annotations

from collector.catalogue import INCREASE, PER_SECOND
from collector.histogram import LatencyHistogram
from collector.influx.client import InfluxClient
from collector.metrics.views import FigureRequest, SeriesValue
from collector.query.ranges import format_time
from collector.query.series import merge_blobs
from collector.vocabulary import PHASE_STARTUP, TAG_PHASE

_OPS = (">", ">=", "<", "<=")


def selector(aggregate: str, field: str) -> str:
    """Return the InfluxQL selector of `aggregate` over `field` (both checked: never user text)."""
    quoted = '"' + field + '"'
    if aggregate == INCREASE:
        return f"spread({quoted})"
    if aggregate == PER_SECOND:
        return f"sum({quoted})"
    if aggregate.startswith("p"):
        return f"percentile({quoted}, {float(aggregate[1:]):g})"
    return f"{aggregate}({quoted})"


def figure_influxql(req: FigureRequest) -> tuple[str, dict]:
    """Return the InfluxQL and its parameters reading `req`."""
    clauses = ["time >= $start AND time < $end"]
    params = {"start": format_time(req.start_ns), "end": format_time(req.end_ns)}
    for tag, value in req.scope:
        clauses.append(f'"{tag}" = ${tag}')
        params[tag] = value
    if req.steady:
        clauses.append(f'"{TAG_PHASE}" != \'{PHASE_STARTUP}\'')      # a run's start-up batch trips no rule
    where = " AND ".join(clauses)
    group = (" GROUP BY " + ", ".join(f'"{t}"' for t in req.group)) if req.group else ""
    field = req.field
    if req.histograms:
        return f'SELECT "{field}" FROM "{req.measurement}" WHERE {where}{group}', params
    if req.against is None:
        return (f'SELECT {selector(req.aggregate, field)} AS "value" FROM "{req.measurement}" WHERE {where}{group}',
                params)
    if req.op not in _OPS:
        raise ValueError(f"comparison {req.op!r} is not one of {', '.join(_OPS)}")
    other = req.against
    both = f'("{field}" >= 0 OR "{field}" < 0) AND ("{other}" >= 0 OR "{other}" < 0)'    # both written
    met = f'"{field}" {req.op} "{other}"'
    return (f'SELECT count("{field}") AS "met" FROM "{req.measurement}" WHERE {where} AND {met}{group}; '
            f'SELECT count("{field}") AS "batches" FROM "{req.measurement}" WHERE {where} AND {both}{group}',
            params)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_figure(client: InfluxClient, req: FigureRequest) -> list[SeriesValue]:
    """Return `req`'s value per series that has one (raises InfluxError)."""
    q, params = figure_influxql(req)
    series = client.query(q, params)
    if req.histograms:
        out = []
        for s in series:
            hist = LatencyHistogram()
            hist.add(merge_blobs(v[1] for v in s.values))
            if hist.total_count:
                out.append(SeriesValue(dict(s.tags), float(hist.value_at_percentile(float(req.aggregate[1:])))))
        return out
    if req.against is not None:
        counts: dict[tuple, dict[str, int]] = {}
        for s in series:
            key = tuple(sorted(s.tags.items()))
            counts.setdefault(key, {})[s.columns[-1]] = sum(v[-1] for v in s.values if isinstance(v[-1], int))
        return [SeriesValue(dict(k), c.get("met", 0) / c["batches"]) for k, c in counts.items() if c.get("batches")]
    window_s = (req.end_ns - req.start_ns) / 1e9
    # a field written once with another type (a hand-made point) is skipped, not a failed read
    return [SeriesValue(dict(s.tags), float(v[-1]) / window_s if req.aggregate == PER_SECOND else float(v[-1]))
            for s in series for v in s.values if _number(v[-1])]

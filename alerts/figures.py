"""The catalogue's figures as generic alert conditions name them (pure).

A generic condition is `[aggregate(]figure[)] op threshold` or `figure op figure`:

- `max(batch_duration) > 30s`, `rows_behind > 1M`, `state_memory > 2GB`: the figure's
  value over the rule's window, by default its mean (`late_rows` and `input_rows`: their
  sum; `gc_time`: its increase), else the aggregate named: mean, max, min, last, sum or a
  percentile p50..p99.99 of its per-batch values. The worst series of the scope counts (the
  highest for `>`/`>=`, the lowest for `<`/`<=`).
- `batch_duration > trigger`, `input_rate > processing_rate`: the two figures of the same
  batch compared batch by batch; the value is the share of the window's batches that meet
  it, and the rule breaches when that is more than half (`MOST`).

The figures are the catalogue's (`collector.catalogue`: unit, origin, and where each is
written at each level: the whole query, one source, one stateful operator, one executor,
the application's executors as its driver sees them, where `executors_lost` and
`failed_tasks` read as their increase over the window, so `executors_lost > 0` fires while
a loss is within the window); this module is their alert view: thresholds in base units
(ns, rows, rows/s, bytes, a share 0..1, a count), aggregates, and values as a message says them.
"""
from __future__ import annotations

import re
from typing import Mapping

from collector.bins import format_ns
from collector.catalogue import (AGE, AGGREGATES, APPLICATION, BYTES, COUNT, DURATION, EXECUTOR, GENERIC, INCREASE,
                                 LEVELS, OPERATOR, QUERY, RATE, ROWS, SHARE, SOURCE, Figure)
from collector.catalogue import FIGURES as CATALOGUE

__all__ = ["AGE", "AGGREGATES", "APPLICATION", "BYTES", "COUNT", "DURATION", "EXECUTOR", "FIGURES", "FIGURE_NAMES",
           "INCREASE", "LEVELS", "MOST", "OPERATOR", "QUERY", "RATE", "ROWS", "SHARE", "SOURCE", "Figure",
           "check_aggregate", "format_value", "level_of", "parse_threshold"]

MOST = 0.5                      # a figure-to-figure rule breaches in more than half of the batches

_UNITS: Mapping[str, Mapping[str, float]] = {
    DURATION: {"ns": 1.0, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9, "h": 3600e9},
    ROWS: {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9},
    BYTES: {"": 1.0, "B": 1.0, "k": 1e3, "kB": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9,
            "KiB": 1024.0, "MiB": 1024.0 ** 2, "GiB": 1024.0 ** 3},
}
_UNIT_HELP = {DURATION: "a duration unit: ns, us, ms, s, min or h (e.g. 30s)",
              RATE: "rows per second, with k or M (e.g. 10k/s)",
              ROWS: "a count of rows, with k or M (e.g. 1M)",
              BYTES: "bytes: B, kB, MB, GB, KiB, MiB or GiB (e.g. 2GB)",
              SHARE: "a share: 0..1 or 0..100%",
              COUNT: "a count, with k or M (e.g. 0 or 10)"}

#: The figures a generic condition names: the catalogue's, in its order.
FIGURES: Mapping[str, Figure] = {name: f for name, f in CATALOGUE.items() if f.condition == GENERIC}
FIGURE_NAMES = ", ".join(FIGURES)

_PERCENTILE = re.compile(r"^p(\d{2}(?:\.\d{1,2})?)$")


def check_aggregate(name: str, figure: Figure) -> str:
    """Return a valid aggregate name for `figure` (lower case); raise ValueError naming the valid ones."""
    if figure.aggregate == INCREASE:
        raise ValueError(f"{figure.name} is cumulative: it is read as its increase over the window, "
                         "so write it without mean/max/p99")
    if figure.aggregate == AGE:
        raise ValueError(f"{figure.name} is read as it stands now, so write it without mean/max/p99")
    pm = _PERCENTILE.match(name)
    if pm and 50.0 <= float(pm[1]) <= 99.99:
        return name
    if name in AGGREGATES:
        return name
    raise ValueError(f"aggregate {name!r} is unknown: use {', '.join(AGGREGATES)} or p50..p99.99")


def parse_threshold(figure: Figure, num: float, unit: str) -> float:
    """Return `num unit` in the figure's base unit; raise ValueError if the unit does not fit."""
    kind = figure.unit
    base = unit.replace(" ", "")
    if kind == RATE:
        for suffix in ("rows/s", "/s"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
                break
        scales = _UNITS[ROWS]
    elif kind == ROWS:
        base = base[: -len("rows")] if base.endswith("rows") else base
        scales = _UNITS[ROWS]
    elif kind == COUNT:
        scales = _UNITS[ROWS]
    elif kind == SHARE:
        if unit not in ("", "%"):
            raise ValueError(f"{figure.name} threshold {num:g}{unit} must be {_UNIT_HELP[SHARE]}")
        share = num / 100.0 if unit == "%" else num
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{figure.name} threshold {num:g}{unit} is outside 0..100%")
        return share
    else:
        scales = _UNITS[kind]
    if base not in scales:
        raise ValueError(f"{figure.name} threshold {num:g}{unit} has the wrong unit: "
                         f"{figure.name} is {figure.about}, so give {_UNIT_HELP[kind]}")
    return num * scales[base]


def format_value(figure: Figure, value: float) -> str:
    """Return a measured value in the figure's terms ("1.2 s", "1,234,567 rows", "45.0 %")."""
    if figure.unit == DURATION:
        return format_ns(value)
    if figure.unit == RATE:
        return f"{value:,.0f} rows/s"
    if figure.unit == ROWS:
        return f"{value:,.0f} rows"
    if figure.unit == COUNT:
        return f"{value:,.0f}"
    if figure.unit == BYTES:
        for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if value >= scale:
                return f"{value / scale:.3g} {unit}"
        return f"{value:,.0f} B"
    return f"{100 * value:.1f} %"


def level_of(figure: Figure, source: str | None, operator: str | None) -> str:
    """Return the level a rule's scope reads `figure` at; raise ValueError if it has no value there."""
    if source is not None and operator is not None:
        raise ValueError("a rule names a source or an operator, not both")
    wanted = SOURCE if source is not None else OPERATOR if operator is not None else None
    if wanted is None:
        return figure.levels[0]
    if wanted not in figure.fields:
        having = ", ".join(f.name for f in FIGURES.values() if wanted in f.fields)
        raise ValueError(f"{figure.name} has no per-{wanted} value: leave {wanted} empty "
                         f"(per-{wanted} figures: {having})")
    return wanted

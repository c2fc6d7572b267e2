"""The figures any monitored Spark streaming query reports, as alert conditions name them (pure).

A generic condition is `[aggregate(]figure[)] op threshold` or `figure op figure`:

- `max(batch_duration) > 30s`, `rows_behind > 1M`, `state_memory > 2GB`: the figure's
  value over the rule's window, by default its mean (`late_rows` and `input_rows`: their
  sum; `gc_time`: its increase), else the aggregate named: mean, max, min, last, sum or a
  percentile p50..p99.99 of its per-batch values. The worst series of the scope counts (the
  highest for `>`/`>=`, the lowest for `<`/`<=`).
- `batch_duration > trigger`, `input_rate > processing_rate`: the two figures of the same
  batch compared batch by batch; the value is the share of the window's batches that meet
  it, and the rule breaches when that is more than half (`MOST`).

Each figure says where it is written (docs/METRICS.md) at each level it has: the whole
query (`spark_progress`), one source (`spark_source`), one stateful operator
(`spark_state`), one executor (`spark_executor`), the application's executors as its
driver sees them (`spark_executors`: `executors_lost`, `failed_tasks`, each its increase
over the window, so `executors_lost > 0` fires while a loss is within the window);
thresholds are in base units (ns, rows, rows/s, bytes, a share 0..1, a count), fields
scaled to them on reading.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from collector.bins import format_ns
from collector.vocabulary import (SPARK_EXECUTOR, SPARK_EXECUTORS, SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE, TAG_APP,
                                  TAG_EXECUTOR, TAG_OPERATOR, TAG_QUERY, TAG_RUN, TAG_SOURCE)

DURATION, RATE, ROWS, BYTES, SHARE, COUNT = "duration", "rate", "rows", "bytes", "share", "count"
QUERY, SOURCE, OPERATOR, EXECUTOR, APPLICATION = "query", "source", "operator", "executor", "application"
MOST = 0.5                      # a figure-to-figure rule breaches in more than half of the batches
AGGREGATES = ("mean", "max", "min", "last", "sum")
INCREASE = "increase"           # a cumulative counter's growth over the window (InfluxQL spread)
AGE = "age"                     # time since the newest point, read at evaluation (alerts.run_query)

#: level -> (measurement, tags that identify one series of it)
LEVELS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    QUERY: (SPARK_PROGRESS, (TAG_RUN, TAG_QUERY)),
    SOURCE: (SPARK_SOURCE, (TAG_RUN, TAG_QUERY, TAG_SOURCE)),
    OPERATOR: (SPARK_STATE, (TAG_RUN, TAG_QUERY, TAG_OPERATOR)),
    EXECUTOR: (SPARK_EXECUTOR, (TAG_APP, TAG_EXECUTOR)),
    APPLICATION: (SPARK_EXECUTORS, (TAG_RUN, TAG_APP)),
}

_MS = 1e6                       # a field in ms, in ns
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


@dataclass(frozen=True)
class Figure:
    """One generic figure: its unit and, per level, the field (with its scale to base units)."""
    name: str
    unit: str
    fields: Mapping[str, tuple[str, float]]       # level -> (field, scale to base units)
    aggregate: str = "mean"
    about: str = ""
    steady: bool = False            # read without each run's start-up batch (planning, a cold JVM)

    @property
    def levels(self) -> tuple[str, ...]:
        """Return the levels this figure is written at, the default first."""
        return tuple(self.fields)


FIGURES: Mapping[str, Figure] = {f.name: f for f in (
    Figure("batch_duration", DURATION, {QUERY: ("batch_ms", _MS)}, about="a micro-batch's duration", steady=True),
    Figure("batch_age", DURATION, {QUERY: ("batch_ms", _MS)}, AGE,
           about="time since the query's last batch ended (or its run started), growing while the query "
                 "is dead, stuck or starved; none once its run finished or was stopped"),
    Figure("trigger", DURATION, {QUERY: ("trigger_ms", _MS)}, about="the query's trigger interval"),
    Figure("overrun_share", SHARE, {QUERY: ("overran", 1.0)}, about="share of batches longer than the trigger",
           steady=True),
    Figure("input_rate", RATE, {QUERY: ("input_rows_per_s", 1.0), SOURCE: ("input_rows_per_s", 1.0)},
           about="rows/s arriving (Spark's inputRowsPerSecond)"),
    Figure("processing_rate", RATE, {QUERY: ("processed_rows_per_s", 1.0), SOURCE: ("processed_rows_per_s", 1.0)},
           about="rows/s processed (Spark's processedRowsPerSecond)", steady=True),
    Figure("input_rows", ROWS, {QUERY: ("input_rows", 1.0), SOURCE: ("input_rows", 1.0)}, "sum",
           about="rows read"),
    Figure("rows_behind", ROWS, {QUERY: ("rows_behind", 1.0), SOURCE: ("rows_behind", 1.0)},
           about="rows the sources are behind their latest offsets"),
    Figure("files_behind", ROWS, {SOURCE: ("files_behind", 1.0)}, about="files a file source has not read"),
    Figure("watermark_delay", DURATION, {QUERY: ("watermark_delay_ms", _MS)},
           about="trigger start minus the watermark"),
    Figure("late_rows", ROWS, {QUERY: ("late_rows", 1.0), OPERATOR: ("late_rows", 1.0)}, "sum",
           about="rows dropped by the watermark"),
    Figure("state_rows", ROWS, {QUERY: ("state_rows", 1.0), OPERATOR: ("rows_total", 1.0)},
           about="rows held in state"),
    Figure("state_memory", BYTES, {QUERY: ("state_memory_bytes", 1.0), OPERATOR: ("memory_bytes", 1.0)},
           about="memory of the state stores"),
    Figure("heap_used", BYTES, {EXECUTOR: ("heap_used_bytes", 1.0)}, about="an executor's JVM heap in use"),
    Figure("gc_time", DURATION, {EXECUTOR: ("gc_time_ms", _MS)}, INCREASE,
           about="an executor's JVM garbage-collection time within the window"),
    Figure("executors_lost", COUNT, {APPLICATION: ("lost", 1.0)}, INCREASE,
           about="executors the application lost within the window (a worker gone, an executor killed)"),
    Figure("failed_tasks", COUNT, {APPLICATION: ("failed_tasks", 1.0)}, INCREASE,
           about="task attempts that failed within the window (Spark ran them again)"),
)}
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


def influx_aggregate(aggregate: str, field: str) -> str:
    """Return the InfluxQL selector of `aggregate` over `field` (both checked: never user text)."""
    quoted = '"' + field + '"'
    if aggregate == INCREASE:
        return f"spread({quoted})"
    if aggregate.startswith("p"):
        return f"percentile({quoted}, {float(aggregate[1:]):g})"
    return f"{aggregate}({quoted})"


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

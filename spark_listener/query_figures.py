"""What any Structured Streaming query reports of itself, read from its progress (pure, no Spark).

Spark's `StreamingQueryProgress` carries, for every query whatever its sources and sinks,
the rows each source gave the batch and Spark's own input and processing rates, each
stateful operator's rows and memory, and the event-time watermark. Those become the
`spark_source` and `spark_state` points and the generic fields of `spark_progress`
(docs/METRICS.md). Only how far behind a source is needs to know the source: its offsets
mean rows for Kafka-style `{topic: {partition: offset}}` offsets and the project's own
`{"seq": n}`, seconds for Spark's `rate` source (rows = seconds x its `rowsPerSecond`),
and nothing countable for the others, whose figure is then left out rather than guessed.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from collector.names import MAX_TAG_CHARS

_RATE = re.compile(r"^RateStreamV2\[rowsPerSecond=(\d+)")
_SHORT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class SourceFigures:
    """One source's part of a batch: its tag, rows, Spark's rates and how far behind it is."""
    source: str                       # "<index>:<short name>", e.g. "0:RateStreamV2"
    input_rows: int
    input_rows_per_s: float | None
    processed_rows_per_s: float | None
    rows_behind: int | None
    files_behind: int | None


@dataclass(frozen=True)
class StateFigures:
    """One stateful operator's figures after a batch."""
    operator: str                     # "<index>:<operatorName>", e.g. "0:stateStoreSave"
    rows_total: int
    rows_updated: int
    rows_removed: int
    memory_bytes: int
    late_rows: int                    # rows dropped by the watermark in this batch


def _number(v: Any) -> float | None:
    """Return `v` as a finite float, or None (Spark writes NaN rates for an empty interval)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _int(v: Any) -> int:
    f = _number(v)
    return int(f) if f is not None else 0


def parse_offset(raw: Any) -> Any:
    """Return a source offset as JSON data (PySpark hands them over as text, "None" for null)."""
    if isinstance(raw, str):
        if raw in ("", "None", "null"):
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None
    return raw


def _kafka_rows(end: Any, latest: Any) -> int | None:
    """Sum latest - end over the partitions of `{topic: {partition: offset}}` offsets."""
    total, found = 0, False
    for topic, parts in latest.items():
        ends = end.get(topic) if isinstance(end, dict) else None
        if not isinstance(parts, dict) or not isinstance(ends, dict):
            return None
        for part, off in parts.items():
            if isinstance(off, int) and isinstance(ends.get(part), int):
                total += max(0, off - ends[part])
                found = True
    return total if found else None


def rows_behind(description: str, end: Any, latest: Any) -> int | None:
    """Return how many rows the source holds beyond the batch's end, where its offsets tell."""
    end, latest = parse_offset(end), parse_offset(latest)
    if latest is None or end is None:
        return None
    rate = _RATE.match(description or "")
    if rate and isinstance(end, int) and isinstance(latest, int):
        return max(0, latest - end) * int(rate.group(1))
    if isinstance(end, dict) and isinstance(latest, dict):
        if isinstance(end.get("seq"), int) and isinstance(latest.get("seq"), int):
            return max(0, latest["seq"] - end["seq"])
        if latest and all(isinstance(v, dict) for v in latest.values()):
            return _kafka_rows(end, latest)
    return None


def short_name(description: str) -> str:
    """Return the leading identifier of a source's description ("RateStreamV2[...]" -> "RateStreamV2")."""
    m = _SHORT.match(description or "")
    return m.group(0)[:60] if m else "source"


def _tag(index: int, name: str) -> str:
    # tag values are bounded, never paths (collector.names.check_tag_value)
    return f"{index}:{name}".replace("/", "_").replace("\\", "_").replace("..", "_")[:MAX_TAG_CHARS]


def source_figures(sources) -> tuple[SourceFigures, ...]:
    """Return each source's figures, in the query's source order."""
    out = []
    for i, src in enumerate(sources or ()):
        desc = str(getattr(src, "description", "") or "")
        metrics = dict(getattr(src, "metrics", None) or {})
        files = _number(metrics.get("numFilesOutstanding"))
        out.append(SourceFigures(
            source=_tag(i, short_name(desc)), input_rows=_int(getattr(src, "numInputRows", 0)),
            input_rows_per_s=_number(getattr(src, "inputRowsPerSecond", None)),
            processed_rows_per_s=_number(getattr(src, "processedRowsPerSecond", None)),
            rows_behind=rows_behind(desc, getattr(src, "endOffset", None), getattr(src, "latestOffset", None)),
            files_behind=int(files) if files is not None else None))
    return tuple(out)


def state_figures(operators) -> tuple[StateFigures, ...]:
    """Return each stateful operator's figures, in the plan's order."""
    out = []
    for i, op in enumerate(operators or ()):
        name = str(getattr(op, "operatorName", "") or "state")
        out.append(StateFigures(
            operator=_tag(i, short_name(name)), rows_total=_int(getattr(op, "numRowsTotal", 0)),
            rows_updated=_int(getattr(op, "numRowsUpdated", 0)), rows_removed=_int(getattr(op, "numRowsRemoved", 0)),
            memory_bytes=_int(getattr(op, "memoryUsedBytes", 0)),
            late_rows=_int(getattr(op, "numRowsDroppedByWatermark", 0))))
    return tuple(out)


def watermark_ns(event_time, parse) -> int | None:
    """Return the query's watermark (ns since the epoch) from `eventTime`, or None without one.

    Spark reports the epoch itself (1970-01-01) until the first watermark is set: that is
    no watermark yet.
    """
    raw = dict(event_time or {}).get("watermark")
    if not raw:
        return None
    try:
        ns = parse(str(raw))
    except ValueError:
        return None
    return ns if ns > 0 else None

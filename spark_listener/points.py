"""A batch's progress as InfluxDB points: `spark_progress`, `spark_source`, `spark_state` (docs/METRICS.md).

Pure conversion of the listener's records (records.py); the listener's consumer thread
calls these, never Spark's callback thread. Every point carries the query's ids
(`query_tags`): Spark's query id, stable across restarts from one checkpoint, and its
runId, one per start.
"""
from __future__ import annotations

from collector.influx import Point
from collector.vocabulary import (PHASE_STARTUP, SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE, TAG_OPERATOR, TAG_PHASE,
                                  TAG_QUERY, TAG_QUERY_ID, TAG_RUN, TAG_RUN_ID, TAG_SOURCE)

from spark_listener.records import BatchProgress


def query_tags(r: BatchProgress) -> dict[str, str]:
    """The tags of every point of a query run: run, query, query_id, run_id."""
    return {TAG_RUN: r.run, TAG_QUERY: r.query, TAG_QUERY_ID: r.query_id, TAG_RUN_ID: r.run_id}


def progress_point(r: BatchProgress, dropped: int = 0, trigger_ms: int | None = None, startup: bool = False) -> Point:
    """One `spark_progress` point (`query_tags`) at the batch's trigger start.

    `trigger_ms`: the query's processing-time trigger interval, when it has one; the
    point then says whether the batch overran it. `startup`: the run's first batch (query
    planning, a cold JVM), tagged `phase=startup` so batch-timing alert rules leave it out.
    """
    fields: dict[str, int | float | str] = {"batch_id": r.batch_id, "batch_ms": r.batch_ms,
                                            "input_blocks": r.input_blocks, "input_rows": r.input_blocks,
                                            "dropped_records": dropped}
    for name in ("events", "state_rows", "state_memory_bytes", "backlog", "end_seq", "late_rows", "rows_behind",
                 "watermark_ns"):
        v = getattr(r, name)
        if v is not None:
            fields[name] = int(v)
    for name in ("input_events_per_s", "processed_events_per_s", "input_rows_per_s", "processed_rows_per_s"):
        v = getattr(r, name)
        if v is not None:
            fields[name] = float(v)
    if r.watermark_ns is not None:
        fields["watermark_delay_ms"] = (r.ts_ns - r.watermark_ns) // 1_000_000
    if trigger_ms:
        fields["trigger_ms"] = int(trigger_ms)
        fields["overran"] = int(r.batch_ms > trigger_ms)
    for phase, ms in r.durations_ms.items():
        fields[f"{phase}_ms"] = int(ms)
    tags = query_tags(r)
    if startup:
        tags[TAG_PHASE] = PHASE_STARTUP
    return Point(SPARK_PROGRESS, tags, fields, r.ts_ns)


def source_points(r: BatchProgress) -> list[Point]:
    """One `spark_source` point (`query_tags`, source) per source of the batch."""
    out = []
    for s in r.sources:
        fields: dict[str, int | float | str] = {"input_rows": s.input_rows}
        for name in ("input_rows_per_s", "processed_rows_per_s"):
            v = getattr(s, name)
            if v is not None:
                fields[name] = float(v)
        for name in ("rows_behind", "files_behind"):
            v = getattr(s, name)
            if v is not None:
                fields[name] = int(v)
        out.append(Point(SPARK_SOURCE, {**query_tags(r), TAG_SOURCE: s.source}, fields, r.ts_ns))
    return out


def state_points(r: BatchProgress) -> list[Point]:
    """One `spark_state` point (`query_tags`, operator) per stateful operator of the batch."""
    return [Point(SPARK_STATE, {**query_tags(r), TAG_OPERATOR: o.operator},
                  {"rows_total": o.rows_total, "rows_updated": o.rows_updated, "rows_removed": o.rows_removed,
                   "memory_bytes": o.memory_bytes, "late_rows": o.late_rows}, r.ts_ns)
            for o in r.operators]

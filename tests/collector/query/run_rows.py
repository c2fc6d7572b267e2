"""`runs` rows and batches as the monitor writes them (docs/METRICS.md), for the read side's tests.

A run's row carries its status, heartbeat (`last_seen_ns`), end and failure; batches are
`spark_progress` points at their trigger start with one `spark_source` point each, tagged
with the query's and the run's ids as the listener tags them.
"""
from __future__ import annotations

import json

from collector.influx.lineproto import Point
from collector.units import NS

APP = "local-1764000000001"


def runs_row(run: str, start_ns: int, status: str = "running", query: str | None = None, run_id: str = "r1",
             **fields) -> Point:
    """Return a query run's `runs` row at its start (fields given override the defaults)."""
    base = {"status": status, "query_id": f"qid-{query or run}", "spark_run_id": run_id, "start_ns": start_ns,
            "app_id": APP, "trigger_ms": 1000, "steps": json.dumps([])}
    return Point("runs", {"run": run, "query": query or run, "run_id": run_id}, {**base, **fields}, start_ns)


def batches(run: str, first_ns: int, count: int, rows: int | list[int], every_ms: int = 1000, batch_ms: int = 400,
            query: str | None = None, run_id: str = "r1", source: str = "0:RateStreamV2") -> list[Point]:
    """Return `count` batches of `rows` rows each (or the list's), one every `every_ms`, each `batch_ms` long."""
    out = []
    tags = {"run": run, "query": query or run, "run_id": run_id, "query_id": f"qid-{query or run}"}
    for i in range(count):
        t, n = first_ns + i * every_ms * 1_000_000, rows[i] if isinstance(rows, list) else rows
        out.append(Point("spark_progress", tags, {"batch_id": i, "batch_ms": batch_ms, "input_rows": n,
                                                  "input_rows_per_s": n * 7.0, "processed_rows_per_s": n * 9.0,
                                                  "trigger_ms": 1000, "overran": 0}, t))
        out.append(Point("spark_source", {**tags, "source": source}, {
            "input_rows": n, "input_rows_per_s": n * 7.0, "processed_rows_per_s": n * 9.0, "rows_behind": i}, t))
    return out


def seconds_ago(now_ns: int, s: float) -> int:
    """Return the whole-ms time `s` seconds before `now_ns`."""
    return (now_ns - int(s * NS)) // 1_000_000 * 1_000_000

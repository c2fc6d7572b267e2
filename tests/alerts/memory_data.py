"""Points of a Market Spread run, three Spark queries, an executor and query runs, for any backend (`write(points)`)."""
from __future__ import annotations

import numpy as np

from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.metrics.point import Point
from collector.points import latency_point
from collector.units import NS


def progress(run: str, t: int, batch_ms: int, trigger_ms: int | None = 1000, run_id: str = "", **fields) -> Point:
    f = {"batch_id": t // NS, "batch_ms": batch_ms, **fields}
    if trigger_ms is not None:
        f.update(trigger_ms=trigger_ms, overran=int(batch_ms > trigger_ms))
    tags = {"run": run, "query": run} | ({"run_id": run_id} if run_id else {})
    return Point("spark_progress", tags, f, t)


def run_row(job: str, run_id: str, start: int, status: str, seen: int | None = None, **fields) -> Point:
    f = {"status": status, "start_ns": start, "query_id": "q-" + job, "spark_run_id": run_id, **fields}
    if seen is not None:
        f["last_seen_ns"] = seen
    return Point("runs", {"run": job, "query": job, "run_id": run_id}, f, start)


def points(now: int) -> list[Point]:
    """Ten seconds of: Market Spread's run `ms` (orders ~2 ms, nbbo ~20 µs, backlog 5000, 60 % backpressured);
    queries `slow` (8 batches over the trigger), `fast` (3), `rates` (behind by 2M rows at one source);
    an executor's heap and GC; `dead` (a failed run) and `quiet` (running, silent for 60 s)."""
    out = []
    for i in range(10):
        t = now - (10 - i) * NS
        for pipeline, latency in (("orders", 2_000_000), ("nbbo", 20_000)):
            hist = LatencyHistogram.from_values(np.full(1000, latency))
            out.append(latency_point(IntervalHistogram("ms", pipeline, "start-to-end", "h/p0", t, NS, hist)))
        out.append(Point("backpressure", {"run": "ms", "step": "job"},
                         {"backlog": 5000, "backpressured_share": 0.6, "status": "HIGH"}, t))
        out.append(progress("slow", t, 1500 if i >= 2 else 400, input_rows_per_s=100.0, processed_rows_per_s=200.0,
                            late_rows=2, state_rows=1000 * i, watermark_delay_ms=5000))
        out.append(progress("fast", t, 1500 if i < 3 else 400, input_rows_per_s=100.0, processed_rows_per_s=100.0))
        out.append(progress("rates", t, 50, None, input_rows_per_s=900.0 if i < 7 else 100.0,
                            processed_rows_per_s=500.0, rows_behind=2_000_010))
        for source, behind in (("0:KafkaV2", 2_000_000), ("1:RateStreamV2", 10)):
            out.append(Point("spark_source", {"run": "rates", "query": "rates", "source": source},
                             {"input_rows": 50, "rows_behind": behind}, t))
        out.append(Point("spark_state", {"run": "slow", "query": "slow", "operator": "0:stateStoreSave"},
                         {"rows_total": 1000 * i, "memory_bytes": 3_000_000, "late_rows": 2}, t))
        for executor, heap in (("driver", 200_000_000), ("1", 1_500_000_000)):
            out.append(Point("spark_executor", {"app": "local-1", "executor": executor},
                             {"heap_used_bytes": heap, "gc_time_ms": 100 * i}, t))
    out.append(progress("slow", now - 30 * NS, 9000, run_id="s1"))           # a start-up batch, left out: steady
    out[-1] = out[-1]._replace(tags={**out[-1].tags, "phase": "startup"})
    out += [run_row("dead", "d1", now - 120 * NS, "running", seen=now - 100 * NS),
            run_row("dead", "d1", now - 120 * NS, "failed", error="RuntimeError: boom"),
            progress("dead", now - 110 * NS, 200, run_id="d1"),
            run_row("quiet", "q1", now - 90 * NS, "running", seen=now - 60 * NS),
            progress("quiet", now - 61 * NS, 200, run_id="q1")]
    return out

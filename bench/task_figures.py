"""What a batch's latency figures cost the state task, and what they cost the shipper.

    python -m bench.task_figures [--events 1000,10000,250000] [--rounds 2000]

The task's part is on the batch's critical path: `batch_stamps` over the batch's events,
the steps' busy times and both encodings (what `engine/spark/job.py` runs per shard and
batch with metrics on). The shipper's part runs in the driver, off that path: the
stamps into `StepSample`s, bucketed, per batch (`decode_figures`) and per batch of a poll
of 20 (`interval_samples`, as the shipper does: one worker's batches of one interval
bucketed together). Also timed: the previous design's in-task work, the samples
(`stamps_samples` of the stamps) and `encode_samples`, for comparison.

Events are chunk-stamped as the ingress stamps them (one ingest time per received chunk
of one stream, ~125 chunks per 25 ms). Prints medians in microseconds and writes
bench/out/task-figures-<UTC>.json (`--record`: bench/results/). Timings are figures, never a
pass/fail.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

from bench.output import add_record_flag, result_path, shown, utc_stamp, write_result
from collector.backpressure import StepBusy
from collector.samples import STEP_CHECK, STEP_SINK, STEP_SOURCE, encode_samples
from engine.formats.stamps import batch_stamps, decode_figures, interval_samples, stamps_samples
from engine.wire.fixish import NBBO_TYPE, ORDER_TYPE
from engine.formats.records import EventColumns

CHUNK_NS = 200_000
POLL = 20                                # batches a shipper's poll reads at 50k events/s


def make_batch(n: int, seed: int = 1) -> tuple[EventColumns, np.ndarray]:
    """`n` events in log order, one ingest time and stream per received chunk; 10 % of orders rejected."""
    rng = np.random.default_rng(seed)
    chunk = np.sort(rng.integers(0, max(1, n // 8), n))
    ingest = time.time_ns() - 30_000_000 + chunk * CHUNK_NS
    kind = np.where(chunk % 2, ORDER_TYPE, NBBO_TYPE).astype(np.int8)
    zeros = np.zeros(n)
    ev = EventColumns(np.arange(n, dtype=np.int64), ingest.astype(np.int64), kind, np.zeros(n, np.int32), zeros, zeros)
    return ev, np.flatnonzero(kind == ORDER_TYPE)[::10]


def _median_us(fn, rounds: int) -> float:
    for _ in range(min(200, rounds)):
        fn()
    times = np.empty(rounds)
    for i in range(rounds):
        t = time.perf_counter_ns()
        fn()
        times[i] = time.perf_counter_ns() - t
    return round(float(np.median(times)) / 1e3, 1)


def measure(n: int, rounds: int) -> dict:
    ev, rejected = make_batch(n)
    t0 = time.time_ns()
    t1, written = t0 + 3_000_000, t0 + 3_500_000

    def task():
        stamps = batch_stamps(ev, rejected, "host/p0", t0, t1, written)
        busy = StepBusy("host/p0", written, {STEP_SOURCE: 1, STEP_CHECK: 2, STEP_SINK: 3})
        return stamps.to_bytes(), busy.to_bytes()

    def previous_task():
        samples = stamps_samples(batch_stamps(ev, rejected, "host/p0", t0, t1, written))
        busy = StepBusy("host/p0", written, {STEP_SOURCE: 1, STEP_CHECK: 2, STEP_SINK: 3})
        return encode_samples(samples), busy.to_bytes()

    stamps, _ = task()
    one = batch_stamps(ev, rejected, "host/p0", t0, t1, written)
    poll = [batch_stamps(ev, rejected, "host/p0", t0 + i * 1000, t1 + i * 1000, written + i * 1000)
            for i in range(POLL)]
    return {"events": n, "runs": len(one.run_keys), "stamps_bytes": len(stamps),
            "task_us": _median_us(task, rounds),
            "shipper_decode_us": _median_us(lambda: decode_figures(stamps), rounds),
            "shipper_in_a_poll_us": round(_median_us(lambda: interval_samples(poll, 10**9), max(5, rounds // POLL))
                                          / POLL, 1),
            "previous_task_us": _median_us(previous_task, rounds)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.task_figures", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", default="1000,10000,250000", help="batch sizes, comma-separated")
    p.add_argument("--rounds", type=int, default=2000, help="timed calls per figure (2000)")
    p.add_argument("--out", type=Path, help="default: bench/out/task-figures-<UTC>.json")
    add_record_flag(p)
    a = p.parse_args(argv)
    gc.freeze()                          # as the Python worker does after its imports
    rows = []
    for n in (int(x) for x in a.events.split(",")):
        r = measure(n, max(20, a.rounds if n <= 10_000 else a.rounds // 40))
        rows.append(r)
        print(f"{n:>8,} events ({r['runs']:,} runs, {r['stamps_bytes']:,} B): task {r['task_us']:.1f} us, "
              f"shipper {r['shipper_decode_us']:.1f} us alone, {r['shipper_in_a_poll_us']:.1f} us in a poll of {POLL}; the previous in-task samples {r['previous_task_us']:.1f} us",
              flush=True)
    out = write_result({"benchmark": "task_figures", "utc": utc_stamp(), "command": " ".join(sys.argv),
                        "unit": "microseconds, median of calls", "rows": rows},
                       a.out or result_path("task-figures", a.record))
    print(f"-> {shown(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

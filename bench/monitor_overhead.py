"""What the monitor costs a user's own job: the same example run plain and under `marketspread watch`, alternated.

The requirement (README, Performance): monitor on against off, throughput and p99 batch
duration within 3 %. Each pair runs the example twice in fresh processes with fresh
checkpoints, off (`python examples/<x>.py`) and on (`marketspread watch -- examples/<x>.py`,
the listener, the executor-metrics relay and the writer to a real InfluxDB), ABBA order
across pairs. Figures come from Spark's own progress of each run (the example writes its
query's `recentProgress` with `--progress-out`), after `--warmup-batches`: throughput =
input rows over the span of the measured batches' trigger starts, p99 of `batchDuration`.
A run's p99 of its ~90 batches is its slowest batch or two, so the figure judged is the p99 of
every measured batch of an arm, all pairs pooled (the per-pair ratios are printed too).

    .venv/bin/python -m bench.monitor_overhead                       # 4 pairs of 90 s (~14 min)
    .venv/bin/python -m bench.monitor_overhead --pairs 2 --duration 20
    .venv/bin/python -m bench.monitor_overhead --record              # keep the figures in bench/results/

Figures are printed and written to `bench/out/` (`bench/results/` with `--record`); no
figure fails the benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import psutil

from bench.output import ROOT, add_record_flag, result_path, shown, utc_stamp, write_result
from collector.influx.server import InfluxServer
from perf.sysinfo import machine_summary

MAX_RATIO = 1.03
ARMS = ("off", "on")


def run_arm(arm: str, example: Path, args: list[str], env: dict, work: Path) -> dict:
    """Run the example once; return its figures from Spark's own progress."""
    out = work / f"{arm}-progress.json"
    cmd = [sys.executable, str(example), *args, "--work-dir", str(work / arm), "--progress-out", str(out)]
    if arm == "on":
        cmd = [sys.executable, "-m", "marketspread", "watch", "--", *cmd[1:]]
    t0 = time.monotonic()
    with open(work.parent / f"{work.name}-{arm}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        cpu = _tree_cpu(proc)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{arm} run failed ({proc.returncode}): see {log.name}")
    return dict(figures(json.loads(out.read_text())["progress"]), wall_s=wall, cpu_s=cpu)


def _tree_cpu(proc: subprocess.Popen, every_s: float = 0.5) -> float:
    """Wait for `proc`; return the CPU seconds its process tree used (driver, JVM, Python workers),
    from each process' last reading before it ended."""
    seen: dict[int, float] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                    seen[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        time.sleep(every_s)
    return sum(seen.values())


def figures(progress: list[dict], warmup_batches: int = 5) -> dict:
    """Throughput (rows/s) and batch duration percentiles of the batches after the warm-up."""
    steady = [p for p in progress if p.get("numInputRows")][warmup_batches:]
    if len(steady) < 3:
        raise RuntimeError(f"only {len(steady)} measured batches: run longer")
    ts = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() for p in steady]
    durations = np.array([p["batchDuration"] for p in steady], dtype=float)
    span = ts[-1] - ts[0]
    phases = {k: float(np.median([p["durationMs"].get(k, 0) for p in steady]))
              for k in ("addBatch", "queryPlanning", "walCommit", "commitOffsets", "latestOffset")}
    return {"phases_ms_median": phases, "batches": len(steady), "rows": int(sum(p["numInputRows"] for p in steady[:-1])),
            "throughput_rows_per_s": sum(p["numInputRows"] for p in steady[:-1]) / span,
            "batch_ms_p50": float(np.percentile(durations, 50)), "batch_ms_p99": float(np.percentile(durations, 99)),
            "batch_ms": durations.tolist()}


def pooled(runs: list[dict], q: float) -> dict:
    """Each arm's `q`-th percentile of batch duration over all its runs' measured batches, and on/off."""
    by_arm = {arm: float(np.percentile([d for r in runs if r["arm"] == arm for d in r["batch_ms"]], q))
              for arm in ARMS}
    return {**by_arm, "ratio": by_arm["on"] / by_arm["off"],
            "batches": {arm: sum(len(r["batch_ms"]) for r in runs if r["arm"] == arm) for arm in ARMS}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.monitor_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--example", type=Path, default=ROOT / "examples" / "rate_windowed.py")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--duration", type=int, default=90, help="seconds per run")
    ap.add_argument("--rate", type=int, default=20_000, help="rows/s of the example's source")
    add_record_flag(ap)
    a = ap.parse_args(argv)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="monitor-overhead-") as tmp:
        server = InfluxServer(Path(tmp) / "influx", port=0)
        server.start()
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
            env.update(server.client(db="monitor_overhead").config.as_env(), MS_STATE_DIR=str(Path(tmp) / "state"),
                       PYSPARK_PYTHON=sys.executable)
            args = ["--duration", str(a.duration), "--rate", str(a.rate)]
            for pair in range(a.pairs):
                for arm in ARMS if pair % 2 == 0 else ARMS[::-1]:
                    work = Path(tmp) / f"pair{pair}"
                    r = dict(run_arm(arm, a.example, args, env, work), pair=pair, arm=arm)
                    runs.append(r)
                    print(f"pair {pair} {arm:3}: {r['throughput_rows_per_s']:10,.0f} rows/s, batch p50 "
                          f"{r['batch_ms_p50']:6.0f} ms, p99 {r['batch_ms_p99']:6.0f} ms ({r['batches']} batches), "
                          f"CPU {r['cpu_s']:5.1f} s, addBatch {r['phases_ms_median']['addBatch']:.0f} ms",
                          flush=True)
        finally:
            server.stop()
    ratios = {}
    for fig in ("throughput_rows_per_s", "batch_ms_p99", "batch_ms_p50", "cpu_s"):
        per_pair = [next(r[fig] for r in runs if r["pair"] == p and r["arm"] == "on") /
                    next(r[fig] for r in runs if r["pair"] == p and r["arm"] == "off") for p in range(a.pairs)]
        ratios[fig] = {"per_pair": per_pair, "median": statistics.median(per_pair)}
    ratios["pooled_batch_ms_p99"], ratios["pooled_batch_ms_p50"] = pooled(runs, 99), pooled(runs, 50)
    thr, p99 = ratios["throughput_rows_per_s"]["median"], ratios["pooled_batch_ms_p99"]["ratio"]
    n = ratios["pooled_batch_ms_p99"]["batches"]
    print(f"\nmonitor on/off: throughput {thr:.3f} (median of {a.pairs} pairs), p99 batch duration {p99:.3f} "
          f"({ratios['pooled_batch_ms_p99']['on']:.0f} / {ratios['pooled_batch_ms_p99']['off']:.0f} ms over "
          f"{n['on']} / {n['off']} batches; per pair {', '.join(f'{x:.3f}' for x in ratios['batch_ms_p99']['per_pair'])}), "
          f"p50 {ratios['pooled_batch_ms_p50']['ratio']:.3f}, CPU {ratios['cpu_s']['median']:.3f} "
          f"(within {MAX_RATIO - 1:.0%}: {'yes' if 1 / MAX_RATIO <= thr and p99 <= MAX_RATIO else 'no'})")
    path = write_result({"benchmark": "monitor-overhead", "utc": utc_stamp(), "example": a.example.name,
                         "pairs": a.pairs, "duration_s": a.duration, "rate": a.rate,
                         "machine": machine_summary(), "runs": runs, "ratios": ratios},
                        result_path("monitor-overhead", a.record))
    print(f"figures: {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Read the metrics' cost off several sittings of `metrics_overhead.py` together, with its noise.

A sitting (one `metrics_overhead.py` run) reads a median of a few pair ratios, and the
runs it pairs vary by more than the effect it looks for: a run's batch gap settles
anywhere from ~20 to ~36 ms at 50k events/s, and a saturated run's throughput by 5-10 %,
whatever is switched on. So a sitting may pass or fail on noise. This tool pools the
pairs of the sittings given and says how sure the figure is: each requirement's median
pair ratio with a 95 % bootstrap interval (pairs drawn with replacement), per sitting and
pooled. The requirements are those `metrics_overhead.py` reads: throughput and p99 batch
duration in throughput mode; CPU per million events, p99 latency and p99 batch duration
in latency mode. A sitting that ran one mode only gives the other mode's no data.

    python -m bench.metrics_pool bench/out/metrics-overhead-*.json

A requirement is *met* when the whole interval is within its bound, *not met* when the
whole interval is beyond it, *inconclusive* otherwise. The pooled figure assumes that
the sittings measured the same code; the table shows each sitting's commit. Writes
`bench/out/metrics-pool-<utc>.json` (`--record`: bench/results/); never fails on a figure
(exit 0), only on files it cannot read (exit 2).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench.output import add_record_flag, result_path, shown, write_result
from perf.metrics_pool import DRAWS, LEVEL, REQUIREMENTS, judge, median_interval, pooled, ratios_of, read_sitting, report


def main(argv: list[str] | None = None) -> int:
    """Pool the given sittings, print the table, write it as JSON."""
    p = argparse.ArgumentParser(prog="python -m bench.metrics_pool", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="metrics_overhead.py result files (JSON)")
    p.add_argument("--out", type=Path, help="where to write the JSON (default bench/out/metrics-pool-<utc>.json)")
    add_record_flag(p)
    args = p.parse_args(argv)
    try:
        sittings = [read_sitting(f) for f in args.files]
    except ValueError as e:
        print(f"metrics_pool: {e}", file=sys.stderr)
        return 2
    per = [[judge(r, median_interval(ratios_of(s, r))) for r in REQUIREMENTS] for s in sittings]
    pool = [judge(r, median_interval(pooled(sittings, r))) for r in REQUIREMENTS]
    print(report(sittings, per, pool))
    path = args.out or result_path("metrics-pool", args.record)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = write_result({
        "benchmark": "metrics-pool", "utc": stamp, "level": LEVEL, "draws": DRAWS,
        "sittings": [dict(asdict(s), judgements=[asdict(j) for j in js]) for s, js in zip(sittings, per)],
        "pooled": [asdict(j) for j in pool]}, path)
    print(f"  -> {shown(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Read the metrics' cost off several sittings of `metrics_overhead.py` together, with its noise.

A sitting (one `metrics_overhead.py` run) reads a median of six pair ratios, and the runs
it pairs vary by more than the effect it looks for: a run's batch gap settles anywhere
from ~20 to ~36 ms at 50k events/s, whatever is switched on. So a sitting may pass or fail
on noise. This tool pools the pairs of the sittings given and says how sure the figure
is: each requirement's median pair ratio with a 95 % bootstrap interval (pairs drawn
with replacement), per sitting and pooled.

    python -m bench.metrics_pool bench/out/metrics-overhead-*.json

A requirement is *met* when the whole interval is within its bound, *not met* when the
whole interval is beyond it, *inconclusive* otherwise. The pooled figure assumes that
the sittings measured the same code; the table shows each sitting's commit. Writes
`bench/out/metrics-pool-<utc>.json` (`--record`: bench/results/); never fails on a figure
(exit 0), only on files it cannot read (exit 2).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.metrics_overhead import CPU_FIGURE, CPU_MAX_RATIO, P99_MAX_RATIO
from bench.output import add_record_flag, result_path, shown, write_result

#: The requirements read here: (comparison figure in the sitting's JSON, bound on on/off).
REQUIREMENTS = ((CPU_FIGURE, CPU_MAX_RATIO), ("p99 latency to committed (ms)", P99_MAX_RATIO))
MODE = "latency"
LEVEL = 0.95
DRAWS = 10_000


@dataclass(frozen=True)
class Estimate:
    """A median of pair ratios with its bootstrap interval."""
    pairs: int
    median: float
    low: float
    high: float


@dataclass(frozen=True)
class Judgement:
    """One requirement read off one estimate."""
    figure: str
    bound: float
    estimate: Estimate
    verdict: str                       # "met", "not met" or "inconclusive"
    median_within: bool                # the sitting's own headline (its median) is within the bound


@dataclass(frozen=True)
class Sitting:
    """The per-pair ratios one `metrics_overhead.py` result file holds for the figures read here."""
    path: str
    commit: str
    utc: str
    ratios: dict[str, list[float]]     # figure -> on/off per complete pair


# --------------------------------------------------------------------------- statistics (pure)

def median_interval(ratios: list[float], level: float = LEVEL, draws: int = DRAWS, seed: int = 0) -> Estimate:
    """Return the median of `ratios` and its percentile bootstrap interval (pairs resampled)."""
    xs = np.array([r for r in ratios if r is not None and math.isfinite(r)], dtype=float)
    if len(xs) == 0:
        return Estimate(0, math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    meds = np.median(xs[rng.integers(0, len(xs), size=(draws, len(xs)))], axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(meds, [tail, 100 - tail])
    return Estimate(len(xs), round(float(np.median(xs)), 4), round(float(low), 4), round(float(high), 4))


def judge(figure: str, bound: float, est: Estimate) -> Judgement:
    """Read a requirement (on/off at most `bound`) off an estimate and its interval."""
    if est.pairs == 0:
        verdict = "no data"
    elif est.high <= bound:
        verdict = "met"
    elif est.low > bound:
        verdict = "not met"
    else:
        verdict = "inconclusive"
    return Judgement(figure, bound, est, verdict, est.pairs > 0 and est.median <= bound)


def pooled(sittings: list[Sitting], figure: str) -> list[float]:
    """Return every sitting's pair ratios of `figure`, in order."""
    return [r for s in sittings for r in s.ratios.get(figure, [])]


# --------------------------------------------------------------------------- files

def read_sitting(path: Path, mode: str = MODE) -> Sitting:
    """Read a `metrics_overhead.py` result file; ValueError when it holds no such comparison."""
    try:
        doc = json.loads(path.read_text())
        comps = doc["summary"][mode]["comparisons"]
        ratios = {c["figure"]: [float(r) for r in c["ratios"] if r is not None] for c in comps
                  if isinstance(c, dict) and isinstance(c.get("ratios"), list)}
        return Sitting(str(path), str(doc.get("git", {}).get("commit", "?")), str(doc.get("utc", "?")), ratios)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: not a metrics_overhead.py result with a {mode} comparison ({e})") from None


def report(sittings: list[Sitting], per: list[list[Judgement]], pool: list[Judgement]) -> str:
    """Format the per-sitting and pooled table, one column per requirement."""
    def cell(j: Judgement) -> str:
        e = j.estimate
        return f"{e.median:.3f} [{e.low:.3f}, {e.high:.3f}] {j.verdict}" if e.pairs else "-"
    heads = [f"{f} <= {b}" for f, b in REQUIREMENTS]
    out = [f"metrics on/off, median of pair ratios [{LEVEL:.0%} bootstrap interval], {MODE} mode"]
    out.append(f"  {'sitting':<40} {'commit':<8} {'pairs':>5}  " + "  ".join(f"{h:<42}" for h in heads))
    for s, js in zip(sittings, per):
        out.append(f"  {Path(s.path).name:<40} {s.commit:<8} {js[0].estimate.pairs:>5}  "
                   + "  ".join(f"{cell(j):<42}" for j in js))
    out.append(f"  {'pooled':<40} {'':<8} {pool[0].estimate.pairs:>5}  " + "  ".join(f"{cell(j):<42}" for j in pool))
    for i, (fig, bound) in enumerate(REQUIREMENTS):
        within = sum(js[i].median_within for js in per)
        out.append(f"  {fig} <= {bound}: the sitting's median within in {within} of {len(per)} sittings; "
                   f"pooled {pool[i].verdict}")
    return "\n".join(out)


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
    per = [[judge(f, b, median_interval(s.ratios.get(f, []))) for f, b in REQUIREMENTS] for s in sittings]
    pool = [judge(f, b, median_interval(pooled(sittings, f))) for f, b in REQUIREMENTS]
    print(report(sittings, per, pool))
    path = args.out or result_path("metrics-pool", args.record)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = write_result({
        "benchmark": "metrics-pool", "utc": stamp, "level": LEVEL, "draws": DRAWS, "mode": MODE,
        "sittings": [dict(asdict(s), judgements=[asdict(j) for j in js]) for s, js in zip(sittings, per)],
        "pooled": [asdict(j) for j in pool]}, path)
    print(f"  -> {shown(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

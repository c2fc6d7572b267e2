"""The metrics' cost read off several sittings of `bench/metrics_overhead.py` together, with its noise (pure).

`python -m bench.metrics_pool` runs it on result files; its docstring says how a sitting's
pair ratios are pooled and judged. The requirements' bounds live here, and
`bench/metrics_overhead.py` reads them from here too.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

THROUGHPUT_MIN_RATIO = 0.98           # the requirement, reported (never enforced)
P99_MAX_RATIO = 1.05                  # "within 5 %": metrics may add at most 5 % to p99
BATCH_P99_MAX_RATIO = 1.03            # the monitor (listener, shipper, in-task recorders) on/off, as for any job
BATCH_P99_FIGURE = "p99 batch duration, offset log to commit log (ms)"
CPU_MAX_RATIO = 1.02                  # the requirement on CPU per million events, on/off
CPU_FIGURE = "CPU s per million events (all processes)"
THROUGHPUT_FIGURE = "processed events/s (commit to commit)"

LEVEL = 0.95
DRAWS = 10_000


@dataclass(frozen=True)
class Requirement:
    """A bound on one figure's on/off ratio in one mode of a sitting."""
    mode: str                          # "throughput" or "latency"
    figure: str                        # the comparison's figure in the sitting's JSON
    bound: float
    at_least: bool = False             # True: on/off must be >= bound (throughput); else <= bound

    @property
    def name(self) -> str:
        return f"{self.mode}: {self.figure} {'>=' if self.at_least else '<='} {self.bound}"

    def within(self, ratio: float) -> bool:
        return ratio >= self.bound if self.at_least else ratio <= self.bound


REQUIREMENTS = (
    Requirement("throughput", THROUGHPUT_FIGURE, THROUGHPUT_MIN_RATIO, at_least=True),
    Requirement("throughput", BATCH_P99_FIGURE, BATCH_P99_MAX_RATIO),
    Requirement("latency", CPU_FIGURE, CPU_MAX_RATIO),
    Requirement("latency", "p99 latency to committed (ms)", P99_MAX_RATIO),
    Requirement("latency", BATCH_P99_FIGURE, BATCH_P99_MAX_RATIO),
)


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
    requirement: str                   # Requirement.name
    mode: str
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
    ratios: dict[str, dict[str, list[float]]]   # mode -> figure -> on/off per complete pair


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


def judge(req: Requirement, est: Estimate) -> Judgement:
    """Read a requirement off an estimate and its interval: met only when the whole interval is."""
    if est.pairs == 0:
        verdict = "no data"
    elif req.within(est.low) and req.within(est.high):
        verdict = "met"
    elif not req.within(est.low) and not req.within(est.high):
        verdict = "not met"
    else:
        verdict = "inconclusive"
    return Judgement(req.name, req.mode, req.figure, req.bound, est, verdict,
                     est.pairs > 0 and req.within(est.median))


def ratios_of(sitting: Sitting, req: Requirement) -> list[float]:
    """Return a sitting's pair ratios for a requirement (none when it did not run that mode)."""
    return sitting.ratios.get(req.mode, {}).get(req.figure, [])


def pooled(sittings: list[Sitting], req: Requirement) -> list[float]:
    """Return every sitting's pair ratios for `req`, in order."""
    return [r for s in sittings for r in ratios_of(s, req)]


# --------------------------------------------------------------------------- files

def read_sitting(path: Path) -> Sitting:
    """Read a `metrics_overhead.py` result file; ValueError when it holds no mode's comparison."""
    modes = sorted({r.mode for r in REQUIREMENTS})
    try:
        doc = json.loads(path.read_text())
        summary = doc["summary"]
        ratios = {}
        for mode in modes:
            if mode not in summary:
                continue
            ratios[mode] = {c["figure"]: [float(r) for r in c["ratios"] if r is not None]
                            for c in summary[mode]["comparisons"]
                            if isinstance(c, dict) and isinstance(c.get("ratios"), list)}
        if not ratios:
            raise KeyError(" or ".join(modes))
        return Sitting(str(path), str(doc.get("git", {}).get("commit", "?")), str(doc.get("utc", "?")), ratios)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: not a metrics_overhead.py result with a throughput or latency "
                         f"comparison ({e})") from None


def report(sittings: list[Sitting], per: list[list[Judgement]], pool: list[Judgement]) -> str:
    """Format one block per requirement: a line per sitting, then the pooled line."""
    def cell(j: Judgement) -> str:
        e = j.estimate
        return f"{e.pairs:>3} pairs  {e.median:.3f} [{e.low:.3f}, {e.high:.3f}]  {j.verdict}" if e.pairs else "  - no data"
    out = [f"metrics on/off, median of pair ratios [{LEVEL:.0%} bootstrap interval]"]
    for i, req in enumerate(REQUIREMENTS):
        out.append(f"  {req.name}")
        for s, js in zip(sittings, per):
            out.append(f"    {Path(s.path).name:<44} {s.commit[:8]:<8} {cell(js[i])}")
        ran = [js[i] for js in per if js[i].estimate.pairs]
        within = sum(j.median_within for j in ran)
        out.append(f"    {'pooled':<44} {'':<8} {cell(pool[i])}")
        out.append(f"    the sitting's median within in {within} of {len(ran)} sittings")
    return "\n".join(out)

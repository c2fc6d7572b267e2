"""Is one run really slower than another? A verdict only beyond the runs' own noise (pure).

Two runs of the same code on a shared machine differ by tens of percent, so comparing one
p99 per run flags noise as regressions. Each run already stores 1-s samples (per-interval
p99, processed events/s); the comparison uses their medians and asks two questions:

- how sure is the ratio? A *block* bootstrap (consecutive 1-s samples are correlated, so
  blocks of `BLOCK` seconds are resampled, not single seconds) gives a 95 % interval of
  the ratio of medians; when a side groups several runs of one label, runs are resampled
  first, then blocks within them, so run-to-run noise widens the interval as it should;
- are the samples from different distributions at all? A two-sided Mann-Whitney U test
  (normal approximation with tie correction).

A difference is *significant* when the interval excludes 1 and p < `ALPHA`; it is a
regression (or an improvement) only when also larger than the user's threshold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

ALPHA = 0.05
BLOCK = 5                     # seconds per resampled block
BOOTSTRAP = 2000
MIN_SAMPLES = 5               # per side; fewer gives no verdict

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_DIFFERENCE = "no significant difference"
WITHIN_THRESHOLD = "within threshold"
NOT_ENOUGH = "not enough samples"


@dataclass(frozen=True)
class Comparison:
    """One metric of a run against the baseline: medians, ratio with its interval, the test, the verdict."""
    metric: str                   # "p99" or "throughput"
    base_median: float | None
    run_median: float | None
    ratio: float | None           # run / baseline
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_base: int
    n_run: int
    verdict: str

    @property
    def significant(self) -> bool:
        """True when the difference is beyond the runs' own noise."""
        return self.verdict in (REGRESSION, IMPROVEMENT, WITHIN_THRESHOLD)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie-corrected)."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate([x, y])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(len(both))
    sorted_ = both[order]
    # average ranks of ties
    _, start, counts = np.unique(sorted_, return_index=True, return_counts=True)
    avg = start + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    tie = float((counts ** 3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)          # continuity correction
    return max(0.0, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0))))


def _resample(groups: list[np.ndarray], rng: np.random.Generator, block: int) -> np.ndarray:
    """One bootstrap replicate: runs with replacement, then blocks with replacement within each."""
    picked = [groups[i] for i in rng.integers(0, len(groups), len(groups))] if len(groups) > 1 else groups
    out = []
    for g in picked:
        n = len(g)
        b = max(1, min(block, n))
        starts = rng.integers(0, n - b + 1, max(1, math.ceil(n / b)))
        out.append(np.concatenate([g[s:s + b] for s in starts])[:n])
    return np.concatenate(out)


def ratio_interval(base: list[Sequence[float]], run: list[Sequence[float]], *, block: int = BLOCK,
                   replicates: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of median(run) / median(base); each side is a list of runs' samples."""
    rng = np.random.default_rng(seed)
    bg = [np.asarray(s, float) for s in base if len(s)]
    rg = [np.asarray(s, float) for s in run if len(s)]
    ratios = np.empty(replicates)
    for i in range(replicates):
        mb = float(np.median(_resample(bg, rng, block)))
        mr = float(np.median(_resample(rg, rng, block)))
        ratios[i] = mr / mb if mb > 0 else math.inf
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(lo), float(hi)


def compare(metric: str, base: list[Sequence[float]], run: list[Sequence[float]], threshold: float,
            higher_is_worse: bool, *, seed: int = 0) -> Comparison:
    """Compare the samples of a run (or a group of runs) with the baseline's; see the module docstring."""
    flat_b = [v for s in base for v in s]
    flat_r = [v for s in run for v in s]
    nb, nr = len(flat_b), len(flat_r)
    if nb < MIN_SAMPLES or nr < MIN_SAMPLES:
        mb = float(np.median(flat_b)) if nb else None
        mr = float(np.median(flat_r)) if nr else None
        ratio = mr / mb if mb and mr is not None else None
        return Comparison(metric, mb, mr, ratio, None, None, None, nb, nr, NOT_ENOUGH)
    mb, mr = float(np.median(flat_b)), float(np.median(flat_r))
    if mb <= 0:
        return Comparison(metric, mb, mr, None, None, None, None, nb, nr, NOT_ENOUGH)
    ratio = mr / mb
    lo, hi = ratio_interval(base, run, seed=seed)
    p = mann_whitney_p(flat_b, flat_r)
    if not (p < ALPHA and (lo > 1.0 or hi < 1.0)):
        verdict = NO_DIFFERENCE
    else:
        worse_by = (ratio - 1.0) if higher_is_worse else (1.0 - ratio)
        if abs(worse_by) <= threshold:
            verdict = WITHIN_THRESHOLD
        else:
            verdict = REGRESSION if worse_by > 0 else IMPROVEMENT
    return Comparison(metric, mb, mr, ratio, lo, hi, p, nb, nr, verdict)

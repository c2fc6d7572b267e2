"""perf/metrics_pool.py: the bootstrap interval and the verdicts; `python -m bench.metrics_pool` on result files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf import metrics_pool

ROOT = Path(__file__).resolve().parents[2]

REQS = {(r.mode, r.figure): r for r in metrics_pool.REQUIREMENTS}
CPU = REQS["latency", metrics_pool.CPU_FIGURE]
P99 = REQS["latency", "p99 latency to committed (ms)"]
THROUGHPUT = REQS["throughput", metrics_pool.THROUGHPUT_FIGURE]


def sitting_file(path, commit: str, cpu: list[float], p99: list[float], throughput: list[float] | None = None):
    """Write a result file shaped like metrics_overhead.py's (only what the tool reads)."""
    comps = [{"figure": CPU.figure, "ratios": cpu}, {"figure": P99.figure, "ratios": p99},
             {"figure": "batch gap median (ms)", "ratios": [1.0] * len(cpu)}]
    summary = {"latency": {"comparisons": comps}}
    if throughput is not None:
        summary["throughput"] = {"comparisons": [{"figure": THROUGHPUT.figure, "ratios": throughput}]}
    path.write_text(json.dumps({"utc": "20261128T000000Z", "git": {"commit": commit}, "summary": summary}))
    return path


def test_the_interval_brackets_the_median_and_narrows_with_more_pairs():
    few = metrics_pool.median_interval([1.00, 1.03, 0.97, 1.10, 0.92, 1.02])
    many = metrics_pool.median_interval([1.00, 1.03, 0.97, 1.10, 0.92, 1.02] * 8)
    assert few.pairs == 6 and many.pairs == 48
    assert few.low <= few.median <= few.high
    assert many.low <= many.median <= many.high
    assert many.high - many.low < few.high - few.low
    # seeded: the same ratios give the same interval
    assert metrics_pool.median_interval([1.0, 1.2, 0.9]) == metrics_pool.median_interval([1.0, 1.2, 0.9])


def test_equal_ratios_have_no_spread_and_missing_ones_are_left_out():
    est = metrics_pool.median_interval([1.01, None, 1.01, float("nan"), 1.01])
    assert (est.pairs, est.median, est.low, est.high) == (3, 1.01, 1.01, 1.01)
    assert metrics_pool.median_interval([]).pairs == 0


@pytest.mark.parametrize("ratios, verdict", [
    ([1.00, 1.01, 1.00, 1.01, 1.00, 1.01], "met"),              # the whole interval within 1.02
    ([1.05, 1.06, 1.05, 1.06, 1.05, 1.06], "not met"),          # the whole interval beyond
    ([0.99, 1.04, 1.00, 1.05, 1.01, 1.03], "inconclusive"),     # median within, interval across
])
def test_a_requirement_is_met_only_when_its_whole_interval_is(ratios, verdict):
    req = metrics_pool.Requirement("latency", CPU.figure, 1.02)
    j = metrics_pool.judge(req, metrics_pool.median_interval(ratios))
    assert j.verdict == verdict
    assert j.median_within == (j.estimate.median <= 1.02)
    assert metrics_pool.judge(req, metrics_pool.median_interval([])).verdict == "no data"


@pytest.mark.parametrize("ratios, verdict", [
    ([0.99, 1.00, 0.99, 1.01, 1.00, 0.99], "met"),              # the whole interval above 0.98
    ([0.90, 0.91, 0.90, 0.92, 0.91, 0.90], "not met"),          # the whole interval below
    ([0.95, 1.02, 0.99, 1.03, 0.96, 1.00], "inconclusive"),
])
def test_a_lower_bound_is_judged_from_below(ratios, verdict):
    j = metrics_pool.judge(THROUGHPUT, metrics_pool.median_interval(ratios))
    assert THROUGHPUT.at_least and THROUGHPUT.bound == metrics_pool.THROUGHPUT_MIN_RATIO
    assert j.verdict == verdict
    assert j.median_within == (j.estimate.median >= THROUGHPUT.bound)
    assert ">=" in j.requirement


def test_the_tool_pools_sittings_and_writes_json(tmp_path):
    a = sitting_file(tmp_path / "a.json", "aaa1111", [1.01, 1.00, 1.01, 1.00, 1.01, 1.00], [1.2, 0.9, 1.0, 1.1, 0.95, 1.0])
    b = sitting_file(tmp_path / "b.json", "bbb2222", [1.03, 1.04, 1.03, 1.04, 1.03, 1.04], [1.0, 1.0, 1.01, 0.99, 1.0, 1.0],
                     throughput=[0.99, 1.01, 1.00])
    out = tmp_path / "pool.json"
    proc = subprocess.run([sys.executable, "-m", "bench.metrics_pool", str(a), str(b), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "aaa1111" in proc.stdout and "bbb2222" in proc.stdout and "pooled" in proc.stdout
    doc = json.loads(out.read_text())
    verdicts = [{j["requirement"]: j["verdict"] for j in s["judgements"]} for s in doc["sittings"]]
    assert verdicts[0][CPU.name] == "met" and verdicts[1][CPU.name] == "not met"
    assert verdicts[0][THROUGHPUT.name] == "no data"          # sitting a ran latency mode only
    pooled = {j["requirement"]: j for j in doc["pooled"]}
    assert pooled[CPU.name]["estimate"]["pairs"] == 12
    assert pooled[CPU.name]["verdict"] == "inconclusive"      # half the pairs each side of the bound
    assert pooled[P99.name]["estimate"]["median"] == pytest.approx(1.0)
    assert pooled[THROUGHPUT.name]["estimate"]["pairs"] == 3


def test_a_file_that_is_not_a_sitting_is_refused_clearly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"summary": {}}')
    proc = subprocess.run([sys.executable, "-m", "bench.metrics_pool", str(bad), "--out", str(tmp_path / "o.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "bad.json: not a metrics_overhead.py result" in proc.stderr
    assert not (tmp_path / "o.json").exists()

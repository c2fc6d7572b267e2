"""A short soak (bench/soak.py's run and verdict, 90 s of steady load): nothing grows.

The 10-minute figures come from `bench/soak.py`; this checks the same properties over a
shorter window with tolerances wide enough not to depend on the machine's timing:
memory within 25 % + 128 MiB, open files and threads within a small slack, state rows
never above the shard count.
"""
from __future__ import annotations

import pytest

from perf import soak

from .harness import ROOT

DURATION, WARMUP, EVERY = 90.0, 45.0, 2.5    # the JVM adds pool threads for its first ~40 s
LOOSE = soak.Tolerance(rss_ratio=0.25, rss_slack_bytes=128 << 20, fd_slack=6, thread_slack=24)


def test_verdict_flags_growth_and_passes_flat_series():
    """The verdict's arithmetic on made-up series (pure logic)."""
    def run(rss_growth: int, fd_growth: int, rows: int) -> list[soak.SoakSample]:
        return [soak.SoakSample(float(t), t, t, {"ingress": soak.GroupSample(1, (100 << 20) + rss_growth * t,
                                                                             10 + fd_growth * t // 10, 5)},
                                rows, 4096, 3, 100) for t in range(0, 60, 2)]
    assert soak.verdict(run(0, 0, 2), 0, symbols=2)["ok"]
    grown = soak.verdict(run(8 << 20, 0, 2), 0, symbols=2)
    assert not grown["ok"] and not grown["checks"]["ingress"]["rss_flat"]
    assert not soak.verdict(run(0, 10, 2), 0, symbols=2)["checks"]["ingress"]["fds_flat"]
    assert not soak.verdict(run(0, 0, 3), 0, symbols=2)["checks"]["state"]["rows_bounded"]


def test_the_jvm_is_judged_by_its_live_heap_not_its_rss():
    """A JVM's RSS grows while its heap expands to -Xmx; what a leak grows is the live set."""
    def run(live_growth: int) -> list[soak.SoakSample]:
        return [soak.SoakSample(float(t), t, t, {"job-jvm": soak.GroupSample(1, (500 << 20) + (20 << 20) * t, 300, 300)},
                                2, 4096, 3, 100, (80 << 20) + live_growth * t) for t in range(0, 60, 2)]
    flat = soak.verdict(run(0), 0, symbols=2)["checks"]["job-jvm"]
    assert flat["ok"] and flat["judged_by"] == "live heap after a full GC" and flat["live_heap_last_mib"] == 80
    assert not soak.verdict(run(8 << 20), 0, symbols=2)["checks"]["job-jvm"]["rss_flat"]


def test_the_jvms_per_task_monitors_are_judged_apart_from_its_other_threads():
    """Spark's per-task "Worker Monitor" threads follow the task rate (CI saw 50 -> 134 in one run)."""
    def run(monitors: int, others: int) -> dict:
        return soak.verdict([soak.SoakSample(float(t), t, t, {"job-jvm": soak.GroupSample(
            1, 500 << 20, 300, 250 + others * t + 50 + monitors * t, 50 + monitors * t)}, 2, 4096, 3, 100)
            for t in range(0, 60, 2)], 0, symbols=2)["checks"]["job-jvm"]
    busier = run(monitors=3, others=0)
    assert busier["threads_flat"] and busier["task_threads_max"] == 50 + 3 * 58
    assert "per-task monitors, max 224" in soak.format_verdict({"ok": True, "checks": {"job-jvm": busier}})
    assert not run(monitors=0, others=1)["threads_flat"]


def test_jstat_live_set():
    out = ("S0C    S1C    S0U    S1U      EC       EU        OC         OU       MC     MU    CCSC   CCSU   "
           "YGC     YGCT    FGC    FGCT     CGC    CGCT     GCT\n"
           "0.0    0.0    0.0    0.0   38912.0   1024.0   62464.0    40960.5  75136.0 73700.2 8832.0 8212.9"
           "     40    0.212   2      0.150   4      0.010    0.372\n")
    assert soak.parse_jstat_gc(out) == int(40960.5 * 1024)      # right after a full GC: the old generation


@pytest.mark.slow
def test_short_soak_memory_files_threads_and_state_stay_flat(tmp_path):
    samples = soak.run_soak(tmp_path, DURATION, rate=10_000, every=EVERY, shards=2, master="local[2]",
                            env={"PYTHONPATH": str(ROOT)}, progress=False, gc_every=15.0)
    v = soak.verdict(samples, WARMUP, symbols=350, tol=LOOSE)
    print("\n" + soak.format_verdict(v))
    groups = v["checks"].keys()
    assert {"ingress", "job-driver", "job-jvm", "send-nbbo", "send-orders", "state"} <= set(groups)
    assert samples[-1].consumed > samples[0].consumed, "the job did not process anything"
    assert v["ok"], soak.format_verdict(v)

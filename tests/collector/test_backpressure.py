"""Busy / backpressured / idle figures over micro-batches and ingress samples (pure)."""
from __future__ import annotations

import pytest

from typing import NamedTuple

from collector.backpressure import (BatchSpan, IngressSample, StepBusy, backlog_growth, backpressure_point, busy_share,
                                    ingress_figures, muted_share, query_figures, status, step_figures, worse)
from collector.testing import MemoryWriter

S = 1_000_000_000


class _Batch(NamedTuple):
    """A batch as `query_figures` reads it (spark_listener's BatchProgress has these)."""
    end_ns: int
    batch_ms: int
    input_blocks: int = 0
    rows_behind: int | None = None

    @property
    def ts_ns(self) -> int:
        return self.end_ns - self.batch_ms * 1_000_000


@pytest.mark.parametrize("share,want", [(0.0, "OK"), (0.10, "OK"), (0.1000001, "LOW"), (0.5, "LOW"),
                                        (0.5000001, "HIGH"), (1.0, "HIGH"), (None, "OK")])
def test_status_uses_flinks_thresholds(share, want):
    assert status(share) == want


def test_busy_share_counts_only_the_part_inside_the_window():
    # window [10 s, 20 s): one batch straddles its start, one lies inside, one straddles its end
    batches = [BatchSpan(11 * S, 2000), BatchSpan(15 * S, 1000), BatchSpan(21 * S, 3000)]
    assert busy_share(batches, 10 * S, 20 * S) == pytest.approx((1 + 1 + 2) / 10)


def test_busy_share_counts_overlapping_batches_once_and_caps_at_one():
    assert busy_share([BatchSpan(14 * S, 4000), BatchSpan(13 * S, 1000)], 10 * S, 20 * S) == pytest.approx(0.4)
    assert busy_share([BatchSpan(14 * S, 4000), BatchSpan(16 * S, 4000)], 10 * S, 20 * S) == pytest.approx(0.6)
    assert busy_share([BatchSpan(30 * S, 30_000)], 10 * S, 20 * S) == 1.0
    assert busy_share([], 10 * S, 20 * S) == 0.0
    assert busy_share([BatchSpan(5 * S, 1000)], 10 * S, 10 * S) == 0.0


def test_query_figures_window_starts_no_earlier_than_the_query():
    batches = [_Batch(12 * S, 1000)]
    full = query_figures(batches, 12 * S, None, window_s=10)
    assert full.busy_share == pytest.approx(0.1) and full.status == "OK"
    started = query_figures(batches, 12 * S, None, window_s=10, not_before_ns=10 * S)
    assert started.busy_share == pytest.approx(0.5)
    assert started.status == "OK"          # busy is not backpressure
    assert started.idle_share == pytest.approx(0.5) and started.backpressured_share is None


def test_a_source_held_back_gives_the_status():
    f = query_figures([_Batch(20 * S, 500)], 20 * S, None, window_s=10, held_back_share=0.8)
    assert f.busy_share == pytest.approx(0.05) and f.backpressured_share == 0.8 and f.status == "HIGH"
    # batches back to back and the rows behind moving up: measured held-back share decides, not the inference
    steady = [_Batch(t * S, 1000, 100, behind) for t, behind in [(11, 50), (12, 10), (13, 60), (14, 90)]]
    assert query_figures(steady, 14 * S, None, window_s=4).status == "HIGH"
    kept_up = query_figures(steady, 14 * S, None, window_s=4, held_back_share=0.0)
    assert kept_up.status == "OK" and kept_up.backlog_growth_per_s == pytest.approx(40 / 3)
    # ... but batches over the trigger still count
    assert query_figures(steady, 14 * S, 500, window_s=4, held_back_share=0.0).status == "HIGH"


def test_worse_status():
    assert worse("OK", "LOW") == worse("LOW", "OK") == "LOW" and worse("HIGH", "LOW") == "HIGH"


def test_backlog_growth_per_second():
    assert backlog_growth([(10 * S, 1000), (12 * S, 5000), (14 * S, 9000)]) == pytest.approx(2000.0)
    assert backlog_growth([(14 * S, 0), (10 * S, 4000)]) == pytest.approx(-1000.0)
    assert backlog_growth([(10 * S, 1)]) is None
    assert backlog_growth([(10 * S, 1), (10 * S, 5)]) is None


def test_query_figures_backlog_from_the_batches_in_the_window():
    batches = [_Batch(5 * S, 10, 0, 0), _Batch(12 * S, 10, 0, 100), _Batch(20 * S, 10, 0, 900)]
    f = query_figures(batches, 20 * S, None, window_s=10)
    assert f.backlog == 900 and f.backlog_growth_per_s == pytest.approx(100.0)


def test_muted_share_and_counter_reset():
    samples = [IngressSample(10 * S, 5.0, 0), IngressSample(12 * S, 6.0, 0), IngressSample(14 * S, 6.0, 0)]
    assert muted_share(samples) == pytest.approx(0.25)
    # the ingress restarted between the samples: its counter began again at 0.5 s
    assert muted_share([IngressSample(10 * S, 5.0, 0), IngressSample(12 * S, 0.5, 0)]) == pytest.approx(0.25)
    assert muted_share(samples[:1]) is None


def test_ingress_figures_over_the_last_window():
    samples = [IngressSample(t * S, m, b) for t, m, b in
               [(0, 0.0, 0), (10, 0.0, 100), (15, 3.0, 600), (20, 8.0, 1100)]]
    f = ingress_figures(samples, window_s=10)
    assert f.backpressured_share == pytest.approx(0.8) and f.status == "HIGH"
    assert f.backlog == 1100 and f.backlog_growth_per_s == pytest.approx(100.0)
    assert f.busy_share is None and f.idle_share is None


def test_backpressure_point_leaves_out_what_a_step_cannot_know():
    f = query_figures([_Batch(20 * S, 2000, 50)], 20 * S, None, window_s=10)
    p = backpressure_point("r1", "job", f, 20 * S)
    assert (p.measurement, dict(p.tags), p.time_ns) == ("backpressure", {"run": "r1", "step": "job"}, 20 * S)
    assert p.fields == {"status": "OK", "busy_share": pytest.approx(0.2), "idle_share": pytest.approx(0.8),
                        "input_rows_per_s": pytest.approx(5.0), "processed_rows_per_s": pytest.approx(25.0)}
    w = MemoryWriter()
    w.add(p)                                # encodable line protocol
    assert b"backpressure,run=r1,step=job" in w.lines()


def test_step_busy_share_is_the_steps_time_over_window_and_tasks():
    busy = [StepBusy("h/p0", 11 * S, {"source": 2 * S, "sink": S}),
            StepBusy("h/p1", 15 * S, {"source": 4 * S}),
            StepBusy("h/p0", 9 * S, {"source": 10 * S})]          # before the window
    f = step_figures(busy, "source", 20 * S, tasks=2, window_s=10)
    assert f.busy_share == pytest.approx(6 / 20) and f.idle_share == pytest.approx(14 / 20)
    assert f.backpressured_share == 0.0 and f.status == "OK"
    assert step_figures(busy, "check_market_data", 20 * S, tasks=2, window_s=10).busy_share == 0.0
    assert step_figures(busy * 10, "source", 20 * S, tasks=1, window_s=10).busy_share == 1.0


def test_step_busy_survives_its_encoding():
    b = StepBusy("host/p1", 123, {"source": 5, "check_market_data": 7})
    assert StepBusy.from_bytes(b.to_bytes()) == b

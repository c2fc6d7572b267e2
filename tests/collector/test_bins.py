"""Wallaroo's power-of-two bins are exact; the dashboard ranges are within HdrHistogram's 0.1 %."""
from __future__ import annotations

import numpy as np
import pytest

from collector.bins import (LONG_BINS_NS, POWER_OF_TWO_BINS, WALLAROO_POW2_UI_BINS_NS, WALLAROO_UI_BINS_NS, WALLAROO_UI_LABELS,
                            UiBin, power_of_two_bins, step_bins, ui_bins)
from collector.histogram import BUCKET_HIGHEST_NS, HIGHEST_RECORDABLE_NS, LatencyHistogram, SparseCounts, bucket_indices, record_batch


def _values(seed=1, n=50_000):
    rng = np.random.default_rng(seed)
    powers = np.array([1 << k for k in range(42)], np.int64)
    return np.concatenate([
        np.exp(rng.uniform(0, np.log(HIGHEST_RECORDABLE_NS), n)).astype(np.int64),
        [0, 0, HIGHEST_RECORDABLE_NS], powers - 1, powers, powers + 1,
        (np.array(WALLAROO_UI_BINS_NS) + rng.integers(-100, 100, (200, len(WALLAROO_UI_BINS_NS)))).ravel(),
    ])


def _wallaroo_bin(v: int) -> int:
    """PowersOf2Histogram.get_idx: 64 - clz(v)."""
    return int(v).bit_length()


def test_power_of_two_bins_equal_wallaroos_bins_of_the_raw_values():
    values = _values()
    expected = np.bincount([_wallaroo_bin(v) for v in values.tolist()], minlength=POWER_OF_TWO_BINS)
    bins = power_of_two_bins(LatencyHistogram.from_values(values))
    assert bins.shape == (65,) and bins.dtype == np.int64
    assert bins.tolist() == expected.tolist()
    assert bins.sum() == len(values)


def test_power_of_two_bin_bounds():
    bins = power_of_two_bins(LatencyHistogram.from_values([0, 1, 2, 3, 4, 7, 8, 2**41, HIGHEST_RECORDABLE_NS]))
    assert {k: c for k, c in enumerate(bins.tolist()) if c} == {0: 1, 1: 1, 2: 2, 3: 2, 4: 1, 42: 2}


def test_ui_labels():
    assert WALLAROO_UI_LABELS == (
        "≤ 1 µs", "≤ 4 µs", "≤ 16 µs", "≤ 66 µs", "≤ 260 µs", "≤ 1 ms",
        "≤ 4 ms", "≤ 16 ms", "≤ 66 ms", "≤ 260 ms", "≤ 1 s", "> 1 s",
    )


@pytest.mark.parametrize("edges", [WALLAROO_UI_BINS_NS, WALLAROO_POW2_UI_BINS_NS], ids=["decimal", "pow2"])
def test_ui_bins_place_each_bucket_by_its_highest_value(edges):
    values = _values(2)
    bins = ui_bins(LatencyHistogram.from_values(values), edges)
    assert all(isinstance(b, UiBin) for b in bins) and len(bins) == len(edges) + 1
    assert sum(b.count for b in bins) == len(values)
    assert sum(b.percent for b in bins) == pytest.approx(100.0)
    highest = BUCKET_HIGHEST_NS[bucket_indices(values)]
    expected = np.bincount(np.searchsorted(edges, highest, side="left"), minlength=len(edges) + 1)
    assert [b.count for b in bins] == expected.tolist()
    assert ui_bins(record_batch(values), edges) == bins        # from a task's sparse counts alike
    # Against the raw values, only values up to 0.1 % below an edge move one range up.
    exact = np.searchsorted(edges, values, side="left")
    placed = np.searchsorted(edges, highest, side="left")
    moved = placed != exact
    assert np.all(placed[moved] == exact[moved] + 1)
    edge = np.asarray(edges)[exact[moved]]
    assert np.all((edge - values[moved]) <= edge / 1000)


def test_ui_bins_at_the_small_edges():
    # 1 ns buckets below 2,048 ns: exact. 4,000 and 16,000 open 2 and 8 ns buckets that
    # end above the edge, so the edge value itself counts one range up.
    values = np.array([999, 1_000, 1_001, 3_999, 4_000, 4_001, 15_999, 16_000])
    counts = [b.count for b in ui_bins(LatencyHistogram.from_values(values))][:4]
    assert counts == [2, 2, 3, 1]


def test_ui_bins_of_an_empty_histogram():
    bins = ui_bins(LatencyHistogram())
    assert [b.label for b in bins] == list(WALLAROO_UI_LABELS)
    assert all(b.count == 0 and b.percent == 0.0 for b in bins)
    assert ui_bins(SparseCounts.empty()) == bins


def test_ui_bins_rejects_unsorted_edges():
    with pytest.raises(ValueError):
        ui_bins(LatencyHistogram(), (10, 5))


def test_step_bins_keep_wallaroos_ranges_for_sub_second_data():
    values = _values(3)
    hist = LatencyHistogram.from_values(values[values < 900_000_000])
    assert step_bins(hist) == ui_bins(hist)                       # Market Spread's latencies: its twelve ranges
    assert [b.label for b in step_bins(LatencyHistogram())] == list(WALLAROO_UI_LABELS)


def test_step_bins_reach_minutes_and_hours_for_spark_scale_latencies():
    s = 1_000_000_000
    hist = LatencyHistogram.from_values([200_000_000, 2 * s, 10 * s, 10 * s, 50 * s])
    bins = step_bins(hist)
    assert [b.label for b in bins][10:] == ["≤ 1 s", "≤ 4 s", "≤ 16 s", "≤ 1 min", "> 1 min"]
    assert [b.count for b in bins][9:] == [1, 0, 1, 2, 1, 0] and sum(b.count for b in bins) == 5
    long = step_bins(LatencyHistogram.from_values([90 * 60 * s, 20 * 60 * s, 2 * 3600 * s]))   # clamped at ~73 min
    assert [b.label for b in long][-4:] == ["≤ 4 min", "≤ 16 min", "≤ 1 h", "> 1 h"]
    assert [b.count for b in long][-3:] == [0, 1, 2]
    assert LONG_BINS_NS[0] > WALLAROO_UI_BINS_NS[-1] and sorted(LONG_BINS_NS) == list(LONG_BINS_NS)

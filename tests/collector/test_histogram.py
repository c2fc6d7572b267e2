"""The numpy histogram buckets, merges and answers percentiles exactly as the hdrh reference does."""
from __future__ import annotations

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from collector.histogram import BUCKET_COUNT, BUCKET_HIGHEST_NS, BUCKET_LOWEST_NS, COUNTS_LEN, HIGHEST_RECORDABLE_NS, HIGHEST_TRACKABLE_NS, SUB_BUCKET_COUNT, SUB_BUCKET_HALF_COUNT_MAGNITUDE, UNIT_MAGNITUDE, Bucket, LatencyHistogram, SparseCounts, bucket_indices, record_batch

PERCENTILES = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0]


def _reference() -> HdrHistogram:
    return HdrHistogram(1, HIGHEST_TRACKABLE_NS, 3)


def _reference_indices(values) -> np.ndarray:
    index_of = _reference()._counts_index_for
    return np.array([index_of(v) for v in np.asarray(values).tolist()], dtype=np.int64)


def _log_uniform(rng, n, low=1.0, high=float(HIGHEST_RECORDABLE_NS)) -> np.ndarray:
    return np.exp(rng.uniform(np.log(low), np.log(high), n)).astype(np.int64)


def _recorded_reference(values) -> HdrHistogram:
    ref = _reference()
    for v in np.asarray(values).tolist():
        assert ref.record_value(v)
    return ref


# --- layout and bucket indices -------------------------------------------------------


def test_layout_is_hdrh_layout():
    ref = _reference()
    assert (COUNTS_LEN, BUCKET_COUNT, SUB_BUCKET_COUNT) == (ref.counts_len, ref.bucket_count, ref.sub_bucket_count)
    assert (UNIT_MAGNITUDE, SUB_BUCKET_HALF_COUNT_MAGNITUDE) == (ref.unit_magnitude, ref.sub_bucket_half_count_magnitude)
    assert HIGHEST_RECORDABLE_NS == ref.get_highest_equivalent_value(ref.get_value_from_index(COUNTS_LEN - 1))
    assert HIGHEST_RECORDABLE_NS == 2**42 - 1


def test_bucket_bounds_are_hdrh_equivalent_values():
    ref = _reference()
    lowest = [ref.get_value_from_index(i) for i in range(COUNTS_LEN)]
    assert BUCKET_LOWEST_NS.tolist() == lowest
    assert BUCKET_HIGHEST_NS.tolist() == [ref.get_highest_equivalent_value(v) for v in lowest]


def test_every_bucket_bound_maps_to_its_own_index():
    index = np.arange(COUNTS_LEN)
    assert np.array_equal(bucket_indices(BUCKET_LOWEST_NS), index)
    assert np.array_equal(bucket_indices(BUCKET_HIGHEST_NS), index)
    # Buckets tile the range: each starts one past the previous end.
    assert np.array_equal(BUCKET_LOWEST_NS[1:], BUCKET_HIGHEST_NS[:-1] + 1)


def test_indices_match_hdrh_at_edge_values():
    powers = np.array([1 << k for k in range(43)], dtype=np.int64)
    bounds = np.concatenate([BUCKET_LOWEST_NS, BUCKET_HIGHEST_NS])
    values = np.concatenate([
        np.arange(0, 5000), powers - 1, powers, powers + 1, bounds - 1, bounds, bounds + 1,
    ])
    values = values[(values >= 0) & (values <= HIGHEST_RECORDABLE_NS)]
    assert np.array_equal(bucket_indices(values), _reference_indices(values))


def test_indices_match_hdrh_on_random_values():
    rng = np.random.default_rng(7)
    values = np.concatenate([
        _log_uniform(rng, 300_000),
        rng.integers(0, HIGHEST_RECORDABLE_NS + 1, 50_000),
        rng.integers(0, 10_000_000, 50_000),
    ])
    assert np.array_equal(bucket_indices(values), _reference_indices(values))


@pytest.mark.slow
def test_indices_match_hdrh_on_a_million_random_values():
    rng = np.random.default_rng(8)
    values = np.concatenate([_log_uniform(rng, 800_000), rng.integers(0, HIGHEST_RECORDABLE_NS + 1, 200_000)])
    assert np.array_equal(bucket_indices(values), _reference_indices(values))


def test_indices_are_monotone_in_value():
    values = np.sort(_log_uniform(np.random.default_rng(9), 200_000))
    assert np.all(np.diff(bucket_indices(values)) >= 0)


def test_out_of_range_values_are_clamped_not_dropped():
    top = COUNTS_LEN - 1
    values = np.array([-1, -(2**62), 0, HIGHEST_RECORDABLE_NS, HIGHEST_RECORDABLE_NS + 1, 2**62, 2**63 - 1])
    assert bucket_indices(values).tolist() == [0, 0, 0, top, top, top, top]
    # Between 1 h and the last bucket's top HdrHistogram still records: no clamping there.
    beyond_an_hour = np.array([HIGHEST_TRACKABLE_NS + 1, 4_000_000_000_000])
    assert np.array_equal(bucket_indices(beyond_an_hour), _reference_indices(beyond_an_hour))
    assert LatencyHistogram.from_values(values).total_count == len(values)


def test_input_types_give_the_same_indices():
    values = _log_uniform(np.random.default_rng(10), 20_000, high=2e9)
    expected = bucket_indices(values)
    assert np.array_equal(bucket_indices(values.tolist()), expected)
    assert np.array_equal(bucket_indices(values.astype(np.uint64)), expected)
    assert np.array_equal(bucket_indices(values.astype(np.float64)), expected)
    small = values[values < 2**31]
    assert np.array_equal(bucket_indices(small.astype(np.int32)), bucket_indices(small))
    # Floats truncate like int(); NaN and -inf count as 0, +inf as the top.
    floats = np.array([1.9, 2047.999, -0.5, np.nan, -np.inf, np.inf])
    assert bucket_indices(floats).tolist() == [1, 2047, 0, 0, 0, COUNTS_LEN - 1]
    assert bucket_indices(np.array([], np.int64)).shape == (0,)
    with pytest.raises(TypeError):
        bucket_indices(np.array(["1"]))


def test_bucket_indices_leaves_its_input_alone():
    values = np.array([-5, 3_000, 2**50])
    bucket_indices(values)
    assert values.tolist() == [-5, 3_000, 2**50]


# --- record_batch and SparseCounts ---------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 100, 5_999, 6_000, 100_000])
def test_record_batch_counts_every_value_once(n):
    values = _log_uniform(np.random.default_rng(n), n, high=1e10)
    sparse = record_batch(values)
    unique, counts = np.unique(bucket_indices(values), return_counts=True)
    assert sparse.indices.dtype == np.int32 and sparse.counts.dtype == np.int64
    assert sparse.indices.tolist() == unique.tolist()
    assert sparse.counts.tolist() == counts.tolist()
    assert sparse.total == n


@pytest.mark.parametrize("count", [1, 255, 256, 65_536, 2**32, 2**40])
def test_sparse_counts_bytes_round_trip(count):
    sparse = SparseCounts(np.array([0, 7, COUNTS_LEN - 1], np.int32), np.array([1, count, 3], np.int64))
    data = sparse.to_bytes()
    assert SparseCounts.from_bytes(data) == sparse
    width = 1 if count < 256 else 2 if count < 65_536 else 4 if count < 2**32 else 8
    assert len(data) == 6 + 3 * (2 + width)


def test_sparse_counts_bytes_of_a_batch_and_of_nothing():
    sparse = record_batch(_log_uniform(np.random.default_rng(11), 50_000, high=1e9))
    assert SparseCounts.from_bytes(sparse.to_bytes()) == sparse
    assert SparseCounts.from_bytes(SparseCounts.empty().to_bytes()) == SparseCounts.empty()
    assert SparseCounts.empty().total == 0


def test_sparse_counts_rejects_bad_bytes():
    data = record_batch([1, 2, 3]).to_bytes()
    with pytest.raises(ValueError):
        SparseCounts.from_bytes(data[:-1])
    with pytest.raises(ValueError):
        SparseCounts.from_bytes(b"\x09" + data[1:])


# --- LatencyHistogram against hdrh ---------------------------------------------------


def _distributions():
    rng = np.random.default_rng(12)
    yield "log-uniform 1 µs..1 s", _log_uniform(rng, 20_000, 1e3, 1e9)
    yield "lognormal around 2 ms with a tail", np.exp(rng.normal(np.log(2e6), 1.0, 20_000)).astype(np.int64)
    yield "whole range", _log_uniform(rng, 5_000)
    yield "small exact values", rng.integers(0, 2048, 5_000)
    yield "one value", np.full(10, 123_456_789)
    yield "zeros and ones", np.array([0, 0, 0, 1])


@pytest.mark.parametrize("name,values", list(_distributions()), ids=lambda x: x if isinstance(x, str) else "")
def test_statistics_agree_with_hdrh(name, values):
    ours = LatencyHistogram.from_values(values)
    ref = _recorded_reference(values)
    assert ours.counts.tolist() == list(ref.counts)
    assert ours.total_count == ref.get_total_count() == len(values)
    expected = ref.get_percentile_to_value_dict(PERCENTILES)
    assert ours.percentiles(PERCENTILES) == expected
    for p in PERCENTILES:
        assert ours.value_at_percentile(p) == ref.get_value_at_percentile(p) == expected[p]
    assert ours.min == ref.get_min_value()
    assert ours.max == ref.get_max_value()
    assert ours.mean == pytest.approx(ref.get_mean_value(), rel=1e-12)
    assert ours.stddev == pytest.approx(ref.get_stddev(), rel=1e-9, abs=1e-9)
    # the same figures straight from a task's sparse counts (what the driver's points use)
    sparse = record_batch(values)
    assert sparse.percentiles(PERCENTILES) == expected
    assert (sparse.min_ns, sparse.max_ns) == (ref.get_min_value(), ref.get_max_value())
    assert sparse.mean_ns == pytest.approx(ref.get_mean_value(), rel=1e-12)


def test_buckets_agree_with_hdrh_recorded_iterator():
    values = _log_uniform(np.random.default_rng(13), 5_000, 1e3, 1e9)
    ours = list(LatencyHistogram.from_values(values).iter_buckets())
    ref = _recorded_reference(values)
    expected = [
        Bucket(ref.get_lowest_equivalent_value(item.value_iterated_to), item.value_iterated_to,
               item.count_at_value_iterated_to)
        for item in ref.get_recorded_iterator()
    ]
    assert ours == expected
    assert sum(b.count for b in ours) == len(values)


def test_merging_partitions_equals_one_histogram_of_everything():
    rng = np.random.default_rng(14)
    parts = [_log_uniform(rng, int(rng.integers(0, 30_000)), 1e3, 1e10) for _ in range(40)]
    everything = LatencyHistogram.from_values(np.concatenate(parts))
    from_sparse, from_dense = LatencyHistogram(), LatencyHistogram()
    for part in parts:
        from_sparse.add_sparse(SparseCounts.from_bytes(record_batch(part).to_bytes()))
        from_dense.add(LatencyHistogram.from_values(part))
    assert from_sparse == everything and from_dense == everything
    assert np.array_equal(from_sparse.counts, everything.counts)
    assert from_sparse.percentiles(PERCENTILES) == everything.percentiles(PERCENTILES)
    assert from_sparse.total_count == sum(len(p) for p in parts)


def test_add_sparse_sums_repeated_indices():
    hist = LatencyHistogram().add_sparse(SparseCounts(np.array([5, 5, 9], np.int32), np.array([1, 2, 3], np.int64)))
    assert hist.counts[5] == 3 and hist.counts[9] == 3 and hist.total_count == 6


def test_to_sparse_round_trip_and_copy_independence():
    hist = LatencyHistogram.from_values(_log_uniform(np.random.default_rng(15), 10_000))
    assert LatencyHistogram.from_sparse(hist.to_sparse()) == hist
    copy = hist.copy()
    assert copy == hist and copy is not hist
    copy.record([1])
    assert copy != hist and copy.total_count == hist.total_count + 1


def test_constructor_validates_and_copies_counts():
    counts = np.zeros(COUNTS_LEN, np.int64)
    hist = LatencyHistogram(counts)
    counts[3] = 1
    assert hist.total_count == 0
    with pytest.raises(ValueError):
        LatencyHistogram(np.zeros(10))


def test_empty_histogram_reports_zeros():
    hist = LatencyHistogram()
    assert hist.total_count == 0 and hist.min == 0 and hist.max == 0
    assert hist.mean == 0.0 and hist.stddev == 0.0
    assert hist.percentiles(PERCENTILES) == {p: 0 for p in PERCENTILES}
    assert list(hist.iter_buckets()) == []
    assert "empty" in repr(hist)
    empty = SparseCounts.empty()
    assert (empty.min_ns, empty.max_ns, empty.mean_ns) == (0, 0, 0.0)
    assert empty.percentiles(PERCENTILES) == {p: 0 for p in PERCENTILES}

"""Our V2 blobs and .hgrm text are the reference HdrHistogram's, both ways."""
from __future__ import annotations

import io
import math
import re

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.iterators import PercentileIterator

from collector import codec
from collector.histogram import HIGHEST_RECORDABLE_NS, HIGHEST_TRACKABLE_NS, LatencyHistogram

PERCENTILES = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0]


def _values(seed=1, n=20_000):
    rng = np.random.default_rng(seed)
    return np.concatenate([
        np.exp(rng.normal(np.log(3e6), 1.2, n)).astype(np.int64),
        rng.integers(0, 5_000, n // 10),
    ])


def _both(values):
    ref = HdrHistogram(1, HIGHEST_TRACKABLE_NS, 3)
    for v in values.tolist():
        assert ref.record_value(v)
    return LatencyHistogram.from_values(values), ref


def test_encode_is_byte_identical_to_hdrh():
    ours, ref = _both(_values())
    assert codec.encode(ours) == ref.encode().decode("ascii")


def test_hdrh_decodes_our_blob():
    ours, _ = _both(_values(2))
    decoded = HdrHistogram.decode(codec.encode(ours))
    assert decoded.get_total_count() == ours.total_count
    assert list(decoded.counts) == ours.counts.tolist()
    assert decoded.get_percentile_to_value_dict(PERCENTILES) == ours.percentiles(PERCENTILES)
    assert (decoded.get_min_value(), decoded.get_max_value()) == (ours.min, ours.max)


def test_we_decode_hdrh_blob():
    ours, ref = _both(_values(3))
    decoded = codec.decode(ref.encode())
    assert decoded == ours
    assert decoded.percentiles(PERCENTILES) == ref.get_percentile_to_value_dict(PERCENTILES)
    assert codec.decode(ref.encode().decode("ascii")) == ours  # str or bytes


@pytest.mark.parametrize("values", [[], [0], [1], [HIGHEST_RECORDABLE_NS], [0, 5, 5, 10**12]], ids=repr)
def test_round_trips_at_the_edges(values):
    hist = LatencyHistogram.from_values(np.array(values, np.int64))
    assert codec.decode(codec.encode(hist)) == hist
    assert codec.from_hdrh(codec.to_hdrh(hist)) == hist
    assert HdrHistogram.decode(codec.encode(hist)).get_total_count() == len(values)


def test_decodes_a_narrower_range_with_the_same_precision():
    ref = HdrHistogram(1, 10**9, 3)
    for v in (1, 999, 123_456, 10**9):
        ref.record_value(v)
    assert codec.decode(ref.encode()) == LatencyHistogram.from_values([1, 999, 123_456, 10**9])


@pytest.mark.parametrize("lowest,digits", [(1, 2), (1000, 3)])
def test_rejects_another_layout(lowest, digits):
    ref = HdrHistogram(lowest, HIGHEST_TRACKABLE_NS, digits)
    ref.record_value(5_000)
    with pytest.raises(ValueError, match="layout"):
        codec.decode(ref.encode())


def test_rejects_values_beyond_our_last_bucket():
    ref = HdrHistogram(1, 2**50, 3)
    ref.record_value(2**45)
    with pytest.raises(ValueError, match="above"):
        codec.decode(ref.encode())


# --- .hgrm ---------------------------------------------------------------------------

# Java's PercentileIterator.incrementIterationLevel: whole ticks per half-distance.
def _java_increment_iteration_level(self):
    self.percentile_to_iterate_from = self.percentile_to_iterate_to
    if self.percentile_to_iterate_to == 100.0:  # after the last row; Java steps to infinity
        return
    halvings = int(math.log(100.0 / (100.0 - self.percentile_to_iterate_to)) / math.log(2))
    ticks = self.percentile_ticks_per_half_distance * int(math.pow(2, halvings + 1))
    self.percentile_to_iterate_to += 100.0 / ticks


def _hdrh_hgrm(ref, ratio, monkeypatch):
    monkeypatch.setattr(PercentileIterator, "increment_iteration_level", _java_increment_iteration_level)
    out = io.BytesIO()
    ref.output_percentile_distribution(out, ratio)
    return out.getvalue().decode()


@pytest.mark.parametrize(
    "values,ratio",
    [(_values(4), 1e6), (np.full(3, 777), 1e3), (np.array([0, 1, 2, 2, 3, 10**9]), 1.0)],
    ids=["lognormal-ms", "one value-µs", "few-ns"],
)
def test_hgrm_table_is_hdrh_table_with_java_ticks(values, ratio, monkeypatch):
    ours, ref = _both(values)
    text = codec.to_hgrm(ours, ratio)
    expected = _hdrh_hgrm(ref, ratio, monkeypatch)
    table, footer = text.split("#[", 1)
    assert table == expected.split("#[", 1)[0]
    # Java's footer: mean and std. deviation scaled, total count an integer.
    assert footer.splitlines() == [
        "Mean    = %12.3f, StdDeviation   = %12.3f]" % (ref.get_mean_value() / ratio, ref.get_stddev() / ratio),
        "#[Max     = %12.3f, Total count    = %12d]" % (ref.get_max_value() / ratio, len(values)),
        "#[Buckets =           32, SubBuckets     =         2048]",
    ]


def test_hgrm_percentile_steps_are_javas():
    hist = LatencyHistogram.from_values(np.arange(1, 100_001))
    levels = [float(m) for m in re.findall(r"^\s+\S+ (\S+)", codec.to_hgrm(hist), re.M)]
    assert levels[:22] == [
        0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.775, 0.8, 0.825, 0.85,
        0.875, 0.8875, 0.9, 0.9125, 0.925, 0.9375, 0.94375,
    ]
    assert levels[-1] == 1.0


def test_hgrm_of_an_empty_histogram_is_just_header_and_footer():
    lines = codec.to_hgrm(LatencyHistogram()).splitlines()
    assert lines[0].split() == ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    assert lines[1] == "" and len(lines) == 5
    assert lines[3] == "#[Max     =        0.000, Total count    =            0]"

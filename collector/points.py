"""Turn interval histograms into InfluxDB points (schema: docs/METRICS.md)."""
from __future__ import annotations

from collector.aggregate import IntervalHistogram
from collector.bins import WALLAROO_UI_BINS_NS, ui_bins
from collector.codec import encode
from collector.influx import RP_ROLLUP, Point
from collector.vocabulary import (FIELD_COUNT, FIELD_HDR, FIELD_MAX, FIELD_MEAN, FIELD_MIN, LATENCY, PERCENTILE_FIELDS,
                                  TAG_INTERVAL, TAG_PIPELINE, TAG_RUN, TAG_STEP, TAG_WORKER)

# Integer fields per Wallaroo UI bin, so InfluxDB itself can SUM bins over any range.
BIN_FIELDS = tuple(f"bin_le_{e}" for e in WALLAROO_UI_BINS_NS) + (f"bin_gt_{WALLAROO_UI_BINS_NS[-1]}",)
#: Tag of a rollup point telling its length; rollups of every length share `rollup.latency`.
INTERVAL_TAG = TAG_INTERVAL
_UNITS = ((3600, "h"), (60, "m"), (1, "s"))


def interval_label(interval_ns: int) -> str:
    """Return an interval length as InfluxQL writes durations: 10s, 1m, 10m, 1h."""
    seconds = interval_ns // 1_000_000_000
    for size, unit in _UNITS:
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{interval_ns}ns"


def latency_point(ih: IntervalHistogram) -> Point:
    """One `latency` point: count, the V2-encoded histogram, percentiles and UI bins.

    A rollup goes to the `rollup` retention policy, tagged with its `interval`.
    """
    h = ih.hist
    s = h.to_sparse()           # the one pass over the dense counts; every figure comes from it
    fields: dict[str, int | float | str] = {FIELD_COUNT: s.total, FIELD_HDR: encode(h, s),
                                            FIELD_MIN: s.min_ns, FIELD_MAX: s.max_ns, FIELD_MEAN: s.mean_ns}
    values = s.percentiles([p for _, p in PERCENTILE_FIELDS])
    for name, p in PERCENTILE_FIELDS:
        fields[name] = int(values[p])
    for name, b in zip(BIN_FIELDS, ui_bins(s)):
        fields[name] = int(b.count)
    tags = {TAG_RUN: ih.run, TAG_PIPELINE: ih.pipeline, TAG_STEP: ih.step, TAG_WORKER: ih.worker}
    if ih.rollup:
        tags[INTERVAL_TAG] = interval_label(ih.interval_ns)
        return Point(LATENCY, tags, fields, ih.start_ns, RP_ROLLUP)
    return Point(LATENCY, tags, fields, ih.start_ns)

"""The listener's throttled gauges: read at most once per period, the last value in between."""
from __future__ import annotations

from marketspread.metrics_wiring import Throttled


def _counter():
    reads = []

    def gauge():
        reads.append(1)
        return len(reads)
    return gauge, reads


def test_calls_within_the_period_get_the_last_value_without_reading():
    gauge, reads = _counter()
    g = Throttled(gauge, every_s=3600)          # no machine is slow enough to leave this period
    assert [g() for _ in range(5)] == [1] * 5 and len(reads) == 1


def test_a_call_after_the_period_reads_again():
    gauge, reads = _counter()
    g = Throttled(gauge, every_s=0)
    assert [g() for _ in range(3)] == [1, 2, 3] and len(reads) == 3

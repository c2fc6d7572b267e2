"""The listener's throttled gauges: read at most once per period, the last value in between."""
from __future__ import annotations

import time

from marketspread.metrics_wiring import Throttled


def test_reads_once_per_period_and_returns_the_last_value_between():
    reads = []

    def gauge():
        reads.append(time.monotonic())
        return len(reads)

    g = Throttled(gauge, every_s=0.2)
    assert [g() for _ in range(5)] == [1] * 5 and len(reads) == 1
    time.sleep(0.25)
    assert g() == 2 and g() == 2 and len(reads) == 2


"""What the InfluxDB tests share: secrets that must never show, recent times, counting points."""
from __future__ import annotations

import time

from collector.influx import InfluxClient

SECRET_PW = "pw-Zq7-secret"
SECRET_TOKEN = "tok-Xk9-secret"


def recent_ns() -> int:
    """Return a time inside the 7-day raw policy, never in the future."""
    return time.time_ns() - 60 * 10**9


def count_sum(client: InfluxClient, source: str, field: str = "seq", where: str = "",
              params=None) -> tuple[int, int]:
    """Return count and sum of `field` over `source` (InfluxQL FROM text, e.g. 'rollup."w"')."""
    series = client.query(f'SELECT count("{field}"), sum("{field}") FROM {source} {where}', params)
    if not series:
        return 0, 0
    _, n, s = series[0].values[0]
    return n, s

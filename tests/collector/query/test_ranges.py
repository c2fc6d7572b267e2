"""Time ranges and parameter parsing (pure)."""
from __future__ import annotations

import pytest

from metrics_ui.figures import curve_levels
from collector.query.ranges import TimeRange, anchor_ns, check_name, check_worker, format_time, is_live, parse_time, resolve_range
from collector.units import NS


def test_parse_time_accepts_ns_and_rfc3339_to_the_ns():
    assert parse_time("1700000000123456789") == 1700000000123456789
    assert parse_time("2023-11-14T22:13:20.123456789Z") == 1700000000123456789
    assert parse_time("2023-11-15T00:13:20.5+02:00") == 1700000000500000000
    assert parse_time(format_time(1700000000000000001)) == 1700000000000000001


@pytest.mark.parametrize("text", ["", "now", "2023-11-14", "2023-11-14T22:13:20", "1e9", "-5",
                                  "2023-02-30T00:00:00Z", "9" * 25, "2200-01-01T00:00:00Z"])
def test_parse_time_refuses_what_it_cannot_read(text):
    with pytest.raises(ValueError):
        parse_time(text)


def test_relative_ranges_end_at_now_when_live_and_at_the_run_end_when_finished():
    now = 1_000_000 * NS
    assert is_live(now - 9 * NS, now) and not is_live(now - 10 * NS, now)
    assert anchor_ns(now - 2 * NS, now) == now
    assert anchor_ns(now - 3600 * NS, now) == now - 3599 * NS
    assert resolve_range("5m", now) == TimeRange(now - 300 * NS, now)
    assert resolve_range("24h", now).seconds == 86400
    assert resolve_range(None, now).seconds == 300
    assert resolve_range("custom", now, str(now - 5 * NS), None) == TimeRange(now - 5 * NS, now)
    with pytest.raises(ValueError, match="start date"):
        resolve_range("custom", now, None, None)
    with pytest.raises(ValueError, match="after the start"):
        resolve_range("custom", now, str(now), str(now - 1))


def test_names_and_workers_are_checked_by_the_one_validator():
    assert check_name("run-1", "run") == "run-1"
    assert check_worker("host-a/p0") == "host-a/p0" and check_worker("host-a.lan/ingress") == "host-a.lan/ingress"
    for bad in ("", "a b", "x'", "=1+1", "a\nb", "run-1\n", "x" * 201, "é", "a/b", "..", "/abs"):
        with pytest.raises(ValueError):
            check_name(bad, "run")
    for bad in ("", "host a/p0", "=cmd|calc", "host/../p0", "/p0", "host//p0", "p0\n", "w" * 201, "h\\p0"):
        with pytest.raises(ValueError):
            check_worker(bad)


def test_curve_levels_reach_five_nines():
    levels = curve_levels()
    assert levels[0] == 0.0 and levels[-1] == pytest.approx(99.999)
    assert all(a < b for a, b in zip(levels, levels[1:]))

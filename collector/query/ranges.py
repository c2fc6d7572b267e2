"""Time ranges and parameter parsing for the dashboard and its export routes (pure, no I/O).

A run's window is relative to its *anchor*: now for a live run, the run's last point for
a finished one, so "last 5 min" of a finished run shows its final five minutes.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import NamedTuple

from collector.names import InvalidName, check_name, check_tag_value, is_name  # noqa: F401 (the one validator)
from collector.units import NS

LIVE_AFTER_NS = 10 * NS                      # a run is live if its last point is younger
#: Relative range choices of the picker: value -> (label, seconds).
RANGES = {"5m": ("last 5 min", 300), "1h": ("last 1 h", 3600), "24h": ("last 24 h", 86400)}
RANGE_CUSTOM = "custom"
#: The whole of the run a page shows: its start to its end (a live run's: now).
RANGE_RUN = "run"
RANGE_RUN_LABEL = "whole run"
DEFAULT_RANGE = RANGE_RUN
_FALLBACK_RANGE = "5m"                       # "whole run" of a run whose start is unknown
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$")
_MIN_NS, _MAX_NS = 0, 4_102_444_800 * NS     # 1970 .. 2100


class TimeRange(NamedTuple):
    """A half-open time range [start_ns, end_ns) in ns since the epoch."""
    start_ns: int
    end_ns: int

    @property
    def seconds(self) -> float:
        """Length of the range in seconds."""
        return (self.end_ns - self.start_ns) / NS


_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": NS}
_EPOCH = re.compile(r"^(\d+)(ns|us|µs|ms|s)?$")
#: A bare number this large is ns since the epoch (1973 onwards); smaller ones need a unit,
#: or seconds would silently be read as ns (a date in January 1970).
BARE_NS_FROM = 10**17


class ParsedTime(NamedTuple):
    """A parsed time and how it was read ("ns since the epoch", "RFC 3339", ...), to tell the user."""
    ns: int
    read_as: str


def read_time(text: str, unit: str | None = None) -> ParsedTime:
    """Parse RFC 3339, or epoch digits with a unit (`unit`, a suffix like `1700000000s`, or ns when
    the bare number is large enough); raise ValueError with a reason."""
    text = text.strip()
    m = _EPOCH.match(text)
    if m:
        digits, suffix = m.group(1), m.group(2)
        if len(digits) > 20:
            raise ValueError(f"time {text[:24]!r} is too large")
        if unit and suffix and unit != suffix:
            raise ValueError(f"time {text[:24]!r} has unit {suffix!r} but the parameter says {unit!r}")
        unit = unit or suffix
        if unit is None:
            if int(digits) < BARE_NS_FROM:
                raise ValueError(f"time {text[:24]!r} needs a unit: a suffix (s, ms, us, ns) or from_s=/from_ms=, "
                                 "or an RFC 3339 time; bare numbers are ns since the epoch")
            unit = "ns"
        ns = int(digits) * _UNITS[unit]
        read_as = {"ns": "ns", "us": "µs", "µs": "µs", "ms": "ms", "s": "seconds"}[unit] + " since the epoch"
    else:
        if unit:
            raise ValueError(f"time {text[:40]!r} is not a number of {unit}")
        m = _RFC3339.match(text)
        if not m:
            raise ValueError(f"time {text[:40]!r} is neither RFC 3339 (e.g. 2024-05-01T12:00:00Z) nor a number "
                             "with a unit (e.g. 1714564800s)")
        frac = (m.group(7) or "").ljust(9, "0")
        tz = m.group(8).upper()
        iso = f"{m.group(1)}-{m.group(2)}-{m.group(3)}T{m.group(4)}:{m.group(5)}:{m.group(6)}"
        iso += "+00:00" if tz == "Z" else tz
        try:
            dt = datetime.fromisoformat(iso)
        except ValueError as e:
            raise ValueError(f"time {text[:40]!r} is not a valid date: {e}") from None
        ns = int(dt.timestamp()) * NS + int(frac)
        read_as = "RFC 3339"
    if not _MIN_NS <= ns <= _MAX_NS:
        raise ValueError(f"time {text[:40]!r} is outside 1970..2100")
    return ParsedTime(ns, read_as)


def parse_time(text: str) -> int:
    """Parse a time as `read_time` does; return ns since the epoch."""
    return read_time(text).ns


def format_time(ns: int) -> str:
    """Return ns since the epoch as RFC 3339 UTC with ns precision (what InfluxQL accepts)."""
    dt = datetime.fromtimestamp(ns // NS, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % NS:09d}Z"


def check_worker(value: object, what: str = "worker") -> str:
    """Return a worker tag (`host-a/p0`: names joined by `/`); raise `InvalidName` otherwise."""
    check_tag_value(value, what)
    if not all(is_name(part) for part in str(value).split("/")):
        raise InvalidName(f"{what} {value!r} must be names (letters, digits and _ . : @ + -) joined by '/'")
    return str(value)


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?$")


def picker_time(date: str | None, clock: str | None, what: str) -> str | None:
    """Turn the picker's date (YYYY-MM-DD) and UTC time of day (HH:MM[:SS[.f]]) into RFC 3339.

    None when no date is picked; a time alone is refused. Raise ValueError with a reason.
    """
    if (date is not None and not isinstance(date, str)) or (clock is not None and not isinstance(clock, str)):
        raise ValueError(f"custom range: the {what} date and time must be text")
    clock = (clock or "").strip()
    if not date:
        if clock:
            raise ValueError(f"custom range: pick a {what} date for the time {clock[:20]!r}")
        return None
    date = str(date)[:10]
    if not _DATE.match(date):
        raise ValueError(f"custom range: {what} date {date!r} is not YYYY-MM-DD")
    m = _CLOCK.match(clock or "00:00")
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59 or int(m.group(3) or 0) > 59:
        raise ValueError(f"custom range: {what} time {clock[:20]!r} is not HH:MM or HH:MM:SS (UTC)")
    frac = f".{m.group(4)}" if m.group(4) else ""
    text = f"{date}T{int(m.group(1)):02d}:{m.group(2)}:{m.group(3) or '00'}{frac}Z"
    parse_time(text)                              # a real day of the calendar, 1970..2100
    return text


def is_live(last_ns: int, now_ns: int) -> bool:
    """Return whether a run whose last point is at `last_ns` is still live at `now_ns`."""
    return now_ns - last_ns < LIVE_AFTER_NS


def anchor_ns(last_ns: int, now_ns: int) -> int:
    """Return where relative ranges end: now for a live run, just past the last point otherwise."""
    return now_ns if is_live(last_ns, now_ns) else last_ns + NS


def _picked(text: str) -> int:
    """A custom range's time: the picker's RFC 3339 text, or the ns the pages keep it as."""
    return read_time(text, "ns" if text.strip().isdigit() else None).ns


def resolve_range(choice: str | None, anchor: int, custom_from: str | None = None,
                  custom_to: str | None = None, start_ns: int | None = None) -> TimeRange:
    """Turn the picker's choice (and custom times) into a TimeRange; raise ValueError with a reason.

    The whole run (`RANGE_RUN`, the default) is `start_ns` (the run's start) to the anchor;
    the last 5 min when the start is not given.
    """
    if choice is not None and (not isinstance(choice, str) or
                               (choice not in (RANGE_CUSTOM, RANGE_RUN) and choice not in RANGES)):
        raise ValueError(f"unknown range {str(choice)[:20]!r}: pick one of {', '.join((RANGE_RUN, *RANGES))} or custom")
    if choice == RANGE_CUSTOM:
        if not custom_from:
            raise ValueError("custom range: pick a start date and time")
        start = _picked(custom_from)
        end = _picked(custom_to) if custom_to else anchor
        if end <= start:
            raise ValueError("custom range: the end must be after the start")
        return TimeRange(start, end)
    choice = choice or DEFAULT_RANGE
    if choice == RANGE_RUN:
        if start_ns is not None and start_ns < anchor:
            return TimeRange(start_ns, anchor)
        choice = _FALLBACK_RANGE
    return TimeRange(anchor - RANGES[choice][1] * NS, anchor)

"""InfluxDB line protocol: the encoding of `collector.metrics.point.Point`, pure (no I/O).

Apart from the client: pure text, tested without a server, and shared by the client, the
writer (which encodes on its sender thread) and the in-memory writer of the tests.
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Any, Iterable, Mapping

from collector.metrics.point import Point, split_by_rp  # noqa: F401 (the package's interface)

_MEASUREMENT_ESC = str.maketrans({",": r"\,", " ": r"\ "})
_KEY_ESC = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ "})
_STR_ESC = str.maketrans({'"': r"\"", "\\": r"\\"})
_NEEDS_ESC = re.compile(r"[, =\\\n\r]")
_BAD_NAME = re.compile(r"[\n\r]|\\$")


def _name(s: str, table: dict, what: str) -> str:
    if not _NEEDS_ESC.search(s):
        if not s:
            raise ValueError(f"empty {what}")
        return s
    # a newline cannot be escaped, and a trailing backslash would escape the separator after it
    if not s or _BAD_NAME.search(s):
        raise ValueError(f"{what} {s!r} cannot be written in line protocol (empty, newline or trailing backslash)")
    return s.translate(table)


def _field_value(v: Any) -> str | None:
    if isinstance(v, str):
        return '"' + v.translate(_STR_ESC) + '"'
    if isinstance(v, bool):                              # before int: bool is an int
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):
        return f"{int(v)}i"
    if isinstance(v, numbers.Real):
        f = float(v)
        return repr(f) if math.isfinite(f) else None     # line protocol has no NaN or infinity
    raise ValueError(f"field value {v!r} of type {type(v).__name__} is not int, float, str or bool")


_HEADS: dict[tuple, str] = {}           # (measurement, tag items) -> escaped "measurement,tags"
_FIELD_KEYS: dict[str, str] = {}
_CACHE_MAX = 100_000                    # metrics repeat a few series; the bound guards odd callers


def _head(measurement: str, tags: Mapping[str, str]) -> str:
    key = (measurement, tuple(tags.items())) if tags else measurement
    head = _HEADS.get(key)
    if head is None:
        if measurement[:1] == "#":
            raise ValueError(f"measurement {measurement!r} would be read as a comment")
        head = _name(measurement, _MEASUREMENT_ESC, "measurement")
        # sorted tag keys: what InfluxDB stores anyway, and the cheapest form for it to parse
        for k, v in sorted(tags.items()):
            v = v if isinstance(v, str) else str(v)
            if v != "":
                head += f",{_name(k, _KEY_ESC, 'tag key')}={_name(v, _KEY_ESC, 'tag value')}"
        if len(_HEADS) >= _CACHE_MAX:
            _HEADS.clear()
        _HEADS[key] = head
    return head


def _field_key(k: str) -> str:
    e = _FIELD_KEYS.get(k)
    if e is None:
        e = _name(k, _KEY_ESC, "field key")
        if len(_FIELD_KEYS) >= _CACHE_MAX:
            _FIELD_KEYS.clear()
        _FIELD_KEYS[k] = e
    return e


def encode_point(p: Point) -> str | None:
    """Return one point as a line (no newline), or None if it has no finite field left."""
    fields = []
    for k, v in p.fields.items():
        t = type(v)
        if t is float:                                    # the common cases first, exact types
            s = repr(v) if v - v == 0 else None           # false for NaN and infinities
        elif t is int:
            s = f"{v}i"
        else:
            s = _field_value(v)
        if s is not None:
            fields.append(f"{_field_key(k)}={s}")
    if not fields:
        return None
    return f"{_head(p.measurement, p.tags)} {','.join(fields)} {int(p.time_ns)}"


def encode_lines(points: Iterable[Point]) -> bytes:
    """Encode points as newline-terminated UTF-8 line protocol.

    Tags with an empty value are left out (InfluxDB reads a missing tag as ""); non-finite
    float fields are left out, and so is a point left without fields. Raises ValueError for
    names line protocol cannot carry (empty, a newline, a trailing backslash).
    """
    lines = [line for line in map(encode_point, points) if line is not None]
    return ("\n".join(lines) + "\n").encode() if lines else b""

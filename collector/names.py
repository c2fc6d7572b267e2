"""One validator for every name a user types: run ids, rule names, labels, database names.

Names end up in file paths, InfluxDB tags, URLs and HTML, so they are held to a strict
character set rather than escaped at each use: letters, digits and `_ . : @ + -`, starting
with a letter or digit, at most `MAX_NAME_CHARS` long, never `..`, never a path separator
or a control character. Tag values a run reports itself (worker `host/p0`, step names) are
not names: `check_tag_value` bounds them without forbidding `/`, and they are never used
as paths.

Example::

    run_id = check_name(args.run_id, "run id")      # raises NameError_ with a clear message
"""
from __future__ import annotations

import re

MAX_NAME_CHARS = 128
MAX_TAG_CHARS = 200

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+\-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidName(ValueError):
    """A user-typed name that is not allowed; the message says why, for the user."""


def _bounded(value: object, what: str, limit: int) -> None:
    """Raise unless `value` is a non-empty string of at most `limit` characters, none a control one."""
    if not isinstance(value, str) or not value:
        raise InvalidName(f"{what} must be a non-empty string")
    if len(value) > limit:
        raise InvalidName(f"{what} is {len(value)} characters long; at most {limit} are allowed")
    if _CONTROL.search(value):
        raise InvalidName(f"{what} {value!r} contains a control character")


def check_name(value: object, what: str = "name") -> str:
    """Return `value` if it is a safe name, else raise `InvalidName` saying what is wrong."""
    _bounded(value, what, MAX_NAME_CHARS)
    if "/" in value or "\\" in value:
        raise InvalidName(f"{what} {value!r} contains a path separator")
    if ".." in value:
        raise InvalidName(f"{what} {value!r} contains '..'")
    if not _NAME.fullmatch(value):
        raise InvalidName(f"{what} {value!r} may use only letters, digits and _ . : @ + - "
                          "and must start with a letter or digit")
    return value


def is_name(value: object) -> bool:
    """True if `check_name` would accept `value`."""
    try:
        check_name(value)
    except InvalidName:
        return False
    return True


def check_tag_value(value: object, what: str = "value") -> str:
    """Return a reported tag value (worker, step, pipeline) if bounded and printable, else raise."""
    _bounded(value, what, MAX_TAG_CHARS)
    if ".." in value or value.startswith("/") or "\\" in value:
        raise InvalidName(f"{what} {value!r} looks like a path")
    return value


_NOT_NAME = re.compile(r"[^A-Za-z0-9_.:@+\-]")


def to_name(value: object, fallback: str = "query") -> str:
    """Return a safe name made from free text (a Spark query or application name).

    Characters `check_name` refuses become `_`, a leading non-alphanumeric is dropped,
    `..` collapses, and the result is cut to `MAX_NAME_CHARS`; `fallback` when nothing is left.
    """
    text = _NOT_NAME.sub("_", str(value or ""))
    while ".." in text:
        text = text.replace("..", ".")
    text = text.lstrip("_.:@+-")[:MAX_NAME_CHARS]
    return text if is_name(text) else fallback

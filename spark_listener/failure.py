"""Why a query run failed, read from the exception text Spark hands a listener (pure).

`QueryTerminatedEvent.exception` is the JVM exception's text with its stack. For a Python
exception raised in the user's `foreachBatch`, UDF or `mapInPandas` it opens with py4j's
or Spark's preamble and carries the Python traceback inside, so its first few hundred
characters end before the message a user needs. `parse_failure` finds the exception that
was raised last (the innermost Python one when there is a Python traceback, else the JVM
exception, its deepest `Caused by:`), its message, and the traceback frames in the user's
own code: not in PySpark, py4j, installed packages, the standard library or this product.
The same parser reads a Python traceback of the user's script (`traceback.format_exception`).

>>> r = parse_failure(event.exception)
>>> r.error_class, r.message, r.trace[-1]
('RuntimeError', 'bad batch 1: the upstream table is gone', 'job.py:33 in fb: raise RuntimeError(...)')
"""
from __future__ import annotations

import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from collector.run_status import FIELD_ERROR, FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE

MAX_MESSAGE_CHARS = 2000
MAX_TRACE_LINES = 10
MAX_CODE_CHARS = 200
MAX_ERROR_CHARS = 500           # the short `error` field: "Class: message"
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<fn>.+))?$')
_EXCEPTION = re.compile(r"^(?P<cls>[A-Za-z_][\w.$]*)(?::\s?(?P<msg>.*))?$")
_CAUSED_BY = "Caused by: "
_SQLSTATE = re.compile(r"^\s*SQLSTATE: \w+\s*$")
_PRODUCT_PACKAGES = ("alerts", "collector", "engine", "marketspread", "metrics_ui", "perf", "spark_listener")


def _not_user_code() -> tuple[str, ...]:
    """Path parts of frames that are not the user's: libraries, the standard library, this product."""
    root = Path(__file__).resolve().parents[1]
    parts = ["/site-packages/", "/dist-packages/", "/pyspark/", "/py4j/", "<frozen ", "<string>"]
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            parts.append(str(Path(p)) + "/")
    parts += [f"{root / pkg}/" for pkg in _PRODUCT_PACKAGES]
    return tuple(parts)


NOT_USER_CODE = _not_user_code()


@dataclass(frozen=True)
class FailureReason:
    """A failed run's exception: its class, message (bounded) and the user's frames, innermost last."""
    error_class: str
    message: str
    trace: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """ "Class: message", first `MAX_ERROR_CHARS` characters (the `error` field)."""
        text = f"{self.error_class}: {self.message}" if self.error_class else self.message
        return text[:MAX_ERROR_CHARS]

    def fields(self) -> dict[str, str]:
        """The `runs` fields of this reason (collector/run_status.py)."""
        return {FIELD_ERROR: self.summary, FIELD_ERROR_CLASS: self.error_class,
                FIELD_ERROR_MESSAGE: self.message, FIELD_ERROR_TRACE: "\n".join(self.trace)}


def parse_failure(text: str | None, not_user_code: tuple[str, ...] = NOT_USER_CODE) -> FailureReason | None:
    """Return the reason in an exception text (Spark's or a Python traceback); None for no text."""
    if not text or not text.strip():
        return None
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip().endswith(_TRACEBACK)]
    if starts:
        reason = _python_reason(lines, starts, not_user_code)
        if reason is not None:
            return reason
    return _jvm_reason(lines)


def _python_reason(lines: list[str], starts: list[int], not_user_code: tuple[str, ...]) -> FailureReason | None:
    """The last exception of the Python tracebacks in `lines`, with the user's frames of them all."""
    frames: list[str] = []
    last: tuple[str, str] | None = None
    for start in starts:
        i = start + 1
        while i < len(lines) and lines[i].startswith(" "):
            m = _FRAME.match(lines[i])
            i += 1
            if m is None:               # "[Previous line repeated ...]" and the like
                continue
            code = ""
            if i < len(lines) and lines[i].startswith("    ") and not _FRAME.match(lines[i]):
                code = lines[i].strip()
                i += 1
                while i < len(lines) and lines[i].strip() and set(lines[i].strip()) <= set("^~"):
                    i += 1              # Python 3.11's position markers
            if not any(part in m["path"] for part in not_user_code):
                frames.append(_frame_line(m["path"], m["line"], m["fn"], code))
        if i >= len(lines):
            continue
        m = _EXCEPTION.match(lines[i])
        if m is None:
            continue
        last = (m["cls"], _message(m["msg"] or "", lines, i + 1))
    if last is None:
        return None
    return FailureReason(last[0], last[1], tuple(frames[-MAX_TRACE_LINES:]))


def _jvm_reason(lines: list[str]) -> FailureReason:
    """The JVM exception's class and message: its deepest `Caused by:`, else its first line."""
    at = 0
    for i, line in enumerate(lines):
        if line.startswith(_CAUSED_BY):
            at = i
    head = lines[at][len(_CAUSED_BY):] if lines[at].startswith(_CAUSED_BY) else lines[at]
    m = _EXCEPTION.match(head.strip())
    if m is None or (m["msg"] is None and " " in head.strip()):
        return FailureReason("", _message(head.strip(), lines, at + 1))
    return FailureReason(m["cls"], _message(m["msg"] or "", lines, at + 1))


def _message(first: str, lines: list[str], i: int) -> str:
    """The exception's message: its line and those that follow it, up to a blank or stack line."""
    parts = [first.strip()]
    while i < len(lines) and lines[i].strip() and not lines[i].startswith("\tat ") \
            and not lines[i].startswith(_CAUSED_BY) and not lines[i].rstrip().endswith(_TRACEBACK):
        if not _SQLSTATE.match(lines[i]):
            parts.append(lines[i].rstrip())
        i += 1
        if sum(len(p) for p in parts) > MAX_MESSAGE_CHARS:
            break
    return "\n".join(p for p in parts if p)[:MAX_MESSAGE_CHARS]


def _frame_line(path: str, line: str, fn: str | None, code: str) -> str:
    """One frame as `path:line in fn: code`."""
    where = f"{path}:{line}" + (f" in {fn}" if fn else "")
    return f"{where}: {code[:MAX_CODE_CHARS]}" if code else where

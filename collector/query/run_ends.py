"""How a run ended, as the dashboard shows it: one status per run and the failure's reason (pure).

A run (the `run` tag) holds one or more queries, each with its newest `runs` row
(collector/run_status.py has the statuses and fields). Each query reads as its row's status,
or *lost* when the row says running but the query's newest sign of life (the monitor's
heartbeat, its newest batch's end, its run's newest latency interval, its start) is older
than LOST_AFTER_S. The run's status is the most telling of its queries' (`run_status_of`).
Rows written before heartbeats and split errors existed read the same way: a running row's
sign of life is then its batches and latency, and a bare `error` is split at its class.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from collector.run_status import (FIELD_ERROR, FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE,
                                  STATUS_FAILED, STATUS_FINISHED, STATUS_LOST, STATUS_RUNNING, STATUS_STOPPED,
                                  run_status)

#: What the pages call a run whose driver is still heard from (the `runs` row's running).
STATUS_LIVE = "live"
#: A run's status from its queries': the first found in this order (a failure outranks the rest).
_PRECEDENCE = (STATUS_FAILED, STATUS_LIVE, STATUS_LOST, STATUS_STOPPED, STATUS_FINISHED)
#: "pkg.Class: message" (Python or JVM class names; Spark's `[ERROR_CLASS]` prefix is part of the message).
_CLASS_PREFIX = re.compile(r"^([A-Za-z_][\w$]*(?:\.[A-Za-z_][\w$]*)*): (.*)$", re.DOTALL)
#: Characters of a trace kept for the pages (the listener keeps only the user's lines already).
MAX_TRACE_CHARS = 4000


@dataclass(frozen=True)
class RunError:
    """Why a query failed: the exception's class, its message and the trace lines naming the user's code."""
    error_class: str              # "" when the row's error named none
    message: str
    trace: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        """Return "Class: message" (the message alone when there is no class)."""
        return f"{self.error_class}: {self.message}" if self.error_class else self.message


@dataclass(frozen=True)
class QueryEnd:
    """One query's status as shown, when its run ended (None: not ended), why it failed, when last heard of."""
    status: str                   # live, finished, stopped, failed or lost
    ended_ns: int | None
    error: RunError | None
    seen_ns: int | None           # its newest sign of life


def _text(v) -> str:
    return v.strip() if isinstance(v, str) else ""


def run_error(row: Mapping[str, object]) -> RunError | None:
    """Return a `runs` row's failure (None without one), from its split fields or, for older rows, its `error`."""
    cls, message = _text(row.get(FIELD_ERROR_CLASS)), _text(row.get(FIELD_ERROR_MESSAGE))
    raw = row.get(FIELD_ERROR_TRACE)
    trace = tuple(line.rstrip() for line in (raw if isinstance(raw, str) else "")[:MAX_TRACE_CHARS].splitlines()
                  if line.strip())
    if not cls and not message:
        whole = _text(row.get(FIELD_ERROR))
        if not whole:
            return None
        m = _CLASS_PREFIX.match(whole)
        cls, message = (m.group(1), m.group(2).strip()) if m else ("", whole)
    return RunError(cls, message, trace)


def newest(*times: int | None) -> int | None:
    """Return the latest of the times given (None when none is)."""
    known = [t for t in times if t is not None]
    return max(known) if known else None


def query_end(row_status: str | None, ended_ns: int | None, error: RunError | None, seen_ns: int | None,
              now_ns: int) -> QueryEnd:
    """Return one query's status as shown: its row's, lost for a running row gone quiet, live for running."""
    status = run_status(row_status or STATUS_RUNNING, seen_ns, now_ns)
    if status == STATUS_RUNNING:
        return QueryEnd(STATUS_LIVE, None, None, seen_ns)
    if status == STATUS_FAILED and error is None:
        error = RunError("", "the query failed; its monitor recorded no message")
    return QueryEnd(status, ended_ns if status != STATUS_LOST else None,
                    error if status == STATUS_FAILED else None, seen_ns)


def run_status_of(ends: Iterable[QueryEnd]) -> QueryEnd | None:
    """Return the query end that speaks for a run: a failure first, then live, lost, stopped, finished.

    Of several queries with the same status, the newest end (or sign of life) speaks.
    """
    found = list(ends)
    for status in _PRECEDENCE:
        same = [e for e in found if e.status == status]
        if same:
            return max(same, key=lambda e: (e.ended_ns or 0, e.seen_ns or 0))
    return found[0] if found else None

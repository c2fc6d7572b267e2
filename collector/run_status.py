"""How a query run ends, as the `runs` measurement records it and every reader tells it (pure).

A run's row in `runs` (one per start of a query: Spark's runId) is written at its start
with `status` = running and rewritten in place (same series and time) while it runs
(`FIELD_LAST_SEEN_NS`, the monitor's heartbeat) and at its end: finished (a query that
ran out of input, `availableNow`/`once`), stopped (`query.stop()`, the session or the
script ending), or failed (with the exception's class, message and the trace lines that
name the user's code). A run still marked running whose monitor has not been heard from
for `LOST_AFTER_S` is *lost*: its driver died without a word (SIGKILL, OOM, a lost host).
"""
from __future__ import annotations

from collector.units import NS

STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"
STATUS_STOPPED = "stopped"
STATUS_FAILED = "failed"
STATUS_LOST = "lost"                # never written: read from a running row gone quiet
ENDED = (STATUS_FINISHED, STATUS_STOPPED, STATUS_FAILED)

#: Fields of a `runs` row besides `status` (docs/METRICS.md).
FIELD_STATUS = "status"
FIELD_LAST_SEEN_NS = "last_seen_ns"         # the monitor's last heartbeat for the run (ns)
FIELD_ERROR = "error"                       # "Class: message", short (first 500 characters)
FIELD_ERROR_CLASS = "error_class"           # e.g. "RuntimeError", "org.apache.spark.SparkException"
FIELD_ERROR_MESSAGE = "error_message"
FIELD_ERROR_TRACE = "error_trace"           # the trace lines naming the user's code, newline-joined

#: How often a monitor rewrites `last_seen_ns` of each running run.
HEARTBEAT_S = 5.0
#: A running run not heard from for this long is lost (three missed heartbeats).
LOST_AFTER_S = 15.0


def run_status(status: str | None, last_seen_ns: int | None, now_ns: int, lost_after_s: float = LOST_AFTER_S) -> str:
    """Return the status to show for a run: its recorded one, or lost for a running run gone quiet.

    `last_seen_ns` is the newest sign of life the run left (heartbeat, batch or start);
    None (a row written before heartbeats existed) never reads as lost.
    """
    if status != STATUS_RUNNING:
        return status or STATUS_RUNNING
    if last_seen_ns is not None and now_ns - last_seen_ns > lost_after_s * NS:
        return STATUS_LOST
    return STATUS_RUNNING

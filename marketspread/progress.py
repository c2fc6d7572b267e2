"""Publish the job's committed source offset for ingress backpressure and replay.

Spark calls a source's `commit(end)` only when it plans the *next* batch, so an idle
stream would never publish its last offset. Query progress events arrive after each
batch's commit log entry is written; this listener turns them into the log's
`consumed` counter.
"""
from __future__ import annotations

import json

from spark_listener.events import JsonEventsListener

from engine.formats.log import write_consumed


def end_offset(progress) -> int | None:
    """Return the ingress source's end offset from a progress object, if present."""
    for src in progress.sources:
        raw = src.endOffset
        if raw is None:
            continue
        off = json.loads(raw) if isinstance(raw, str) else raw
        if isinstance(off, dict) and "seq" in off:
            return int(off["seq"])
    return None


class ConsumedOffsetListener(JsonEventsListener):
    """Write `consumed` in the ingress log folder after each committed batch."""

    def __init__(self, log_dir: str, query_id: str | None):
        self.log_dir = log_dir
        self.query_id = query_id

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        if str(event.progress.id) == self.query_id:
            self.publish(event.progress)

    def publish(self, progress) -> None:
        """Write the progress' end offset as the log's `consumed` counter."""
        off = end_offset(progress)
        if off is not None:
            write_consumed(self.log_dir, off)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

"""Publish the job's committed position in the log for ingress backpressure, replay and GC.

Each batch's manifest says how far every shard has applied the log (`consumed`: the
least of them). It is published only once Spark has committed the batch (query progress
events come after the commit log entry): the ingress deletes chunk files below
`consumed`, and a batch Spark may still replay must keep its files.
"""
from __future__ import annotations

from pyspark.sql.streaming import StreamingQueryListener

from .ingress_log import write_consumed
from .results import read_manifest


class ConsumedOffsetListener(StreamingQueryListener):
    """Write `consumed` in the ingress log folder after each committed batch."""

    def __init__(self, log_dir: str, out_dir: str, query_id: str):
        self.log_dir = log_dir
        self.out_dir = out_dir
        self.query_id = query_id

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        p = event.progress
        if str(p.id) != self.query_id:
            return
        m = read_manifest(self.out_dir, int(p.batchId))
        if m is not None and "consumed" in m:
            write_consumed(self.log_dir, int(m["consumed"]))

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

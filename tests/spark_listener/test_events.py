"""JsonEventsListener delivers the same events as PySpark's own listener bridge (real Spark)."""
from __future__ import annotations

import json
import threading
import time

import pytest
from pyspark.sql.functions import col
from pyspark.sql.streaming import StreamingQueryListener

from spark_listener.events import JsonEventsListener

pytestmark = pytest.mark.slow      # two whole queries on Spark, ~20 s


def _recorder(base):
    class Recorder(base):
        def __init__(self):
            self.started, self.progress, self.terminated = [], [], []
            self.done = threading.Event()

        def onQueryStarted(self, event):
            self.started.append(event)

        def onQueryProgress(self, event):
            self.progress.append(event.progress)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            self.terminated.append(event)
            self.done.set()

    return Recorder()


def _offset(text: str):
    return None if text == "None" else json.loads(text)     # PySpark's bridge renders null "None"


def _progress_view(p) -> dict:
    """The fields our listeners read, in comparable form (offsets parsed from their JSON)."""
    return {
        "id": p.id, "runId": p.runId, "name": p.name, "batchId": p.batchId, "timestamp": p.timestamp,
        "batchDuration": p.batchDuration, "durationMs": dict(p.durationMs), "numInputRows": p.numInputRows,
        "sources": [(s.description, _offset(s.startOffset), _offset(s.endOffset), s.numInputRows)
                    for s in p.sources],
        "state": [(o.operatorName, o.numRowsTotal, o.numRowsUpdated, o.memoryUsedBytes) for o in p.stateOperators],
    }


def test_json_events_equal_pysparks_own(spark, monkeypatch):
    from pyspark.sql.streaming.listener import QueryProgressEvent
    parsed = []
    from_json = QueryProgressEvent.fromJson.__func__
    monkeypatch.setattr(QueryProgressEvent, "fromJson",
                        classmethod(lambda cls, j: parsed.append(j["progress"]["batchId"]) or from_json(cls, j)))
    ours, theirs = _recorder(JsonEventsListener), _recorder(StreamingQueryListener)
    assert isinstance(ours, StreamingQueryListener)
    spark.streams.addListener(ours)
    spark.streams.addListener(theirs)
    try:
        counts = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
                  .groupBy((col("value") % 7).alias("k")).count())
        query = (counts.writeStream.format("noop").outputMode("update").queryName("json-events-check")
                 .trigger(processingTime="200 milliseconds").start())
        deadline = time.monotonic() + 60
        while len(theirs.progress) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        query.stop()
        assert ours.done.wait(30) and theirs.done.wait(30)
    finally:
        spark.streams.removeListener(ours)
        spark.streams.removeListener(theirs)

    assert len(theirs.progress) >= 4
    assert [_progress_view(p) for p in ours.progress] == [_progress_view(p) for p in theirs.progress]
    assert parsed == [p.batchId for p in ours.progress]           # ours came through the JSON path
    assert any(v["state"] and v["state"][0][1] == 7 for v in map(_progress_view, ours.progress))
    (a,), (b,) = ours.started, theirs.started
    assert (a.id, a.runId, a.name, a.timestamp) == (b.id, b.runId, b.name, b.timestamp) and a.name == "json-events-check"
    (a,), (b,) = ours.terminated, theirs.terminated
    assert (a.id, a.runId, a.exception) == (b.id, b.runId, None)

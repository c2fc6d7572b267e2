"""A StreamingQueryListener base whose events cross from the JVM as one JSON string each.

PySpark's own bridge (`JStreamingQueryListener`) builds every event field by field over
py4j. Each Java map it converts ends its iteration with a `NoSuchElementException`, and
PySpark's error conversion probes that exception with ~15 reflective class look-ups, each
failing through every jar on the classpath. Measured here: ~49 ms of CPU per progress
event (in the JVM's listener thread and the driver), about a third of a core at six
batches a second, taken from the job on a 2-core machine. The Java events carry their
own `json()`; PySpark's `fromJson` (the path Spark Connect uses) turns it into the same
event objects in ~1 ms.

The hook is `StreamingQueryListener._jlistener`, the object PySpark registers with the
JVM (`StreamingQueryManager.addListener`); it is private, so
`tests/spark_listener` checks it against the real Spark on every run.
"""
from __future__ import annotations

import json

from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (JStreamingQueryListener, QueryIdleEvent, QueryProgressEvent,
                                            QueryStartedEvent, QueryTerminatedEvent)


class _JsonBridge(JStreamingQueryListener):
    """The py4j callback object: one `json()` call per event, parsed in Python."""

    def onQueryStarted(self, jevent) -> None:
        self.pylistener.onQueryStarted(QueryStartedEvent.fromJson(json.loads(jevent.json())))

    def onQueryProgress(self, jevent) -> None:
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent) -> None:
        self.pylistener.onQueryIdle(QueryIdleEvent.fromJson(json.loads(jevent.json())))

    def onQueryTerminated(self, jevent) -> None:
        self.pylistener.onQueryTerminated(QueryTerminatedEvent.fromJson(json.loads(jevent.json())))


class JsonEventsListener(StreamingQueryListener):
    """Subclass instead of `StreamingQueryListener`; callbacks get the same event types."""

    @property
    def _jlistener(self):
        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_JsonBridge(self))
        return self._jlistenerobj

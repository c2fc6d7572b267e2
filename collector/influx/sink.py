"""What a metrics producer needs from a writer: `PointSink` and `WriterStats`, now `collector.metrics.backend`'s.

Kept so importers of `collector.influx.sink` go on working; producers depend on the
backend-neutral interface only.
"""
from collector.metrics.backend import PointSink, WriterStats

__all__ = ["PointSink", "WriterStats"]

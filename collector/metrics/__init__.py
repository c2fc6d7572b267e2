"""The metrics backend boundary: what writers and readers need, whatever stores the points.

- `point`: the `Point` record every writer builds (pure);
- `backend`: the write interface (`PointSink`, `WriterStats`), the read interface of the
  typed views the alerts use (`MetricsReader`) and the one error a caller catches
  (`MetricsError`);
- `views`: the records those views return (`FigureRequest`, `SeriesValue`, `QueryNow`,
  `Heartbeat`, `HistoryRow`), pure;
- `memory`: an in-memory backend implementing both, for unit tests.

InfluxDB implements them in `collector/influx/` (`InfluxWriter`, `reader.InfluxReader`).
Nothing here imports a backend; the names below are the package's interface for writers and readers.
"""
from collector.metrics.backend import MetricsError, MetricsReader, PointSink, WriterStats
from collector.metrics.point import Point, split_by_rp

__all__ = ["MetricsError", "MetricsReader", "Point", "PointSink", "WriterStats", "split_by_rp"]

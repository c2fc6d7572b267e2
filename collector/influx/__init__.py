"""Talk to any InfluxDB through its v1 HTTP API: line protocol, queries, a never-blocking writer.

The InfluxDB implementation of the metrics backend boundary (`collector.metrics`). One
module per idea: `config` (`InfluxConfig` from `MS_INFLUX_*`), `lineproto` (the encoding
of `collector.metrics.point.Point`), `client` (`InfluxClient`, `InfluxError`, a
`MetricsError`), `schema` (retention policies, `ensure_database`), `spool` (the disk
spool) and `writer` (`InfluxWriter`, the write interface), `reader` (`InfluxReader`, the
alerts' read interface, with `figure_reads`, `run_reads` and `alert_reads`: the InfluxQL);
`server` and `credentials` run the project's own InfluxDB. The names below are the
package's interface for its importers (`Point`, `PointSink` and `WriterStats` re-exported
from `collector.metrics`, where new code imports them).
"""
from collector.influx.client import InfluxClient, InfluxError
from collector.influx.config import InfluxConfig
from collector.influx.lineproto import Point, encode_lines, split_by_rp
from collector.influx.schema import RP_ROLLUP, ensure_database
from collector.metrics.backend import PointSink, WriterStats
from collector.influx.writer import InfluxWriter

__all__ = [
    "InfluxClient", "InfluxConfig", "InfluxError", "InfluxWriter", "Point", "PointSink", "RP_ROLLUP",
    "WriterStats", "encode_lines", "ensure_database", "split_by_rp",
]

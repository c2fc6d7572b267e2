"""Talk to any InfluxDB through its v1 HTTP API: line protocol, queries, a never-blocking writer.

One module per idea: `config` (`InfluxConfig` from `MS_INFLUX_*`), `lineproto` (`Point`,
pure encoding), `client` (`InfluxClient`, `InfluxError`), `schema` (retention policies,
`ensure_database`), `sink` (the `PointSink` protocol), `spool` (the disk spool) and
`writer` (`InfluxWriter`, what the job uses); `server` and `credentials` run the
project's own InfluxDB. The names below are the package's interface for its importers.
"""
from collector.influx.client import InfluxClient, InfluxError
from collector.influx.config import InfluxConfig
from collector.influx.lineproto import Point, encode_lines, split_by_rp
from collector.influx.schema import RP_ROLLUP, ensure_database
from collector.influx.sink import PointSink, WriterStats
from collector.influx.writer import InfluxWriter

__all__ = [
    "InfluxClient", "InfluxConfig", "InfluxError", "InfluxWriter", "Point", "PointSink", "RP_ROLLUP",
    "WriterStats", "encode_lines", "ensure_database", "split_by_rp",
]

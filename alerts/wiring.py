"""Where the alerts meet their metrics backend: the one alerts module that imports `collector.influx`.

Every other alerts module reads through a `collector.metrics.backend.MetricsReader`,
writes through a `PointSink` and catches `MetricsError`. Callers hand them a reader, or
(as the dashboard, the monitor and the job do) an `InfluxClient`, which `reader_of`
wraps in the InfluxDB reader; the CLI and the service open their backend here
(`open_reader`, `open_writer`: `collector.influx.factory`'s).
"""
from __future__ import annotations

from collector.influx import InfluxClient, InfluxConfig
from collector.influx.factory import open_reader, open_writer
from collector.influx.reader import InfluxReader
from collector.metrics.backend import MetricsReader

__all__ = ["BackendConfig", "close_reader", "describe", "open_reader", "open_writer", "reader_of"]

#: The backend's settings record (`from_env` at an entry point, as every settings record).
BackendConfig = InfluxConfig


def reader_of(source) -> MetricsReader:
    """Return `source` if it is a reader already, else the InfluxDB reader of a client or a config."""
    if isinstance(source, InfluxConfig):
        return InfluxReader(InfluxClient(source))
    if isinstance(source, InfluxClient):
        return InfluxReader(source)
    return source


def close_reader(reader) -> None:
    """Close a reader's connection, if it keeps one."""
    client = getattr(reader, "client", None)
    if client is not None:
        client.close()


def describe(config: InfluxConfig) -> str:
    """Return how a log line names the backend."""
    return f"InfluxDB {config.url}"

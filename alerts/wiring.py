"""Where the alerts meet their metrics backend: the one alerts module that imports `collector.influx`.

Every other alerts module reads through a `collector.metrics.backend.MetricsReader`,
writes through a `PointSink` and catches `MetricsError`. Callers hand them a reader, or
(as the dashboard, the monitor and the job do) an `InfluxClient`, which `reader_of`
wraps in the InfluxDB reader; the CLI and the service open their backend here.
"""
from __future__ import annotations

from pathlib import Path

from collector.influx import InfluxClient, InfluxConfig, InfluxWriter
from collector.influx.reader import InfluxReader
from collector.metrics.backend import MetricsReader


def reader_of(source) -> MetricsReader:
    """Return `source` if it is a reader already, else the InfluxDB reader of a client or a config."""
    if isinstance(source, InfluxConfig):
        return InfluxReader(InfluxClient(source))
    if isinstance(source, InfluxClient):
        return InfluxReader(source)
    return source


def backend_config() -> InfluxConfig:
    """Return the backend's settings from the environment (an entry point's, or a library caller's with none)."""
    return InfluxConfig.from_env()


def open_reader(config: InfluxConfig) -> InfluxReader:
    """Return a reader of the configured backend (the caller closes it with `close_reader`)."""
    return InfluxReader(InfluxClient(config))


def close_reader(reader) -> None:
    """Close a reader's connection, if it keeps one."""
    client = getattr(reader, "client", None)
    if client is not None:
        client.close()


def open_writer(config: InfluxConfig, spool_dir: Path, **options) -> InfluxWriter:
    """Return a never-blocking writer of the configured backend, spooling to `spool_dir` while it is away."""
    return InfluxWriter(InfluxClient(config), spool_dir, **options)


def describe(config: InfluxConfig) -> str:
    """Return how a log line names the backend."""
    return f"InfluxDB {config.url}"

"""The product's one way to open the InfluxDB side of the backend boundary: a writer or a reader.

Every process writes through one never-blocking `InfluxWriter` (what `PointSink` asks),
sending every `config.flush_s` seconds and spooling under a folder of its own while the
server is away; readers get an `InfluxReader` (what `MetricsReader` asks). Opening them here
keeps the writer's settings in one place and the callers on the backend-neutral interfaces.

>>> writer = open_writer(InfluxConfig.from_env(), state_dir / "metrics-spool" / "job")
>>> writer.add(points)
>>> writer.close()
"""
from __future__ import annotations

from pathlib import Path

from collector.influx.client import InfluxClient
from collector.influx.config import InfluxConfig
from collector.influx.reader import InfluxReader
from collector.influx.writer import InfluxWriter


def open_writer(config: InfluxConfig, spool_dir: Path | str, *, background: bool = False,
                interval: float | None = None, start: bool = True) -> InfluxWriter:
    """Return a writer to `config`'s database (started unless `start` is false), spooling to `spool_dir`.

    `interval`: seconds it gathers points before a send (None: `config.flush_s`, `MS_INFLUX_FLUSH_S`);
    `background`: its thread runs at a lower CPU priority (collector/background.py).
    """
    writer = InfluxWriter(InfluxClient(config), spool_dir, background=background,
                          interval=config.flush_s if interval is None else interval)
    return writer.start() if start else writer


def open_reader(config: InfluxConfig) -> InfluxReader:
    """Return a reader of `config`'s database (`reader.client.close()` closes its connection)."""
    return InfluxReader(InfluxClient(config))

"""InfluxDB fixtures: one real `influxd` per test session on a free loopback port."""
from __future__ import annotations

import re

import pytest

from collector.influx import InfluxClient, InfluxConfig, ensure_database
from collector.influx_server import InfluxServer, find_influxd


@pytest.fixture(scope="session")
def influxdb(tmp_path_factory):
    """A started InfluxServer (Debian's influxd 1.x) in a temporary state dir, stopped at the end."""
    if find_influxd() is None:
        pytest.skip("influxd is not installed (scripts/setup installs Debian's `influxdb` package)")
    server = InfluxServer(tmp_path_factory.mktemp("influx-state"), port=0)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def influx_client(influxdb, request):
    """A client of a fresh database (with the raw/rollup policies) of its own, dropped afterwards."""
    db = "t_" + re.sub(r"\W", "_", request.node.name)[:60]
    client = InfluxClient(InfluxConfig(url=influxdb.url, db=db))
    client.query(f'DROP DATABASE "{db}"')
    ensure_database(client)
    yield client
    client.query(f'DROP DATABASE "{db}"')
    client.close()

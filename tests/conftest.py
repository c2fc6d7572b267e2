"""Shared fixtures: Wallaroo fixtures, one local Spark session, one real InfluxDB server."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from collector.influx import InfluxClient, InfluxConfig, ensure_database
from collector.influx.server import InfluxServer, find_influxd

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "data" / "wallaroo-market-spread"
if not FIXTURES.is_dir():
    FIXTURES = Path(os.environ.get("MS_FIXTURES", "/work/shared/data/wallaroo-market-spread"))


# The fast lane (`scripts/test --fast`) is `-m "not slow"`. Tests of these folders, and
# tests using these fixtures (a browser; a real `marketspread bench` run), are slow by
# nature: marking them here puts new ones in the full lane without anyone remembering to.
SLOW_FOLDERS = ("reliability",)
SLOW_FIXTURES = frozenset({"dash_duo", "bench_done"})
_TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)                 # before `-m` deselects by mark
def pytest_collection_modifyitems(config, items):
    """Mark the tests of slow folders and fixtures `slow`."""
    for item in items:
        folder = Path(item.path).resolve().relative_to(_TESTS).parts[0]
        if folder in SLOW_FOLDERS or SLOW_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """Folder of Wallaroo's Market Spread fixtures (../shared/data/...)."""
    assert FIXTURES.is_dir(), f"Wallaroo fixtures not found at {FIXTURES}"
    return FIXTURES


@pytest.fixture(scope="session")
def spark():
    """One real local Spark session (local[2]) for the whole test run."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from engine.spark.session import build_session
    session = build_session("local[2]", app_name="market-spread-tests", shards=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def influxdb(tmp_path_factory):
    """A started InfluxServer (Debian's influxd 1.x) in a temporary state dir, stopped at the end."""
    if find_influxd() is None:
        msg = "influxd is not installed (scripts/setup installs Debian's `influxdb` package)"
        if os.environ.get("CI"):
            pytest.fail(msg)           # in CI a missing server is a set-up bug, never a skip
        pytest.skip(msg)
    server = InfluxServer(tmp_path_factory.mktemp("influx-state"), port=0)
    server.start()
    _SERVERS[server.url] = server
    yield server
    _SERVERS.pop(server.url, None)
    server.stop()


_SERVERS: dict[str, InfluxServer] = {}     # URL -> started server: fresh_database(url, db) finds its admin


def fresh_database(server: InfluxServer | str, db: str):
    """Yield an admin client of a fresh database `db` (with the raw/rollup policies), dropped afterwards.

    `server` is an `InfluxServer` or the URL of one the `influxdb` fixture started (its
    credentials come along); `client.config.as_env()` gives a child process the same access.
    """
    if isinstance(server, str):
        server = _SERVERS.get(server, server)
    client = server.client(db=db) if isinstance(server, InfluxServer) else InfluxClient(InfluxConfig(url=server, db=db))
    client.query(f'DROP DATABASE "{db}"')
    ensure_database(client)
    yield client
    client.query(f'DROP DATABASE "{db}"')
    client.close()


@pytest.fixture
def influx_client(influxdb, request):
    """A client of a fresh database of its own, dropped afterwards."""
    yield from fresh_database(influxdb, "t_" + re.sub(r"\W", "_", request.node.name)[:60])

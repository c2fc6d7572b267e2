"""Metrics to a user's own InfluxDB just work: a missing database and policies are created.

The user's server is a second real `influxd` started here (its own state folder, a free
port, authentication on with an admin, as a careful user runs it). The job writes to a
database name that does not exist yet; a user without admin rights gets one clear error
naming what to create, keeps spooling, and `marketspread influxdb init` by an admin
makes the spooled metrics arrive.
"""
from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid

import pytest

from collector.influx import InfluxClient, InfluxConfig, InfluxWriter, Point
from collector.influx.server import InfluxServer
from engine.config import Config
from marketspread.replay import replay
from engine.tools.generate import generate

from ..cli_inprocess import run_main


@pytest.fixture(scope="module")
def users_server(tmp_path_factory):
    """A second real influxd, the user's own: started on a free port, stopped at the end."""
    server = InfluxServer(tmp_path_factory.mktemp("users-influx"), port=0)
    server.start()
    yield server
    server.stop()


def _new_db() -> str:
    return "users_" + uuid.uuid4().hex[:8]


def _policies(admin: InfluxClient, db: str) -> dict[str, dict]:
    return {r["name"]: r for r in admin.query(f'SHOW RETENTION POLICIES ON "{db}"')[0].rows()}


def _marketspread(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run `marketspread ARGS` as a user would (its `main`, in-process): this environment, `env` for MS_INFLUX_*."""
    return run_main(list(args), {k: v for k, v in os.environ.items() if not k.startswith("MS_INFLUX_")} | env)


def _writer_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "collector.influx" and r.levelno >= logging.WARNING]


def test_job_metrics_reach_a_new_database_on_the_users_server(spark, users_server, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    db = _new_db()
    admin = users_server.config(db=db)
    for k, v in admin.as_env().items():                   # URL, a database that does not exist, credentials
        monkeypatch.setenv(k, v)
    nbbo, orders = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
    generate(nbbo, orders, symbols=200, nbbo=20_000, orders=20_000, wide_share=0.1, seed=43)
    cfg = Config.from_env(state_dir=tmp_path / "state", max_rows_per_batch=10_000)
    rep = replay([nbbo], [orders], tmp_path / "out.msg", cfg, run_id="users", spark=spark)

    client = InfluxClient(admin)
    sums = {s.tags["step"]: int(s.values[0][1]) for s in client.query(
        'SELECT sum("count") FROM latency WHERE "run" = $run GROUP BY "step"', params={"run": "users"})}
    assert rep.accepted == 40_200
    for step in ("ingress", "source", "check_market_data", "start-to-end"):
        assert sums.get(step) == rep.accepted, (step, sums, rep.metrics)
    assert rep.metrics.points_spooled == 0, rep.metrics
    rps = _policies(client, db)
    assert rps["raw"]["default"] is True and rps["raw"]["duration"] == "168h0m0s"
    assert rps["rollup"]["duration"] == "2160h0m0s"
    lines = _writer_lines(caplog)
    assert any(f"created database {db!r}" in line for line in lines), lines
    assert not any("unreachable" in line for line in lines), lines


def test_a_user_who_may_not_create_it_gets_one_clear_error_until_an_admin_runs_init(users_server, tmp_path,
                                                                                   caplog):
    caplog.set_level(logging.WARNING)
    db = _new_db()
    admin = users_server.client(db=db)
    admin.query("CREATE USER \"writer\" WITH PASSWORD 'writer-pw'")
    try:
        mine = InfluxConfig(url=users_server.url, db=db, user="writer", password="writer-pw", timeout=5)
        n, t0 = 3_000, time.time_ns() - 60 * 10**9
        writer = InfluxWriter(InfluxClient(mine), tmp_path / "spool", backoff=(0.05, 0.2), interval=0.01).start()
        try:
            writer.add([Point("users_m", {"k": "a"}, {"seq": i}, t0 + i) for i in range(n)])
            writer.add([Point("users_m", {"k": "r"}, {"seq": 1}, t0)], rp="rollup")
            assert not writer.flush(1.0)
            time.sleep(0.6)                                # a few retries: still one line
            st = writer.stats()
            assert st.points_written == 0 and st.spool_points == n + 1 and st.points_dropped == 0, st
            assert "CREATE DATABASE" in st.last_error and "marketspread influxdb init" in st.last_error, st
            lines = _writer_lines(caplog)
            assert len(lines) == 1 and "unreachable" not in lines[0], lines
            assert f'CREATE DATABASE "{db}"' in lines[0] and "writer-pw" not in lines[0]

            # `init` as that user: one line saying what to create; as the admin: done
            base = {"MS_INFLUX_URL": users_server.url, "MS_INFLUX_DB": db}
            denied = _marketspread({**base, "MS_INFLUX_USER": "writer", "MS_INFLUX_PASSWORD": "writer-pw"},
                                   "influxdb", "init")
            assert denied.returncode == 1 and len(denied.stderr.strip().splitlines()) == 1, denied
            assert f'CREATE DATABASE "{db}"' in denied.stderr and "Traceback" not in denied.stderr
            done = _marketspread(users_server.config(db=db).as_env(), "influxdb", "init")
            assert done.returncode == 0, done.stderr
            assert f"database {db!r} ready at {users_server.url}" in done.stdout
            assert _policies(admin, db)["raw"]["default"] is True

            admin.query(f'GRANT WRITE ON "{db}" TO "writer"')
            assert writer.flush(15), writer.stats()
            st = writer.stats()
        finally:
            writer.close(2)
    finally:
        admin.query('DROP USER "writer"')
    assert st.points_backfilled == n + 1 and st.spool_points == 0, st
    (series,) = admin.query('SELECT count("seq"), sum("seq") FROM users_m WHERE "k" = \'a\'')
    assert series.values[0][1:] == [n, n * (n - 1) // 2]
    assert admin.query('SELECT count("seq") FROM "rollup"."users_m"')[0].values[0][1] == 1
    assert not any("unreachable" in line for line in _writer_lines(caplog))


def test_wrong_password_says_refused_not_unreachable(users_server, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    bad = InfluxConfig(url=users_server.url, db=_new_db(), user="admin", password="not-it", timeout=5)
    with InfluxWriter(InfluxClient(bad), tmp_path / "spool", interval=0.01) as writer:
        writer.add(Point("m", {}, {"v": 1}, time.time_ns()))
        assert not writer.flush(1.0)
        st = writer.stats()
    assert st.spool_points == 1 and "HTTP 401" in st.last_error, st
    (line,) = _writer_lines(caplog)[:1]
    assert "refused user 'admin'" in line and "unreachable" not in line and "not-it" not in line, line


@pytest.mark.parametrize("create, default", [
    ('CREATE DATABASE "{db}" WITH NAME "autogen"', "autogen"),   # a user's database: its default stays
    ('CREATE DATABASE "{db}"', "raw"),                # no policy at all (retention-autocreate off): ours
])
def test_a_users_database_without_our_policies_gets_them_and_keeps_its_default(users_server, tmp_path,
                                                                               create, default):
    db = _new_db()
    admin = users_server.client(db=db)
    admin.query(create.format(db=db))
    t0 = time.time_ns() - 60 * 10**9
    with InfluxWriter(admin, tmp_path / "spool", interval=0.01) as writer:
        writer.add([Point("m", {}, {"v": 1}, t0), Point("m", {}, {"v": 2}, t0, rp="rollup")])
        assert writer.flush(5), writer.stats()
        st = writer.stats()
    assert (st.points_written, st.points_rejected, st.spool_points) == (2, 0, 0), st
    rps = _policies(admin, db)
    assert rps[default]["default"] is True and rps["rollup"]["default"] is False
    assert admin.query('SELECT sum(v) FROM "rollup"."m"')[0].values[0][1] == 2
    assert admin.query(f'SELECT sum(v) FROM "{default}"."m"')[0].values[0][1] == 1

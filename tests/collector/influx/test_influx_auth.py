"""The project's InfluxDB runs with auth: a foreign web page or a stranger gets no data.

Requests here are raw HTTP on purpose: they are what a hostile page in the user's browser
(any `Origin`, no password) or a local process sends, not what our client sends.
"""
from __future__ import annotations

import http.client
import json
import stat
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest

from collector.influx import server as influx_server
from collector.influx import InfluxConfig, Point
from collector.influx.credentials import credentials_path
from collector.influx.server import InfluxServer

EVIL = "http://evil.example"


def _raw(url: str, method: str, path: str, body: dict | str | None = None, headers: dict | None = None):
    """Send one request as a browser page would; return (status, lower-cased headers, body text)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        data = urlencode(body) if isinstance(body, dict) else body
        hdrs = {"Origin": EVIL, **(headers or {})}
        if isinstance(body, dict):
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def _basic(user: str, password: str) -> dict:
    import base64
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_foreign_origin_without_the_password_gets_401_and_no_data(influxdb, influx_client):
    influx_client.write([Point("secret_m", {"run": "r1"}, {"v": 42}, time.time_ns() - 60 * 10**9)])
    db = influx_client.config.db
    url = influxdb.url
    attempts = [
        ("POST", "/query", {"q": "CREATE DATABASE evil_x"}, {}),
        ("POST", "/query", {"q": f'DROP DATABASE "{db}"'}, {}),
        ("GET", "/query?" + urlencode({"q": "SHOW DATABASES"}), None, {}),
        ("POST", "/query", {"q": "SELECT * FROM secret_m", "db": db}, {}),
        ("POST", "/write?" + urlencode({"db": db}), f"secret_m v=1 {time.time_ns() - 10**9}", {}),
        ("POST", "/query", {"q": "SELECT * FROM secret_m", "db": db}, _basic("admin", "guess")),
        ("GET", "/query?" + urlencode({"q": "SHOW DATABASES", "u": "admin", "p": "guess"}), None, {}),
    ]
    for method, path, body, headers in attempts:
        status, hdrs, text = _raw(url, method, path, body, headers)
        assert status == 401, (path, status, text)
        assert "results" not in text and "secret_m" not in text and db not in text, text
        # nothing a browser would hand to the page with the user's cookies or cached credentials
        assert "access-control-allow-credentials" not in hdrs
    # none of it happened
    names = [v[0] for v in influx_client.query("SHOW DATABASES")[0].values]
    assert db in names and "evil_x" not in names
    (series,) = influx_client.query("SELECT count(v) FROM secret_m")
    assert series.values[0][1] == 1
    # the preflight grants nothing either: no credentials may be sent along
    status, hdrs, _ = _raw(url, "OPTIONS", "/query", headers={"Access-Control-Request-Method": "POST"})
    assert "access-control-allow-credentials" not in hdrs


def test_the_admin_credentials_are_private_and_every_project_process_finds_them(influxdb, influx_client):
    path = credentials_path(influxdb.state_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    creds = json.loads(path.read_text())
    # no URL, no credentials in the environment: the running server of the state folder
    env = {"MS_STATE_DIR": str(influxdb.state_dir), "MS_INFLUX_DB": influx_client.config.db}
    cfg = InfluxConfig.from_env(env)
    assert (cfg.url, cfg.user, cfg.password) == (influxdb.url, creds["user"], creds["password"])
    assert creds["password"] not in repr(cfg)
    # its URL given explicitly (as the demo does): the same
    assert InfluxConfig.from_env({**env, "MS_INFLUX_URL": influxdb.url}).password == creds["password"]
    # a user's own server never gets them, and a user's own credentials win
    other = InfluxConfig.from_env({**env, "MS_INFLUX_URL": "http://db.example:8086"})
    assert other.user is None and other.password is None
    mine = InfluxConfig.from_env({**env, "MS_INFLUX_USER": "me", "MS_INFLUX_PASSWORD": "pw"})
    assert (mine.user, mine.password) == ("me", "pw")


def test_a_state_folder_from_before_auth_starts_with_auth_and_keeps_its_data(tmp_path, monkeypatch):
    state = tmp_path / "state"
    # the old server: same config, auth off, no user, no credentials file
    monkeypatch.setattr(influx_server, "_CONFIG", influx_server._CONFIG.replace(
        "auth-enabled = true", "auth-enabled = false"))
    old = InfluxServer(state, port=0)
    old.start()
    try:
        status, _, _ = _raw(old.url, "POST", "/write?db=marketspread", f"old_m v=7 {time.time_ns() - 60 * 10**9}")
        assert status == 204                               # anyone could write
    finally:
        old.stop()
    credentials_path(state).unlink()
    monkeypatch.undo()

    new = InfluxServer(state, port=0)
    new.start()
    try:
        assert stat.S_IMODE(credentials_path(state).stat().st_mode) == 0o600
        (series,) = new.client().query("SELECT sum(v) FROM old_m")
        assert series.values[0][1] == 7                    # the old data, read with the admin
        status, _, text = _raw(new.url, "POST", "/query", {"q": "SELECT * FROM old_m", "db": "marketspread"})
        assert status == 401 and "old_m" not in text
        new.stop()
        again = InfluxServer(state, port=0).start()        # a later start reuses the admin
        assert again.running
    finally:
        InfluxServer(state).stop()


def test_lost_credentials_are_one_clear_error(tmp_path):
    state = tmp_path / "state"
    srv = InfluxServer(state, port=0)
    srv.start()
    srv.stop()
    credentials_path(state).unlink()
    try:
        with pytest.raises(RuntimeError, match="refuses the admin credentials") as e:
            InfluxServer(state, port=0).start()
        assert "\n" not in str(e.value) and str(credentials_path(state)) in str(e.value)
        assert not InfluxServer(state).status().running  # not left running
    finally:
        InfluxServer(state).stop()


def test_credentials_file_another_user_may_read_is_narrowed(influxdb, tmp_path):
    from collector.influx.credentials import load_credentials
    path = Path(tmp_path) / "credentials.json"
    path.write_text(json.dumps({"user": "admin", "password": "pw"}))
    path.chmod(0o644)
    assert load_credentials(path).password == "pw"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("not json")
    with pytest.raises(ValueError, match="not valid"):
        load_credentials(path)

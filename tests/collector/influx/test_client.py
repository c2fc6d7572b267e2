"""InfluxClient: credentials in headers only, escaping and bound parameters against a real server, errors."""
from __future__ import annotations

import http.server
import logging
import threading

import pytest

from collector.influx import InfluxClient, InfluxConfig, InfluxError, InfluxWriter, Point
from collector.influx.server import free_port
from tests.collector.influx.helpers import SECRET_PW, SECRET_TOKEN, count_sum, recent_ns


class _HeaderCatcher(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_credentials_sent_as_headers_never_in_the_url():
    srv = http.server.HTTPServer(("127.0.0.1", 0), _HeaderCatcher)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_port}"
    try:
        InfluxClient(InfluxConfig(url=url, token=SECRET_TOKEN)).write([Point("m", {}, {"v": 1}, 1)])
        InfluxClient(InfluxConfig(url=url, user="bob", password=SECRET_PW)).write([Point("m", {}, {"v": 1}, 1)])
    finally:
        srv.shutdown()
        srv.server_close()
    (p1, a1), (p2, a2) = _HeaderCatcher.seen
    assert a1 == f"Token {SECRET_TOKEN}"
    assert a2 == "Basic Ym9iOnB3LVpxNy1zZWNyZXQ="            # bob:pw-Zq7-secret
    assert SECRET_PW not in p1 + p2 and SECRET_TOKEN not in p1 + p2


def test_credentials_never_logged(influxdb, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    dead = InfluxConfig(url=f"http://127.0.0.1:{free_port()}", user="bob", password=SECRET_PW, token=SECRET_TOKEN)
    w = InfluxWriter(InfluxClient(dead), tmp_path / "spool-a", interval=0.01).start()
    w.add(Point("m", {}, {"v": 1}, recent_ns()))
    assert not w.close(0.3)
    st = w.stats()
    assert st.write_errors >= 1 and st.last_error
    live = influxdb.config()                               # the server's admin: its password is a secret too
    with InfluxWriter(InfluxClient(live), tmp_path / "spool-b", interval=0.01) as w2:
        w2.add(Point("m", {}, {"v": 1}, recent_ns()))
        assert w2.flush(5)
    with pytest.raises(InfluxError) as e:
        InfluxClient(live).query("SELEC nonsense")
    texts = [caplog.text, repr(w), repr(w2), str(st), str(w2.stats()), str(e.value), repr(live)]
    assert caplog.text                                     # something was logged at all
    for text in texts:
        assert SECRET_PW not in text and SECRET_TOKEN not in text and live.password not in text


def test_server_has_database_and_policies(influxdb):
    client = influxdb.client()
    assert client.ping()
    assert client.version().startswith("1.")
    rps = {r["name"]: r for r in client.query("SHOW RETENTION POLICIES").pop().rows()}
    assert rps["raw"]["duration"] == "168h0m0s" and rps["raw"]["default"] is True
    assert rps["rollup"]["duration"] == "2160h0m0s" and rps["rollup"]["default"] is False


AWKWARD = ["plain", "with space", "com,ma", "eq=uals", 'dq"uote', "back\\slash", "ünïcødé €",
           " lead", "a=b,c d", "'single'"]


def test_escaping_round_trip(influx_client):
    t0 = recent_ns()
    pts = [Point("odd measurement,name", {"tag key=1": v, "k": "x"},
                 {"s": f'{v} "quoted" \\ end\\', "n": i, "f": i / 3, "ok": i % 2 == 0, "field,key=2": 1},
                 t0 + i) for i, v in enumerate(AWKWARD)]
    assert influx_client.write(pts) == len(pts)
    (series,) = influx_client.query('SELECT * FROM "odd measurement,name" ORDER BY time')
    rows = series.rows()
    assert len(rows) == len(AWKWARD)
    for i, (row, v) in enumerate(zip(rows, AWKWARD)):
        assert row["time"] == t0 + i
        assert row["tag key=1"] == v
        assert row["s"] == f'{v} "quoted" \\ end\\'
        assert (row["n"], row["ok"], row["field,key=2"]) == (i, i % 2 == 0, 1)
        assert row["f"] == pytest.approx(i / 3, rel=1e-15)
    values = influx_client.query('SHOW TAG VALUES FROM "odd measurement,name" WITH KEY = "tag key=1"')
    assert sorted(r["value"] for r in values[0].rows()) == sorted(AWKWARD)


def test_bound_parameters(influx_client):
    t0 = recent_ns()
    influx_client.write([Point("orders", {"sym": s}, {"seq": i}, t0 + i)
                         for i, s in enumerate(["IBM", "O'Brien", 'x" OR "1"="1', "IBM"])])
    assert count_sum(influx_client, "orders", where="WHERE sym = $s", params={"s": "IBM"}) == (2, 3)
    assert count_sum(influx_client, "orders", where="WHERE sym = $s", params={"s": "O'Brien"}) == (1, 1)
    # an injection attempt is a plain value: it matches only itself
    assert count_sum(influx_client, "orders", where="WHERE sym = $s", params={"s": 'x" OR "1"="1'}) == (1, 2)
    assert count_sum(influx_client, "orders", where="WHERE sym = $s", params={"s": "' OR ''='"}) == (0, 0)
    assert count_sum(influx_client, "orders", where="WHERE time >= $t AND seq < $n",
                  params={"t": t0 + 1, "n": 3}) == (2, 3)


def test_errors_carry_the_server_message(influx_client):
    with pytest.raises(InfluxError, match="error parsing query") as e:
        influx_client.query("SELEC 1")
    assert e.value.status == 400 and not e.value.retryable
    influx_client.write([Point("typed", {}, {"v": 1}, recent_ns())])
    with pytest.raises(InfluxError, match="field type conflict"):
        influx_client.write([Point("typed", {}, {"v": "text"}, recent_ns())])
    with pytest.raises(InfluxError, match="database not found") as e:
        influx_client.write([Point("m", {}, {"v": 1}, recent_ns())], db="no_such_db")
    assert e.value.retryable                               # it may be created later
    dead = InfluxClient(InfluxConfig(url=f"http://127.0.0.1:{free_port()}", timeout=1))
    assert not dead.ping()
    with pytest.raises(InfluxError) as e:
        dead.write([Point("m", {}, {"v": 1}, 1)])
    assert e.value.status is None and e.value.retryable

"""InfluxDB client, writer and server: line protocol, a real influxd, outages and the spool."""
from __future__ import annotations

import argparse
import http.server
import logging
import threading
import time

import numpy as np
import pytest

from collector.influx import server as influx_server
from collector.influx import InfluxClient, InfluxConfig, InfluxError, InfluxWriter, Point, encode_lines
from collector.influx.server import InfluxServer, free_port
from collector.testing import MemoryWriter

SECRET_PW = "pw-Zq7-secret"
SECRET_TOKEN = "tok-Xk9-secret"


def _now() -> int:
    return time.time_ns() - 60 * 10**9          # inside the 7-day raw policy, never in the future


def _count(client: InfluxClient, source: str, field: str = "seq", where: str = "",
           params=None) -> tuple[int, int]:
    """Return count and sum of `field` over `source` (InfluxQL FROM text, e.g. 'rollup."w"')."""
    series = client.query(f'SELECT count("{field}"), sum("{field}") FROM {source} {where}', params)
    if not series:
        return 0, 0
    _, n, s = series[0].values[0]
    return n, s


# ---------------------------------------------------------------------------------------------
# line protocol (pure)


@pytest.mark.parametrize("point, line", [
    (Point("cpu", {}, {"v": 1.5}, 7), "cpu v=1.5 7"),
    (Point("c p,u", {}, {"v": 1}, 7), r"c\ p\,u v=1i 7"),
    (Point("m=x", {"a=b": "c d,e"}, {"f k": "s"}, 1), r'm=x,a\=b=c\ d\,e f\ k="s" 1'),
    (Point("m", {"z": "1", "a": "2", "empty": ""}, {"b": True, "n": False}, 1), "m,a=2,z=1 b=true,n=false 1"),
    (Point("m", {}, {"s": 'say "hi" \\o/'}, 1), r'm s="say \"hi\" \\o/" 1'),
    (Point("m", {}, {"s": "two\nlines"}, 1), 'm s="two\nlines" 1'),
    (Point("m", {"t": "a\\b"}, {"v": 1}, 1), "m,t=a\\b v=1i 1"),
    (Point("m", {}, {"i": np.int64(-3), "f": np.float32(0.5), "x": 1e-7, "big": 2**62}, 1),
     "m i=-3i,f=0.5,x=1e-07,big=4611686018427387904i 1"),
    (Point("m", {}, {"nan": float("nan"), "inf": float("inf"), "ok": 0.0}, 1), "m ok=0.0 1"),
    (Point("ünï", {"ç": "ß"}, {"v": "€"}, 1), 'ünï,ç=ß v="€" 1'),
])
def test_encode_escapes(point, line):
    assert encode_lines([point]) == (line + "\n").encode()


def test_encode_skips_point_without_finite_field():
    assert encode_lines([Point("m", {}, {"x": float("nan")}, 1)]) == b""
    assert encode_lines([]) == b""


@pytest.mark.parametrize("point", [
    Point("", {}, {"v": 1}, 1),
    Point("#comment", {}, {"v": 1}, 1),
    Point("m", {"t": "new\nline"}, {"v": 1}, 1),
    Point("m", {"t": "trailing\\"}, {"v": 1}, 1),
    Point("m", {"": "v"}, {"v": 1}, 1),
    Point("m", {}, {"v": [1]}, 1),
])
def test_encode_refuses_what_line_protocol_cannot_carry(point):
    with pytest.raises(ValueError):
        encode_lines([point])


def test_memory_writer_keeps_points_per_policy():
    w = MemoryWriter()
    w.add(Point("a", {}, {"v": 1}, 1))
    w.add([Point("b", {}, {"v": 2}, 2)], rp="rollup")
    assert [p.measurement for p in w.points] == ["a", "b"]
    assert w.measurement("b", rp="rollup")[0].fields == {"v": 2}
    assert w.stats().points_written == 2
    with pytest.raises(ValueError):
        w.add(Point("a", {"t": "x\n"}, {"v": 1}, 1))


# ---------------------------------------------------------------------------------------------
# configuration and credentials


def test_config_from_env_and_redaction():
    cfg = InfluxConfig.from_env({"MS_INFLUX_URL": f"http://bob:{SECRET_PW}@db.example:8086/influx",
                                 "MS_INFLUX_DB": "metrics", "MS_INFLUX_TOKEN": SECRET_TOKEN,
                                 "MS_INFLUX_TIMEOUT": "2.5"})
    assert cfg.url == "http://db.example:8086/influx"
    assert (cfg.db, cfg.user, cfg.password, cfg.token, cfg.timeout) == ("metrics", "bob", SECRET_PW, SECRET_TOKEN, 2.5)
    for text in (repr(cfg), str(cfg), repr(InfluxClient(cfg)), f"{cfg}"):
        assert SECRET_PW not in text and SECRET_TOKEN not in text
    assert InfluxConfig.from_env({}).url == "http://127.0.0.1:18086"
    with pytest.raises(ValueError, match="MS_INFLUX_TIMEOUT"):
        InfluxConfig.from_env({"MS_INFLUX_TIMEOUT": "soon"})


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
    w.add(Point("m", {}, {"v": 1}, _now()))
    assert not w.close(0.3)
    st = w.stats()
    assert st.write_errors >= 1 and st.last_error
    live = influxdb.config()                               # the server's admin: its password is a secret too
    with InfluxWriter(InfluxClient(live), tmp_path / "spool-b", interval=0.01) as w2:
        w2.add(Point("m", {}, {"v": 1}, _now()))
        assert w2.flush(5)
    with pytest.raises(InfluxError) as e:
        InfluxClient(live).query("SELEC nonsense")
    texts = [caplog.text, repr(w), repr(w2), str(st), str(w2.stats()), str(e.value), repr(live)]
    assert caplog.text                                     # something was logged at all
    for text in texts:
        assert SECRET_PW not in text and SECRET_TOKEN not in text and live.password not in text


# ---------------------------------------------------------------------------------------------
# client against the real server


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
    t0 = _now()
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
    t0 = _now()
    influx_client.write([Point("orders", {"sym": s}, {"seq": i}, t0 + i)
                         for i, s in enumerate(["IBM", "O'Brien", 'x" OR "1"="1', "IBM"])])
    assert _count(influx_client, "orders", where="WHERE sym = $s", params={"s": "IBM"}) == (2, 3)
    assert _count(influx_client, "orders", where="WHERE sym = $s", params={"s": "O'Brien"}) == (1, 1)
    # an injection attempt is a plain value: it matches only itself
    assert _count(influx_client, "orders", where="WHERE sym = $s", params={"s": 'x" OR "1"="1'}) == (1, 2)
    assert _count(influx_client, "orders", where="WHERE sym = $s", params={"s": "' OR ''='"}) == (0, 0)
    assert _count(influx_client, "orders", where="WHERE time >= $t AND seq < $n",
                  params={"t": t0 + 1, "n": 3}) == (2, 3)


def test_errors_carry_the_server_message(influx_client):
    with pytest.raises(InfluxError, match="error parsing query") as e:
        influx_client.query("SELEC 1")
    assert e.value.status == 400 and not e.value.retryable
    influx_client.write([Point("typed", {}, {"v": 1}, _now())])
    with pytest.raises(InfluxError, match="field type conflict"):
        influx_client.write([Point("typed", {}, {"v": "text"}, _now())])
    with pytest.raises(InfluxError, match="database not found") as e:
        influx_client.write([Point("m", {}, {"v": 1}, _now())], db="no_such_db")
    assert e.value.retryable                               # it may be created later
    dead = InfluxClient(InfluxConfig(url=f"http://127.0.0.1:{free_port()}", timeout=1))
    assert not dead.ping()
    with pytest.raises(InfluxError) as e:
        dead.write([Point("m", {}, {"v": 1}, 1)])
    assert e.value.status is None and e.value.retryable


# ---------------------------------------------------------------------------------------------
# writer


def test_writer_delivers_every_point(influx_client, tmp_path):
    n, t0 = 30_000, _now()
    with InfluxWriter(influx_client, tmp_path / "spool") as w:
        tickets = [w.add([Point("w", {"k": "a"}, {"seq": j}, t0 + j) for j in range(i, i + 250)])
                   for i in range(0, n, 250)]
        tickets.append(w.add([Point("w", {"k": "r"}, {"seq": 1}, t0)], rp="rollup"))
        assert w.flush(10)
        st = w.stats()
        delivered = w.delivered()
    assert tickets == list(range(250, n + 1, 250)) + [n + 1] and delivered == n + 1
    assert _count(influx_client, "w", where="WHERE k = 'a'") == (n, n * (n - 1) // 2)
    assert _count(influx_client, 'rollup."w"') == (1, 1)
    assert (st.points_added, st.points_written, st.points_spooled, st.points_dropped) == (n + 1, n + 1, 0, 0)
    assert st.queue_len == 0 and st.spool_bytes == 0


def test_writer_spills_a_full_queue_to_disk_and_backfills(influx_client, tmp_path):
    n, t0 = 2_000, _now()
    with InfluxWriter(influx_client, tmp_path / "spool", max_queue=100, interval=0.01) as w:
        ticket = w.add([Point("big", {}, {"seq": j}, t0 + j) for j in range(n)])   # 20 x the queue in one call
        assert w.delivered() >= n - 100                       # the spilled part is on disk already
        assert w.flush(10)
        st = w.stats()
        assert w.delivered() == ticket == n
    assert st.points_spooled >= n - 100 and st.points_backfilled == st.points_spooled
    assert st.points_written + st.points_backfilled == n and st.points_dropped == 0
    assert _count(influx_client, "big") == (n, n * (n - 1) // 2)


def test_writer_counts_rejected_points(influx_client, tmp_path):
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.01) as w:
        w.add(Point("typed", {}, {"v": 1}, _now()))
        assert w.flush(5)
        w.add(Point("typed", {}, {"v": "conflict"}, _now() + 1))
        w.add(Point("typed", {"t": "bad\n"}, {"v": 2}, _now() + 2))
        assert w.flush(5)
        st = w.stats()
    assert (st.points_written, st.points_rejected, st.points_spooled) == (1, 2, 0)
    assert st.write_errors == 1 and "field type conflict" in st.last_error


def test_writer_survives_server_outage(tmp_path):
    """Stop and restart the server while points keep coming: add() never blocks, nothing is lost."""
    server = InfluxServer(tmp_path / "state", port=0)
    server.start()
    client = server.client(timeout=2.0)
    writer = InfluxWriter(client, tmp_path / "spool", backoff=(0.05, 0.3)).start()
    events = {}

    def outage():
        time.sleep(0.4)
        events["down"] = time.time_ns()
        server.stop()
        events["stopped"] = time.time_ns()
        time.sleep(0.6)
        server.start()
        events["up"] = time.time_ns()

    chaos = threading.Thread(target=outage)
    t0, n, worst, per_add = _now(), 0, 0.0, 200
    try:
        chaos.start()
        deadline = time.monotonic() + 2.2
        while time.monotonic() < deadline:
            batch = [Point("stream", {"src": "t"}, {"seq": n + j}, t0 + (n + j) * 1000) for j in range(per_add)]
            a = time.perf_counter()
            writer.add(batch)
            worst = max(worst, time.perf_counter() - a)
            n += per_add
            time.sleep(0.004)
        chaos.join()
        assert "up" in events, "the server did not come back"
        assert writer.flush(15), writer.stats()
        assert writer.delivered() == n
        st = writer.stats()
    finally:
        writer.close(2)
        chaos.join()
        try:
            count = _count(server.client(), "stream")
        finally:
            server.stop()
    # not a speed target: add() must never wait for the network (a request waits up to the client's
    # timeout, seconds), so even on a loaded machine every call returns far below that
    assert worst < 1.0, f"add() took {worst * 1e3:.1f} ms: it waited for the network"
    assert st.points_spooled > 0 and st.write_errors >= 1, st      # the outage was real
    assert st.points_backfilled == st.points_spooled, st
    assert st.points_written + st.points_backfilled == n and st.points_dropped == 0, st
    assert count == (n, n * (n - 1) // 2)                          # every point once, no gap


def test_spool_bound_drops_oldest_and_next_run_backfills(influx_client, tmp_path):
    spool = tmp_path / "spool"
    dead = InfluxClient(InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db=influx_client.config.db, timeout=1))
    n, t0, limit = 3000, _now(), 20_000
    w = InfluxWriter(dead, spool, max_spool_bytes=limit, max_queue=500, interval=0.01).start()
    for i in range(0, n, 100):
        a = time.perf_counter()
        w.add([Point("sp", {}, {"seq": j}, t0 + j) for j in range(i, i + 100)])
        assert time.perf_counter() - a < 1.0, "add() waited for the dead server (its timeout is 1 s)"
    assert not w.close(timeout=0.3)                       # server down: the rest stays in the spool
    st = w.stats()
    assert st.points_written == 0 and st.points_dropped > 0
    assert 0 < st.spool_bytes <= limit
    assert st.points_spooled == st.points_dropped + st.spool_points == n, st
    on_disk = sum(f.stat().st_size for f in spool.glob("*.lp"))
    assert on_disk == st.spool_bytes

    w2 = InfluxWriter(influx_client, spool, max_spool_bytes=limit).start()   # the next run
    assert w2.flush(10)
    assert w2.close()
    st2 = w2.stats()
    assert st2.points_backfilled == st.spool_points and st2.spool_bytes == 0
    count, _ = _count(influx_client, "sp")
    assert count == st.spool_points
    # the oldest were dropped, the newest kept
    (series,) = influx_client.query("SELECT min(seq), max(seq) FROM sp")
    _, oldest, newest = series.values[0]
    assert oldest > 0 and newest == n - 1
    assert not list(spool.glob("*.lp"))


# ---------------------------------------------------------------------------------------------
# server process and command line


def test_server_start_is_idempotent_and_cli(tmp_path, capsys):
    state = tmp_path / "state"
    port = free_port()
    parser = argparse.ArgumentParser()
    influx_server.add_arguments(parser)
    run = lambda *a: influx_server.run(parser.parse_args([*a, "--state-dir", str(state)]))  # noqa: E731
    try:
        assert run("start", "--port", str(port)) == 0
        assert capsys.readouterr().out.strip() == f"http://127.0.0.1:{port}"
        first = InfluxServer(state).status()
        assert first.running and first.url == f"http://127.0.0.1:{port}" and first.version.startswith("1.")
        again = InfluxServer(state, port=0).start()           # ours is running: reused
        assert again.pid == first.pid and again.url == first.url
        assert run("status") == 0 and str(first.pid) in capsys.readouterr().out
        conf = (state / "influxdb" / "influxdb.conf").read_text()
        assert "reporting-enabled = false" in conf and f'"127.0.0.1:{port + 2}"' in conf
        assert (state / "logs" / "influxdb.log").stat().st_size > 0
    finally:
        assert run("stop") == 0
    assert "stopped" in capsys.readouterr().out
    assert run("status") == 3 and not InfluxServer(state).status().running

"""GraphiteRelay against hostile senders: far-dated lines, guessed names, web pages, floods, idle crowds."""
from __future__ import annotations

import socket
import time

from collector.graphite_relay import GraphiteRelay
from collector.influx import InfluxWriter
from collector.testing import MemoryWriter
from tests.collector.test_graphite_relay import wait_for

DAY = 86_400


def shard_count(client) -> int:
    return sum(len(s.values) for s in client.query("SHOW SHARDS"))


def send(port: int, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)


def report(prefix: str, app: str, executor: str, heap: int, ts: int | None = None) -> bytes:
    ts = int(time.time()) if ts is None else ts
    return f"{prefix}.{app}.{executor}.jvm.heap.used {heap} {ts}\n".encode()


def test_far_dated_lines_make_no_shard_and_influxdb_answers(influx_client, tmp_path):
    """One connection, 1,100 lines a day apart from 2030: once enough to exhaust influxd's files."""
    before = shard_count(influx_client)
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.1) as writer, GraphiteRelay(writer) as relay:
        start = 1_893_456_000                                      # 2030-01-01
        send(relay.port, b"".join(report(relay.prefix, "app-far", "driver", i + 1, start + i * DAY)
                                  for i in range(1_100)))
        send(relay.port, report(relay.prefix, "app-now", "driver", 7))
        assert wait_for(lambda: relay.stats().points >= 1)
        assert writer.flush(10)
        stats = relay.stats()
    assert influx_client.ping()
    assert shard_count(influx_client) <= before + 1                # at most today's shard
    apps = {s.tags["app"] if s.tags else None for s in influx_client.query(
        "SELECT last(heap_used_bytes) FROM spark_executor GROUP BY app")}
    assert apps == {"app-now"}
    assert stats.skewed_lines == 1_100 and stats.points == 1


def test_lines_just_inside_the_clock_window_are_kept_and_just_outside_refused():
    writer = MemoryWriter()
    now = 2_000_000_000
    with GraphiteRelay(writer, clock=lambda: now) as relay:
        for i, ts in enumerate((now - 300, now + 300, now - 301, now + 301)):
            send(relay.port, report(relay.prefix, f"app-{i}", "driver", i + 1, ts))
        assert wait_for(lambda: relay.stats().points + relay.stats().skewed_lines == 4)
    assert sorted(p.tags["app"] for p in writer.measurement("spark_executor")) == ["app-0", "app-1"]


def test_a_plausible_line_from_another_socket_makes_no_executor(influx_client, tmp_path):
    """Without the session's secret prefix, a guessed `sparkmon.<app>.<executor>` line is not relayed."""
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.1) as writer, GraphiteRelay(writer) as relay:
        send(relay.port, report("sparkmon", "local-1795869546325", "driver", 123))
        send(relay.port, report("sparkmon", "local-1795869546325", "7", 456))
        send(relay.port, report(relay.prefix, "app-real", "driver", 789))
        assert wait_for(lambda: relay.stats().points >= 1)
        assert writer.flush(10)
        stats = relay.stats()
    executors = {(s.tags["app"], s.tags["executor"]) for s in influx_client.query(
        "SELECT last(heap_used_bytes) FROM spark_executor GROUP BY app, executor")}
    assert executors == {("app-real", "driver")}
    assert stats.foreign_connections == 2 and stats.points == 1


def test_an_http_post_whose_body_is_a_valid_line_stores_nothing_and_is_closed(influx_client, tmp_path):
    """A web page's `fetch(relay, {method: "POST", mode: "no-cors", body: line})`, even with the right prefix."""
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.1) as writer, GraphiteRelay(writer) as relay:
        body = report(relay.prefix, "app-web", "driver", 666)
        request = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: https://evil.example\r\n"
                   b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % (relay.port, len(body))) + body
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as s:
            s.sendall(request)
            s.settimeout(5)
            t0 = time.monotonic()
            try:
                closed = s.recv(100) == b""
            except ConnectionResetError:
                closed = True
            assert closed and time.monotonic() - t0 < 5         # closed by the relay, not left to idle out
        send(relay.port, b"GET / HTTP/1.1\r\n")
        send(relay.port, report(relay.prefix, "app-real", "driver", 1))
        assert wait_for(lambda: relay.stats().points >= 1)
        assert writer.flush(10)
        stats = relay.stats()
    assert {s.tags["app"] for s in influx_client.query("SELECT last(heap_used_bytes) FROM spark_executor GROUP BY app")} \
        == {"app-real"}
    assert stats.http_connections == 2 and stats.foreign_connections == 2


def test_a_flood_of_foreign_senders_never_crowds_out_the_sessions_reports():
    """Thousands of guessed lines on many connections right after start, the real reports among them."""
    writer = MemoryWriter()
    with GraphiteRelay(writer, max_series=3) as relay:
        fake = b"".join(report("sparkmon", f"app-{i}", str(i % 100), i) for i in range(2_000))
        for round_ in range(50):
            send(relay.port, fake)
            if round_ % 10 == 0:
                send(relay.port, report(relay.prefix, "app-real", "driver", round_ + 1, int(time.time()) + round_))
        assert wait_for(lambda: relay.stats().points == 5 and relay.stats().foreign_connections == 50)
        stats = relay.stats()
    heaps = [p.fields["heap_used_bytes"] for p in writer.measurement("spark_executor")]
    assert sorted(heaps) == [1, 11, 21, 31, 41]
    assert stats.foreign_connections == 50 and stats.dropped_points == 0 and stats.rate_limited_points == 0


def test_one_series_is_rate_limited_and_counted():
    writer = MemoryWriter()
    now = int(time.time())
    with GraphiteRelay(writer, series_burst=5, series_rate_per_s=0.001) as relay:
        send(relay.port, b"".join(report(relay.prefix, "app-1", "driver", i + 1, now - 100 + i) for i in range(100)))
        send(relay.port, report(relay.prefix, "app-2", "driver", 5))
        assert wait_for(lambda: relay.stats().points + relay.stats().rate_limited_points == 101)
        stats = relay.stats()
    by_app = [p.tags["app"] for p in writer.measurement("spark_executor")]
    assert by_app.count("app-1") == 5 and by_app.count("app-2") == 1
    assert stats.rate_limited_points == 95


def test_idle_sockets_filling_every_place_give_way_to_the_sessions_spark():
    writer = MemoryWriter()
    with GraphiteRelay(writer, max_connections=16, hello_s=0.2) as relay:
        crowd = [socket.create_connection(("127.0.0.1", relay.port), timeout=5) for _ in range(64)]
        try:
            assert wait_for(lambda: relay.stats().times_full >= 1)
            send(relay.port, report(relay.prefix, "app-real", "driver", 42))
            assert wait_for(lambda: relay.stats().points == 1)
            stats = relay.stats()
        finally:
            for s in crowd:
                s.close()
    assert writer.measurement("spark_executor")[0].fields == {"heap_used_bytes": 42}
    assert stats.evicted_connections >= 1


def test_more_lines_than_the_overall_rate_wait_and_are_all_relayed():
    """Over `max_lines_per_s` the relay pauses reading (senders wait in TCP): slower, nothing lost."""
    writer = MemoryWriter()
    now = int(time.time())
    with GraphiteRelay(writer, max_lines_per_s=50) as relay:
        for i in range(120):
            send(relay.port, report(relay.prefix, f"app-{i}", "driver", i + 1, now))
        assert wait_for(lambda: relay.stats().points == 120, timeout=30)
        stats = relay.stats()
    assert sorted(p.fields["heap_used_bytes"] for p in writer.measurement("spark_executor")) == list(range(1, 121))
    assert stats.paused >= 1


def test_it_binds_loopback_by_default_and_warns_in_one_line_on_a_wide_bind(caplog):
    with GraphiteRelay(MemoryWriter()) as relay:
        assert relay._listener.getsockname()[0] == "127.0.0.1"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    with caplog.at_level("WARNING", logger="collector.graphite_relay"), GraphiteRelay(MemoryWriter(), host="0.0.0.0"):
        pass
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "0.0.0.0" in warning and "beyond loopback" in warning and "\n" not in warning


def test_each_relay_has_its_own_secret_prefix_and_spark_gets_it():
    a, b = GraphiteRelay(MemoryWriter()), GraphiteRelay(MemoryWriter())
    assert a.prefix != b.prefix and len(a.prefix) >= 32 and "." not in a.prefix
    with a:
        conf = a.spark_conf(period_s=1)
    assert conf["spark.metrics.conf.*.sink.graphite.prefix"] == a.prefix
    assert conf["spark.metrics.conf.*.sink.graphite.port"] == str(a.port)

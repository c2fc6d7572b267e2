"""InfluxWriter: every point delivered once, a full queue spilled to disk, outages, the spool's bound."""
from __future__ import annotations

import threading
import time

from collector.influx import InfluxClient, InfluxConfig, InfluxWriter, Point
from collector.influx.server import InfluxServer, free_port
from tests.collector.influx.helpers import count_sum, recent_ns


def test_writer_delivers_every_point(influx_client, tmp_path):
    n, t0 = 30_000, recent_ns()
    with InfluxWriter(influx_client, tmp_path / "spool") as w:
        tickets = [w.add([Point("w", {"k": "a"}, {"seq": j}, t0 + j) for j in range(i, i + 250)])
                   for i in range(0, n, 250)]
        tickets.append(w.add([Point("w", {"k": "r"}, {"seq": 1}, t0)], rp="rollup"))
        assert w.flush(10)
        st = w.stats()
        delivered = w.delivered()
    assert tickets == list(range(250, n + 1, 250)) + [n + 1] and delivered == n + 1
    assert count_sum(influx_client, "w", where="WHERE k = 'a'") == (n, n * (n - 1) // 2)
    assert count_sum(influx_client, 'rollup."w"') == (1, 1)
    assert (st.points_added, st.points_written, st.points_spooled, st.points_dropped) == (n + 1, n + 1, 0, 0)
    assert st.queue_len == 0 and st.spool_bytes == 0


def test_writer_spills_a_full_queue_to_disk_and_backfills(influx_client, tmp_path):
    n, t0 = 2_000, recent_ns()
    with InfluxWriter(influx_client, tmp_path / "spool", max_queue=100, interval=0.01) as w:
        ticket = w.add([Point("big", {}, {"seq": j}, t0 + j) for j in range(n)])   # 20 x the queue in one call
        assert w.delivered() >= n - 100                       # the spilled part is on disk already
        assert w.flush(10)
        st = w.stats()
        assert w.delivered() == ticket == n
    assert st.points_spooled >= n - 100 and st.points_backfilled == st.points_spooled
    assert st.points_written + st.points_backfilled == n and st.points_dropped == 0
    assert count_sum(influx_client, "big") == (n, n * (n - 1) // 2)


def test_writer_counts_rejected_points(influx_client, tmp_path):
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.01) as w:
        w.add(Point("typed", {}, {"v": 1}, recent_ns()))
        assert w.flush(5)
        w.add(Point("typed", {}, {"v": "conflict"}, recent_ns() + 1))
        w.add(Point("typed", {"t": "bad\n"}, {"v": 2}, recent_ns() + 2))
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
    t0, n, worst, per_add = recent_ns(), 0, 0.0, 200
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
            count = count_sum(server.client(), "stream")
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
    n, t0, limit = 3000, recent_ns(), 20_000
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
    count, _ = count_sum(influx_client, "sp")
    assert count == st.spool_points
    # the oldest were dropped, the newest kept
    (series,) = influx_client.query("SELECT min(seq), max(seq) FROM sp")
    _, oldest, newest = series.values[0]
    assert oldest > 0 and newest == n - 1
    assert not list(spool.glob("*.lp"))

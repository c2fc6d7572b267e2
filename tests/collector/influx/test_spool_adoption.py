"""Points one process spooled during an outage reach InfluxDB through whichever process runs next.

A watched job that ends while InfluxDB is down leaves its spool folder; the next writer of
the state folder (the dashboard's, `watch`'s, the job's) backfills it and removes it.
"""
from __future__ import annotations

from collector.influx import InfluxWriter, Point, ensure_database
from collector.influx.server import InfluxServer, free_port
from collector.influx.spool import Spool
from tests.collector.influx.helpers import count_sum, recent_ns


def test_an_outage_outliving_a_job_is_backfilled_by_the_next_process(tmp_path):
    server = InfluxServer(tmp_path / "state", port=free_port())
    server.start()
    spools = tmp_path / "state" / "metrics-spool"
    try:
        ensure_database(server.client(db="adopt"))
        server.stop()                                             # the outage begins
        job = InfluxWriter(server.client(db="adopt", timeout=1), spools / "monitor-app-1",
                           interval=0.01, backoff=(0.05, 0.1)).start()
        t0, n = recent_ns(), 500
        job.add([Point("adopted", {"src": "job"}, {"seq": i}, t0 + i) for i in range(n)])
        assert not job.close(timeout=0.5)                         # the job ends before InfluxDB returns
        assert sum(1 for _ in (spools / "monitor-app-1").glob("*.lp")) > 0

        server.start()                                            # InfluxDB returns
        nxt = InfluxWriter(server.client(db="adopt"), spools / "ui-alerts").start()   # another process
        assert nxt.flush(15), nxt.stats()
        assert nxt.close()
        assert count_sum(server.client(db="adopt"), "adopted") == (n, n * (n - 1) // 2)
        assert not (spools / "monitor-app-1").exists()            # the old folder is gone
        assert not (spools / "ui-alerts").exists()                # and an emptied one too
    finally:
        server.stop()


def test_a_spool_of_another_database_or_of_a_live_writer_is_left_alone(tmp_path):
    spools = tmp_path / "metrics-spool"
    live = Spool(spools / "live", 1 << 20, target="http://a:1 db")
    live.open()
    live.append(b"m v=1 1\n", None)
    other = Spool(spools / "other", 1 << 20, target="http://b:1 db")
    other.open()
    other.append(b"m v=2 2\n", None)
    other.close()
    mine = Spool(spools / "mine", 1 << 20, target="http://a:1 db")
    mine.open()
    assert len(mine) == 0                      # the live one is locked, the other goes elsewhere
    assert (spools / "live").exists() and (spools / "other").exists()
    live.close()
    mine.close()


def test_influxdb_start_backfills_what_a_job_spooled_while_it_was_down(tmp_path):
    from collector.influx.server import backfill_spools
    server = InfluxServer(tmp_path / "state", port=free_port())
    server.start()
    spools = tmp_path / "state" / "metrics-spool"
    try:
        ensure_database(server.client())
        server.stop()
        job = InfluxWriter(server.client(timeout=1), spools / "monitor-app-2", interval=0.01, backoff=(0.05, 0.1)).start()
        t0, n = recent_ns(), 200
        job.add([Point("adopted", {"src": "job"}, {"seq": i}, t0 + i) for i in range(n)])
        assert not job.close(timeout=0.5)
        server.start()
        backfill_spools(server)                                   # what `marketspread influxdb start` does
        assert count_sum(server.client(), "adopted") == (n, n * (n - 1) // 2)
        assert not spools.exists() or not any(spools.iterdir())
    finally:
        server.stop()

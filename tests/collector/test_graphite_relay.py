"""GraphiteRelay: a real Spark's metrics sink into the real InfluxDB, and senders that try to break it."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyspark
import pytest

from collector.graphite_relay import GraphiteRelay
from collector.influx import InfluxWriter

REPO = Path(__file__).resolve().parents[2]

# A user's job: its own session built with the sink's properties, a few seconds of shuffles.
JOB = textwrap.dedent("""
    import json, sys, time
    from pyspark.sql import SparkSession
    conf = json.loads(sys.argv[1])
    spark = (SparkSession.builder.master(sys.argv[2]).appName("relay-test")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
             .config(map=conf).getOrCreate())
    print(spark.sparkContext.applicationId, flush=True)
    end = time.time() + 6
    while time.time() < end:
        spark.range(0, 500_000).selectExpr("id % 50 AS k").groupBy("k").count().collect()
    time.sleep(2.5)                  # one more report after the last job
    spark.stop()
""")


def run_job(conf: dict, master: str) -> str:
    """Run JOB in its own Python process; return its application id."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           # local-cluster starts executors with the scripts of a Spark home: pip's pyspark is one
           "SPARK_HOME": os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)}
    job = subprocess.run([sys.executable, "-c", JOB, json.dumps(conf), master], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=240)
    assert job.returncode == 0, job.stderr[-2000:]
    return job.stdout.split()[0]


def wait_for(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def rows(client, where=""):
    series = client.query(f"SELECT * FROM spark_executor {where}")
    return [dict(zip(s.columns, v)) for s in series for v in s.values]


@pytest.mark.slow
def test_a_spark_sessions_executor_figures_reach_influxdb(influx_client, tmp_path):
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.1) as writer, \
            GraphiteRelay(writer) as relay:
        conf = relay.spark_conf(period_s=1)
        app_id = run_job(conf, "local[2]")
        assert wait_for(lambda: relay.stats().open_connections == 0)
        assert writer.flush(10)
        stats = relay.stats()
    found = rows(influx_client)
    assert {(r["app"], r["executor"]) for r in found} == {(app_id, "driver")}   # local mode: the driver runs tasks
    assert len(found) >= 4 and stats.points >= len(found)
    last = found[-1]
    assert last["heap_used_bytes"] > 0 and last["heap_max_bytes"] >= last["heap_used_bytes"]
    assert last["cpu_time_ns"] > 0 and last["jvm_cpu_time_ns"] > 0
    assert last["completed_tasks"] > 0 and last["running_tasks"] >= 0
    assert last["shuffle_read_bytes"] > 0 and last["shuffle_write_bytes"] > 0
    assert last["gc_count"] >= 0 and last["gc_time_ms"] >= 0
    # cumulative; an early report may come before the executor source exists, without task fields
    assert max(r["cpu_time_ns"] or 0 for r in found) == last["cpu_time_ns"]
    # the sink's filter sends only what is mapped: no line is bad, few are unknown (buffer pools)
    assert stats.bad_lines == 0 and stats.write_errors == 0 and stats.dropped_connections == 0
    assert stats.unknown_lines <= 2 * stats.points


@pytest.mark.slow
def test_a_clusters_executor_reports_under_its_id(influx_client, tmp_path):
    """local-cluster: a separate executor JVM reports task figures; the driver, without tasks, its JVM."""
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.1) as writer, \
            GraphiteRelay(writer) as relay:
        conf = {**relay.spark_conf(period_s=1), "spark.executor.memory": "512m"}
        app_id = run_job(conf, "local-cluster[1,1,512]")
        assert wait_for(lambda: relay.stats().open_connections == 0)
        assert writer.flush(10)
    found = rows(influx_client)
    assert {r["app"] for r in found} == {app_id} and {r["executor"] for r in found} == {"driver", "0"}
    executor = [r for r in found if r["executor"] == "0"]
    driver = [r for r in found if r["executor"] == "driver"]
    assert max(r["cpu_time_ns"] or 0 for r in executor) > 0 and max(r["shuffle_write_bytes"] or 0 for r in executor) > 0
    assert all(r["heap_used_bytes"] > 0 for r in executor + driver)
    assert all(r["cpu_time_ns"] is None and r["running_tasks"] is None for r in driver)
    assert executor[-1]["heap_max_bytes"] == 512 * 1024 * 1024


def good_report(relay: GraphiteRelay, app: str, heap: int) -> None:
    """Send one report as the session's Spark would: its lines start with the relay's secret prefix."""
    ts = int(time.time())
    lines = "".join(f"{relay.prefix}.{app}.driver.{m} {v} {ts}\n"
                    for m, v in (("jvm.heap.used", heap), ("executor.cpuTime.count", 7)))
    with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as s:
        s.sendall(lines.encode())


def test_relay_survives_hostile_senders(influx_client, tmp_path):
    with InfluxWriter(influx_client, tmp_path / "spool", interval=0.1) as writer, \
            GraphiteRelay(writer, max_connections=64, idle_timeout_s=1.0) as relay:
        crowd = [socket.create_connection(("127.0.0.1", relay.port), timeout=5) for _ in range(200)]
        assert wait_for(lambda: relay.stats().times_full >= 1)
        good_report(relay, "app-good-1", 111)          # silent senders give way to it
        # silent senders are closed, 64 at a time, until every one is gone
        assert wait_for(lambda: relay.stats().dropped_connections >= 200, timeout=20)
        for s in crowd:
            s.close()

        huge = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        try:                                         # 10 MB without a newline: cut off early
            huge.sendall(relay.prefix.encode() + b"." + b"x" * 10_000_000)
        except OSError:
            pass
        huge.close()
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as junk:
            try:
                junk.sendall(b"".join(os.urandom(100).replace(b"\n", b"?") + b"\n" for _ in range(500)))
            except OSError:
                pass                                 # closed at its first bytes
        p = relay.prefix.encode()
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as bad:
            bad.sendall(p + b".app-1.driver.jvm.heap.used nan 1800000000\n"
                        + p + b".x/../../etc.driver.jvm.heap.used 1 1800000000\n"
                        + p + b'.a"p,p=1.driver.jvm.heap.used 1 1800000000\n')
        good_report(relay, "app-good-2", 222)
        assert wait_for(lambda: relay.stats().points >= 2 and relay.stats().bad_lines >= 3)
        assert writer.flush(10)
        stats = relay.stats()
    found = {r["app"]: r for r in rows(influx_client)}
    assert set(found) == {"app-good-1", "app-good-2"}
    assert found["app-good-2"]["heap_used_bytes"] == 222 and found["app-good-2"]["cpu_time_ns"] == 7
    assert stats.bad_lines >= 4 and stats.points == 2 and stats.write_errors == 0   # 3 bad and the 10 MB line
    assert stats.foreign_connections == 1
    assert stats.dropped_connections >= 200 + 2           # the idle crowd, the 10 MB line, the random bytes


def test_a_burst_of_senders_beyond_the_bound_loses_no_report():
    """A cluster's executors report in the same second: the ones over the bound wait, none is refused."""
    from collector.testing import MemoryWriter
    writer = MemoryWriter()
    with GraphiteRelay(writer, max_connections=8, quiet_s=60) as relay:
        holders = [socket.create_connection(("127.0.0.1", relay.port), timeout=5) for _ in range(8)]
        for i, s in enumerate(holders):              # senders of the session, busy: they keep their places
            s.sendall(f"{relay.prefix}.app-h{i}.driver.jvm.heap.used 1000 {int(time.time())}\n".encode())
        assert wait_for(lambda: relay.stats().times_full == 1)
        for i in range(300):                         # sent into the backlog while the relay is full
            good_report(relay, f"app-{i}", i + 1)
        assert relay.stats().points == 0
        for s in holders:
            s.close()
        assert wait_for(lambda: relay.stats().points == 308)
        stats = relay.stats()
    heaps = sorted(p.fields["heap_used_bytes"] for p in writer.measurement("spark_executor"))
    assert heaps == list(range(1, 301)) + [1000] * 8
    assert stats.connections == 308 and stats.dropped_connections == 0 and stats.bad_lines == 0


class BrokenWriter:
    """A writer that always fails: the relay counts the failure and keeps serving."""

    def __init__(self):
        self.calls = 0

    def add(self, points):
        self.calls += 1
        raise RuntimeError("disk full")


def test_a_failing_writer_is_counted_not_raised():
    writer = BrokenWriter()
    with GraphiteRelay(writer) as relay:
        good_report(relay, "app-1", 1)
        good_report(relay, "app-2", 2)
        assert wait_for(lambda: relay.stats().write_errors == 2)
        assert relay.stats().points == 0 and writer.calls == 2


def test_stop_hands_on_an_open_report_and_frees_the_port():
    from collector.testing import MemoryWriter
    writer = MemoryWriter()
    relay = GraphiteRelay(writer, quiet_s=60).start()
    s = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
    s.sendall(f"{relay.prefix}.app-9.3.jvm.heap.used 9 {int(time.time())}\n".encode())
    assert wait_for(lambda: relay.stats().lines == 1)
    relay.stop()
    s.close()
    [point] = writer.measurement("spark_executor")
    assert point.tags == {"app": "app-9", "executor": "3"} and point.fields == {"heap_used_bytes": 9}
    with socket.create_server(("127.0.0.1", relay.port)):      # the port is free again
        pass


def test_executors_beyond_the_series_bound_are_counted_not_written():
    from collector.testing import MemoryWriter
    writer = MemoryWriter()
    with GraphiteRelay(writer, max_series=3) as relay:
        for i in range(5):
            good_report(relay, f"app-{i}", i + 1)
        good_report(relay, "app-0", 10)             # a known pair goes on being written
        assert wait_for(lambda: relay.stats().points + relay.stats().dropped_points == 6)
        stats = relay.stats()
    assert [p.tags["app"] for p in writer.measurement("spark_executor")] == ["app-0", "app-1", "app-2", "app-0"]
    assert stats.points == 4 and stats.dropped_points == 2


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6")
def test_relay_listens_on_ipv6_loopback():
    from collector.testing import MemoryWriter
    writer = MemoryWriter()
    try:
        relay = GraphiteRelay(writer, host="::1").start()
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    try:
        with socket.create_connection(("::1", relay.port), timeout=5) as s:
            s.sendall(f"{relay.prefix}.app-6.driver.jvm.heap.used 6 {int(time.time())}\n".encode())
        assert wait_for(lambda: relay.stats().points == 1)
    finally:
        relay.stop()
    assert writer.measurement("spark_executor")[0].fields == {"heap_used_bytes": 6}

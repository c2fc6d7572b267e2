"""`marketspread watch` of a script that configures its own Graphite sink: no relay of ours, no Spark errors."""
from __future__ import annotations

import socket
import textwrap
import threading

import pytest

from tests.marketspread.test_watch import _env, _watch

OWN_SINK_JOB = textwrap.dedent("""
    import sys, time
    from pyspark.sql import SparkSession
    sink = "spark.metrics.conf.*.sink.graphite."
    spark = (SparkSession.builder.master("local[1]").appName("own-sink")
             .config("spark.ui.enabled", "false")
             .config(sink + "class", "org.apache.spark.metrics.sink.GraphiteSink")
             .config(sink + "host", "127.0.0.1").config(sink + "port", sys.argv[1])
             .config(sink + "period", "1").config(sink + "prefix", "usersink")
             .getOrCreate())
    spark.range(0, 100_000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    time.sleep(3)
    spark.stop()
""")


class Listener:
    """The script's own Graphite server: keeps the first chunk of every connection, reads each to its end."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                got = b""
                try:
                    while chunk := conn.recv(65536):          # to the end: Spark logs a reset as a failure
                        got = got or chunk
                except OSError:
                    pass
                self.received.append(got)


@pytest.mark.slow                  # a Spark application in a child process, ~20 s
def test_a_scripts_own_sink_is_left_alone_and_no_relay_listens(influx_client, tmp_path):
    listener = Listener()
    script = tmp_path / "own_sink_job.py"
    script.write_text(OWN_SINK_JOB)
    try:
        done = _watch(_env(influx_client, tmp_path / "state"), "--", str(script), str(listener.port))
    finally:
        listener.server.close()
    assert done.returncode == 0, done.stderr[-3000:]
    assert listener.received and all(r.startswith(b"usersink.") for r in listener.received if r)
    assert "graphite relay: listening" not in done.stderr          # no relay, no writer of ours for it
    assert "Unable to report to Graphite" not in done.stderr
    assert "left to the script" in done.stderr                     # one line says why there are no JVM figures

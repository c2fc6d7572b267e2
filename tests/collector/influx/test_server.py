"""The project's own influxd: start is idempotent, and the `influxdb` command line."""
from __future__ import annotations

import argparse

from collector.influx import server as influx_server
from collector.influx.server import InfluxServer, free_port


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

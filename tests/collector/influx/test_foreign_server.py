"""The state folder's admin password goes only to the server that folder started.

A fake HTTP server stands where the folder's own InfluxDB last ran (its server.json, or the
default port) while that server is stopped: it must receive no credential at all.
"""
from __future__ import annotations

import base64
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collector.influx import InfluxConfig, InfluxWriter, Point
from collector.influx.client import InfluxClient
from collector.influx.config import DEFAULT_PORT
from collector.influx.credentials import create_credentials, credentials_path


class _Recorder(BaseHTTPRequestHandler):
    seen: list[bytes] = []

    def _take(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        type(self).seen.append(bytes(self.requestline, "latin-1") + b"\n" + bytes(self.headers) + body)
        self.send_response(204)
        self.send_header("X-Influxdb-Version", "1.6.7")
        self.end_headers()

    do_GET = do_POST = do_HEAD = _take

    def log_message(self, *args):
        pass


def _fake_server(port: int = 0):
    _Recorder.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", port), _Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _talk(cfg: InfluxConfig, spool) -> None:
    """Do what a product process does with its config: ping, query, write through a writer."""
    client = InfluxClient(cfg)
    try:
        client.ping()
        try:
            client.query("SHOW DATABASES")
        except Exception:       # the fake answers 204 without a body: any error is fine here
            pass
    finally:
        client.close()
    w = InfluxWriter(InfluxClient(cfg), spool).start()
    w.add([Point("m", {"t": "x"}, {"v": 1.0}, 1_700_000_000_000_000_000)])
    w.close(timeout=3)


def _assert_no_credential(password: str) -> None:
    assert _Recorder.seen, "the fake server was never asked (the test proves nothing)"
    token = base64.b64encode(f"admin:{password}".encode())
    for req in _Recorder.seen:
        assert b"authorization" not in req.lower()
        assert password.encode() not in req and token not in req


def test_a_server_the_folder_did_not_start_gets_no_credential(tmp_path):
    creds = create_credentials(credentials_path(tmp_path))
    srv = _fake_server()
    try:
        port = srv.server_address[1]
        # the folder's server ran on this port once; it is stopped, its record left behind
        # (a recorded pid that is alive but not its influxd: this test's own)
        import os
        (tmp_path / "influxdb" / "server.json").write_text(json.dumps(
            {"pid": os.getpid(), "port": port, "rpc_port": port + 2, "url": f"http://127.0.0.1:{port}"}))
        env = {"MS_STATE_DIR": str(tmp_path)}
        cfg = InfluxConfig.from_env(env)
        assert cfg.password is None and cfg.user is None
        _talk(cfg, tmp_path / "spool-a")
        # its URL named without credentials: still not the folder's server, still none
        _talk(InfluxConfig.from_env({**env, "MS_INFLUX_URL": f"http://127.0.0.1:{port}"}), tmp_path / "spool-b")
        _assert_no_credential(creds.password)
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_default_port_taken_by_a_stranger_gets_no_credential(tmp_path):
    creds = create_credentials(credentials_path(tmp_path))
    try:
        srv = _fake_server(DEFAULT_PORT)
    except OSError:
        pytest.skip(f"port {DEFAULT_PORT} is in use on this machine")
    try:
        _talk(InfluxConfig.from_env({"MS_STATE_DIR": str(tmp_path)}), tmp_path / "spool")
        _assert_no_credential(creds.password)
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_running_process_keeps_its_credentials_back_once_the_folders_server_stops(tmp_path):
    """A dashboard left running while `influxdb stop` frees the port: whatever takes it next gets no password."""
    from collector.influx.server import InfluxServer, free_port
    from collector.influx import InfluxError
    server = InfluxServer(tmp_path, port=free_port())
    server.start()
    try:
        cfg = InfluxConfig.from_env({"MS_STATE_DIR": str(tmp_path)})
        client = InfluxClient(cfg)
        assert cfg.password and client.ping()                   # the folder's own server: credentials go
        password = cfg.password
    finally:
        server.stop()
    client.close()                                              # the kept-alive connection went with the server
    srv = _fake_server(server.port)
    try:
        with pytest.raises(InfluxError, match="not running"):
            client.write([Point("m", {"k": "v"}, {"x": 1.0}, 1)])
        assert not client.ping()
        _talk(cfg, tmp_path / "spool")                          # a writer of the same config, as the dashboard's
        assert InfluxClient(InfluxConfig(url=cfg.url)).ping()   # the stranger does answer on the port
        for req in _Recorder.seen:
            assert password.encode() not in req and b"authorization" not in req.lower()
    finally:
        srv.shutdown()
        srv.server_close()

"""Servers bind to loopback by default: the ingress, the project's InfluxDB, the job's driver, the dashboard."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from collector.influx.server import InfluxServer
from marketspread.cli import build_parser, config_from
from engine.config import Config

from engine.tools.generate import generate
from engine.tools.sender import send_acknowledged

from .harness import (drain, fleet_for, is_loopback, listening_sockets, session_members, start_ingress, start_job,
                      stop_gracefully)


def test_ingress_defaults_to_loopback_in_config_and_command_line(monkeypatch):
    monkeypatch.delenv("MS_HOST", raising=False)
    assert Config().host == "127.0.0.1"
    assert Config.from_env(environ={}).host == "127.0.0.1"
    assert config_from(build_parser().parse_args(["ingress"])).host == "127.0.0.1"


def test_running_ingress_listens_on_loopback_only(tmp_path, monkeypatch):
    monkeypatch.delenv("MS_HOST", raising=False)
    state = tmp_path / "state"
    fleet = fleet_for(tmp_path)
    try:
        proc, ports = start_ingress(fleet, state, "--no-metrics")
        socks = listening_sockets(proc.popen.pid)
        assert {p for _, p in socks} == set(ports.values())      # the two ports, nothing else
        assert all(is_loopback(a) for a, _ in socks), socks
        assert stop_gracefully(fleet, proc) == 0
    finally:
        fleet.stop_all()


def test_project_influxdb_listens_on_loopback_only(influxdb):
    conf = influxdb.config_path.read_text()
    binds = [ln.split("=", 1)[1].strip().strip('"') for ln in conf.splitlines()
             if ln.strip().startswith("bind-address")]
    assert len(binds) == 2 and all(b.startswith("127.0.0.1:") for b in binds), binds
    pid = influxdb.status().pid
    socks = listening_sockets(pid)
    assert {p for _, p in socks} == {influxdb.port, influxdb.rpc_port}
    assert all(is_loopback(a) for a, _ in socks), socks


def test_influxdb_defaults_to_loopback_and_its_command_cannot_widen_it(tmp_path):
    """`marketspread influxdb` takes a port, never an address."""
    assert InfluxServer(tmp_path).host == "127.0.0.1"
    assert not hasattr(build_parser().parse_args(["influxdb", "status"]), "host")


def test_local_job_listens_on_loopback_only(tmp_path, monkeypatch):
    """The job's Spark driver (RPC, block manager) and py4j stay on loopback with a local master,
    and its Python workers' sockets are in a folder of this user's only."""
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    state = tmp_path / "state"
    fleet = fleet_for(tmp_path)
    try:
        # Events to process: the job starts its Python workers with its first batch that reads some.
        ingress, ports = start_ingress(fleet, state, "--no-metrics")
        nbbo, orders = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
        generate(nbbo, orders, symbols=20, nbbo=500, orders=500, seed=3)
        send_acknowledged("127.0.0.1", ports["nbbo"], nbbo)
        job = start_job(fleet, state, "--no-metrics", master="local[1]")
        drain(state, job)
        members = session_members(job.popen.pid)
        socks = [s for pid in members for s in listening_sockets(pid)]
        assert socks and all(is_loopback(a) for a, _ in socks), socks
        # Python workers listen on Unix sockets that take no secret: in a folder of this user's only.
        sock_dirs = {_environ(pid).get("PYTHON_WORKER_FACTORY_SOCK_DIR") for pid in members} - {None}
        assert len(sock_dirs) == 1, sock_dirs
        sock_dir = Path(sock_dirs.pop())
        assert stat.S_IMODE(sock_dir.stat().st_mode) == 0o700 and sock_dir.stat().st_uid == os.getuid()
        assert any(p.is_socket() for p in sock_dir.iterdir())
        assert stop_gracefully(fleet, job) == 0
        assert not sock_dir.exists()              # removed with the job, socket files and all
        assert stop_gracefully(fleet, ingress) == 0
    finally:
        fleet.stop_all()


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:                               # gone meanwhile
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def test_dashboard_listens_on_loopback_only_by_default(tmp_path, monkeypatch):
    """`marketspread ui` with no --host serves on 127.0.0.1, and nothing wider."""
    import socket

    from perf.fleet import wait_until

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name in ("MS_UI_TOKEN", "MS_UI_USER", "MS_UI_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    fleet = fleet_for(tmp_path, env={"MS_INFLUX_URL": "http://127.0.0.1:9"})
    try:
        ui = fleet.spawn("ui", ["ui", "--port", port])
        socks = wait_until(lambda: [s for pid in session_members(ui.popen.pid) for s in listening_sockets(pid)
                                    if s[1] == port], 60, "the dashboard to listen", [ui])
        assert all(is_loopback(a) for a, _ in socks), socks
    finally:
        fleet.stop_all()

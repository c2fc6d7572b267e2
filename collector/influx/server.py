"""The project's own InfluxDB 1.x server: `influxd` with our config, data under the state dir.

`marketspread influxdb start|stop|status` runs Debian's `influxd` (package `influxdb`,
installed by `scripts/setup`) as a detached child with a config written here, so it
never touches a system InfluxDB on :8086 or `/var/lib/influxdb`:

    <state_dir>/influxdb/influxdb.conf     config (rewritten on every start)
    <state_dir>/influxdb/{meta,data,wal}/  the database files
    <state_dir>/influxdb/influxd.pid       pid of the running server
    <state_dir>/influxdb/server.json       pid, ports and URL of the running server
    <state_dir>/influxdb/credentials.json  admin user and password (0600, generated at first start)
    <state_dir>/logs/influxdb.log          influxd's log, rotated at 10 MiB, 3 older files kept

Everything listens on 127.0.0.1 only: HTTP on `port` (default 18086) and the
backup/restore RPC service on `port + 2` (mirroring 8086/8088). Usage reporting, the
`_internal` monitor database, pprof and per-request HTTP logs are off. Authentication is
on: influxd reflects any `Origin` in its CORS headers, so without it a web page in the
user's browser could read, write or drop the metrics. At the first start (also of a
state folder from before authentication) an admin user is created with a random
password kept in `credentials.json` (0600), which `InfluxConfig.from_env` and
`InfluxServer.config()` hand to every project process. After start the
database (default `marketspread`) gets two retention policies (`collector.influx.RETENTION_POLICIES`):

    raw      7 days, 1-day shards,  DEFAULT   1-second points written live
    rollup  90 days, 7-day shards             10 s .. 1 h latency rollups (rp="rollup")

Histograms merge in the collector, not in InfluxQL, so no continuous query fills
`rollup`: the collector writes its 10 s .. 1 h rollups there itself.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from collector.influx.client import InfluxClient, InfluxError, quote_ident
from collector.influx.config import DEFAULT_DB, DEFAULT_PORT, InfluxConfig
from collector.influx.schema import describe_policies, ensure_database, setup_statements
from collector.influx.writer import InfluxWriter
from collector.settings import default_state_dir, env_values
from collector.influx.credentials import AdminCredentials, create_credentials, credentials_path
from collector.names import check_name
from collector.influx.limits import hard_open_files_limit, open_files_limit
from collector.logpump import spawn_logged
from collector.ports import free_port
from collector.safe_delete import remove_tree

log = logging.getLogger(__name__)

HOST = "127.0.0.1"

_CONFIG = """\
# Written by collector/influx/server.py on every start; edits are overwritten.
reporting-enabled = false
bind-address = "{host}:{rpc_port}"

[meta]
  dir = "{root}/meta"
  retention-autocreate = false
  logging-enabled = true

[data]
  dir = "{root}/data"
  wal-dir = "{root}/wal"
  index-version = "inmem"
  query-log-enabled = false

[coordinator]
  query-timeout = "60s"

[retention]
  enabled = true
  check-interval = "30m"

[monitor]
  store-enabled = false

[http]
  enabled = true
  bind-address = "{host}:{port}"
  auth-enabled = true
  log-enabled = false
  suppress-write-log = true
  pprof-enabled = false
  unix-socket-enabled = false

[logging]
  format = "logfmt"
  level = "info"
  suppress-logo = true

[continuous_queries]
  enabled = true
"""


#: influxd's log rotates at this size; this many older files are kept (as the demo's process logs).


class InfluxStatus(NamedTuple):
    """What `InfluxServer.status()` found."""
    running: bool
    pid: int | None
    url: str | None
    version: str | None


def find_influxd() -> str | None:
    """Return the path of `influxd` (PATH, then /usr/bin and /usr/sbin), None if not installed."""
    return shutil.which("influxd") or next(
        (p for p in ("/usr/bin/influxd", "/usr/sbin/influxd") if os.access(p, os.X_OK)), None)


def _port_busy(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


class InfluxServer:
    """An `influxd` child process with its own config, data and log under `state_dir`.

    `port=0` picks free ports (tests). `start()` is idempotent: if our server for this
    state dir already runs (pid file), it is reused whatever `port` says.

    >>> srv = InfluxServer(Path(".state"))
    >>> srv.start().url
    'http://127.0.0.1:18086'
    >>> srv.stop()
    """

    def __init__(self, state_dir: Path | str, port: int = DEFAULT_PORT, *, db: str = DEFAULT_DB,
                 host: str = HOST, rpc_port: int | None = None, influxd: str | None = None):
        self.state_dir = Path(state_dir)
        self.root = self.state_dir / "influxdb"
        self.port = int(port)
        self.rpc_port = rpc_port
        self.db = db
        self.host = host
        self._influxd = influxd
        self._proc: subprocess.Popen | None = None

    def __repr__(self) -> str:
        return f"InfluxServer({str(self.state_dir)!r}, port={self.port})"

    @property
    def config_path(self) -> Path:
        return self.root / "influxdb.conf"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "logs" / "influxdb.log"

    @property
    def _pid_path(self) -> Path:
        return self.root / "influxd.pid"

    @property
    def _info_path(self) -> Path:
        return self.root / "server.json"

    @property
    def url(self) -> str:
        """HTTP URL of the server (of the running one if there is one)."""
        info = self._info()
        port = info["port"] if info and self._alive(info.get("pid")) else self.port
        return f"http://{self.host}:{port}"

    @property
    def credentials_path(self) -> Path:
        return credentials_path(self.state_dir)

    def credentials(self) -> AdminCredentials:
        """Return the admin's credentials, generating them (0600) if this state folder has none yet."""
        return create_credentials(self.credentials_path)

    def config(self, **overrides) -> InfluxConfig:
        """Return the config of this server's database, with its admin credentials."""
        creds = self.credentials()
        values = dict(url=self.url, db=self.db, user=creds.user, password=creds.password)
        return InfluxConfig(**{**values, **overrides})

    def client(self, **overrides) -> InfluxClient:
        """Return a client of this server's database, with its admin credentials."""
        return InfluxClient(self.config(**overrides))

    # -- process bookkeeping

    def _info(self) -> dict | None:
        try:
            return json.loads(self._info_path.read_text())
        except (OSError, ValueError):
            return None

    def _pid(self) -> int | None:
        try:
            return int(self._pid_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def _alive(self, pid: int | None) -> bool:
        """Whether `pid` is a live `influxd` running our config (not a recycled pid)."""
        if not pid:
            return False
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is None
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z" and any(c.endswith(b"influxd") for c in cmd) and \
            str(self.config_path).encode() in cmd

    def _running_pid(self) -> int | None:
        pid = self._pid()
        return pid if self._alive(pid) else None

    # -- lifecycle

    def start(self, wait: float = 10.0) -> InfluxStatus:
        """Start influxd (or find ours running), wait for /ping, create the database; return the status."""
        pid = self._running_pid()
        if pid is not None:
            info = self._info() or {}
            if self.port not in (0, info.get("port")):
                log.warning("InfluxDB of %s already runs on port %s (not %s); using it",
                            self.state_dir, info.get("port"), self.port)
            self.port = info.get("port", self.port)
            self._wait_ready(pid, wait)
            self._setup()
            return self.status()

        influxd = self._influxd or find_influxd()
        if influxd is None:
            raise RuntimeError("influxd not found: install Debian's `influxdb` package (scripts/setup does)")
        port = self.port or free_port(self.host)
        rpc_port = self.rpc_port or (port + 2 if port + 2 <= 65535 else port - 2)
        while self.port == 0 and not self.rpc_port and (rpc_port == port or _port_busy(self.host, rpc_port)):
            rpc_port = free_port(self.host)
        for p, what in ((port, "HTTP"), (rpc_port, "RPC")):
            if _port_busy(self.host, p):
                raise RuntimeError(f"InfluxDB {what} port {self.host}:{p} is in use; choose another --port")
        for d in ("meta", "data", "wal"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(_CONFIG.format(host=self.host, port=port, rpc_port=rpc_port,
                                                   root=self.root.resolve()))
        t0 = time.monotonic()
        self._proc = self._spawn(influxd)
        self.port, self.rpc_port = port, rpc_port
        self._pid_path.write_text(f"{self._proc.pid}\n")
        self._info_path.write_text(json.dumps({"pid": self._proc.pid, "port": port, "rpc_port": rpc_port,
                                               "url": f"http://{self.host}:{port}", "started": time.time()}))
        try:
            self._wait_ready(self._proc.pid, wait)
            self._setup()
        except BaseException:
            self.stop()
            raise
        log.info("InfluxDB %s (pid %d) ready at %s in %.2f s, open files up to %s", self.status().version,
                 self._proc.pid, self.url, time.monotonic() - t0, open_files_limit(self._proc.pid))
        return self.status()

    def _spawn(self, influxd: str) -> subprocess.Popen:
        """Start influxd with the hard open-file limit, its output piped to a rotating log pump.

        InfluxDB keeps open files per shard: the usual soft limit of 1,024 is reached with a
        few hundred shards, and then `/ping`, writes and restarts fail. Both processes get
        their own session: a Ctrl-C of a shell does not stop them.
        """
        with hard_open_files_limit():
            return spawn_logged([influxd, "run", "-config", str(self.config_path.resolve())], self.log_path,
                                self.root)

    def _wait_ready(self, pid: int, wait: float) -> None:
        client = InfluxClient(InfluxConfig(url=f"http://{self.host}:{self.port}", timeout=1.0))
        deadline = time.monotonic() + wait
        try:
            while not client.ping():
                if not self._alive(pid):
                    raise RuntimeError(f"influxd exited during start-up; see {self.log_path}:\n{self._log_tail()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"InfluxDB on port {self.port} not ready after {wait:.0f} s; "
                                       f"see {self.log_path}")
                time.sleep(0.02)
        finally:
            client.close()

    def _setup(self) -> None:
        client = self.client()
        try:
            self._ensure_admin(client)
            ensure_database(client)
        finally:
            client.close()

    def _ensure_admin(self, client: InfluxClient) -> None:
        # InfluxDB 1.x lets anyone create the first admin while there is none; every other
        # request then needs credentials. A server of a state folder from before
        # authentication has no user: it gets ours here, at its first start with auth.
        try:
            client.query("SHOW USERS")
            return
        except InfluxError as e:
            if "create admin user first" not in str(e):
                if e.denied:
                    raise RuntimeError(
                        f"InfluxDB of {self.state_dir} refuses the admin credentials in {self.credentials_path} "
                        f"({e}); restore that file, or stop the server and remove {self.root} to start "
                        "afresh (its metrics are lost)") from None
                raise
        creds = self.credentials()
        password = creds.password.replace("\\", "\\\\").replace("'", "\\'")
        client.query(f"CREATE USER {quote_ident(creds.user)} WITH PASSWORD '{password}' WITH ALL PRIVILEGES")
        log.info("InfluxDB: created admin user %r (password in %s)", creds.user, self.credentials_path)

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop our server (SIGTERM, then SIGKILL after `timeout` s); return whether one was running."""
        pid = self._running_pid()
        if pid is None:
            self._cleanup()
            return False
        t0 = time.monotonic()
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not self._wait_gone(pid, timeout):
            log.warning("influxd (pid %d) ignored SIGTERM for %.0f s; killing it", pid, timeout)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._wait_gone(pid, 5.0)
        log.info("InfluxDB (pid %d) stopped in %.2f s", pid, time.monotonic() - t0)
        self._cleanup()
        return True

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self._alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _cleanup(self) -> None:
        remove_tree(self._pid_path)
        remove_tree(self._info_path)
        self._proc = None

    def status(self) -> InfluxStatus:
        """Return whether our server runs, its pid, URL and version (from /ping)."""
        pid = self._running_pid()
        if pid is None:
            return InfluxStatus(False, None, None, None)
        info = self._info() or {}
        url = info.get("url") or self.url
        client = InfluxClient(InfluxConfig(url=url, timeout=2.0))
        try:
            return InfluxStatus(True, pid, url, client.version())
        finally:
            client.close()


# ---------------------------------------------------------------------------------------------
# command line: marketspread influxdb start|stop|status|init


@dataclass(frozen=True)
class ServerSettings:
    """The `influxdb` command's variables: `MS_INFLUX_PORT`, `MS_INFLUX_DB`, `MS_INFLUX_URL`."""
    port: int = DEFAULT_PORT
    db: str = DEFAULT_DB
    url: str | None = None                # a server of the user's: `init` prepares that one

    @classmethod
    def from_env(cls, environ=None) -> "ServerSettings":
        """Build from defaults, then `MS_INFLUX_*` variables (None: this process's environment)."""
        return cls(**env_values(cls, environ, prefix="MS_INFLUX_"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `influxdb` subcommand's arguments."""
    parser.add_argument("action", choices=("start", "stop", "status", "init"),
                        help="init: create the database and the project's retention policies on "
                             "MS_INFLUX_URL (else on the project's running server)")
    parser.add_argument("--port", type=int, default=None,
                        help=f"HTTP port on 127.0.0.1 (default {DEFAULT_PORT}, MS_INFLUX_PORT; 0 = any free)")
    parser.add_argument("--state-dir", type=Path, default=None, help="state folder (default .state/, MS_STATE_DIR)")
    parser.add_argument("--db", default=None, help=f"database to create (default {DEFAULT_DB}, MS_INFLUX_DB)")
    parser.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the server (default 10)")


def backfill_spools(srv: "InfluxServer", timeout: float = 30.0) -> None:
    """Send the points processes of the state folder spooled for this server while it was down.

    A writer adopts sibling spool folders meant for the same server and database that no
    live process holds (collector/influx/spool.py), so opening and closing one here backfills
    what a job that ended during the outage left behind.
    """
    InfluxWriter(srv.client(), srv.state_dir / "metrics-spool" / "influxdb-start").start().close(timeout)


def run(args: argparse.Namespace) -> int:
    """Run `influxdb start|stop|status|init`; print the URL on start."""
    env = ServerSettings.from_env()
    port = args.port if args.port is not None else env.port
    db = check_name(args.db or env.db, "database name")
    srv = InfluxServer(args.state_dir or default_state_dir(), port, db=db)
    if args.action == "init":
        return _init(srv, db, InfluxConfig.from_env(db=db) if env.url is not None else None)
    if args.action == "start":
        st = srv.start(wait=args.wait)
        backfill_spools(srv)
        print(st.url)
        return 0
    if args.action == "stop":
        print("InfluxDB stopped" if srv.stop(timeout=args.wait) else "InfluxDB was not running")
        return 0
    st = srv.status()
    if st.running:
        print(f"InfluxDB {st.version or '?'} running, pid {st.pid}, {st.url}, data in {srv.root}")
        return 0
    print(f"InfluxDB not running (state dir {srv.state_dir})")
    return 3


def _init(srv: InfluxServer, db: str, external: InfluxConfig | None) -> int:
    """Create the database and the project's retention policies on `external` (a server of the
    user's), else on the project's running server; one line on success or failure."""
    if external is not None:
        cfg = external
    elif srv.status().running:
        cfg = srv.config()
    else:
        print("influxdb init: set MS_INFLUX_URL, or start the project's server first "
              "(marketspread influxdb start)", file=sys.stderr)
        return 1
    client = InfluxClient(cfg)
    try:
        ensure_database(client)
    except InfluxError as e:
        if e.status is None:
            print(f"influxdb init: InfluxDB at {cfg.url} is unreachable ({e})", file=sys.stderr)
        else:
            print(f"influxdb init: cannot create database {cfg.db!r} at {cfg.url} ({e}); run it with "
                  f"MS_INFLUX_USER/MS_INFLUX_PASSWORD of an admin, or have an admin run: "
                  + "; ".join(setup_statements(cfg.db)), file=sys.stderr)
        return 1
    finally:
        client.close()
    print(f"database {cfg.db!r} ready at {cfg.url}: retention policies {describe_policies()}")
    return 0

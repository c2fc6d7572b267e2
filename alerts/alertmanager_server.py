"""The project's own Prometheus Alertmanager, beside the dashboard: `marketspread alertmanager`.

`start|stop|status` runs Debian's `prometheus-alertmanager` (0.25, installed by
`scripts/setup`) as a detached child with everything in the state folder, so it never
touches a system Alertmanager on :9093 or `/var/lib/prometheus`:

    <state_dir>/alertmanager/alertmanager.yml   its configuration: written once, then yours
    <state_dir>/alertmanager/data/              silences and notification log (--storage.path)
    <state_dir>/alertmanager/token              the secret first segment of its URL's path (0600)
    <state_dir>/alertmanager/server.json        pid and port of the running server
    <state_dir>/logs/alertmanager.log           its log (rotated at 10 MiB, 3 older kept)

It listens on 127.0.0.1 only (`port`, default 19093) and has no cluster (gossip) port;
silences and the notification log are kept `DATA_RETENTION` (120 h). Alertmanager 0.25
has no authentication of its own and answers every origin (`Access-Control-Allow-Origin:
*`), so any web page open in a browser on this machine could read its alerts and silence
them: everything it serves therefore lives under a random path (`--web.route-prefix`,
the `token` file), `http://127.0.0.1:19093/<token>`, which `start` and `status` print
and `MS_ALERTMANAGER_URL` names; other paths answer 404. The first start
writes a minimal `alertmanager.yml` whose one receiver, `default`, notifies nobody:
replace the file with your routes and receivers (Alertmanager's own format) and restart.
The evaluator posts to it when `MS_ALERTMANAGER_URL` names it (`alerts.alertmanager`).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import secrets
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from collector.logpump import spawn_logged
from collector.ports import free_port
from collector.safe_delete import remove_tree
from collector.settings import default_state_dir

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_PORT = 19093
DATA_RETENTION = "120h"
BINARY_NAMES = ("prometheus-alertmanager", "alertmanager")

DEFAULT_CONFIG = """\
# Alertmanager's configuration for `marketspread alertmanager start`, written at its first
# start and then left alone: replace it with your own routes and receivers (see
# https://prometheus.io/docs/alerting/latest/configuration/) and restart. The evaluator
# posts each rule's alert with the labels alertname, rule, job, query, run_id, severity
# and namespace (docs/ALERTS.md).
route:
  receiver: default
  group_by: [alertname, job]
  group_wait: 10s
  group_interval: 1m
  repeat_interval: 4h
receivers:
  - name: default      # notifies nobody: add webhook_configs, email_configs, slack_configs ... here
"""


@dataclass(frozen=True)
class AlertmanagerStatus:
    """What `AlertmanagerServer.status()` found."""
    running: bool
    pid: int | None = None
    url: str | None = None
    version: str | None = None


def find_alertmanager() -> str | None:
    """Return the path of Alertmanager's binary (PATH, then /usr/bin), None if not installed."""
    for name in BINARY_NAMES:
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if found:
            return found
    return None


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))     # loopback: never through a proxy


def _get_json(url: str, timeout: float = 2.0) -> object | None:
    """Return the JSON of a GET to our own loopback server, None if it does not answer."""
    try:
        with _DIRECT.open(url, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except (OSError, ValueError):
        return None


class AlertmanagerServer:
    """An Alertmanager child process with its config, data and log under `state_dir`.

    `port=0` picks a free port (tests); `config_text` replaces `alertmanager.yml` at each
    start (tests), else the file is kept and written only when missing. `start()` reuses
    the running server of this state folder.

    >>> am = AlertmanagerServer(Path(".state"))
    >>> am.start().url
    'http://127.0.0.1:19093'
    >>> am.stop()
    """

    def __init__(self, state_dir: Path | str, port: int = DEFAULT_PORT, *, config_text: str | None = None,
                 binary: str | None = None):
        self.state_dir = Path(state_dir)
        self.root = self.state_dir / "alertmanager"
        self.port = int(port)
        self.config_text = config_text
        self._binary = binary
        self._proc: subprocess.Popen | None = None

    @property
    def config_path(self) -> Path:
        return self.root / "alertmanager.yml"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "logs" / "alertmanager.log"

    @property
    def _info_path(self) -> Path:
        return self.root / "server.json"

    def _token(self) -> str:
        """Return the secret path segment, created (0600) at the first start."""
        path = self.root / "token"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(18) + "\n")
        return path.read_text().strip()

    @property
    def url(self) -> str:
        """URL of the server's API and UI (of the running one if there is one), its token included."""
        info = self._running()
        return f"http://{HOST}:{info['port'] if info else self.port}/{self._token()}"

    def _running(self) -> dict | None:
        """Return the running server's record (pid, port), None unless its process is ours and alive."""
        try:
            info = json.loads(self._info_path.read_text())
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if self._proc is not None and self._proc.pid == pid:
            return info if self._proc.poll() is None else None
        try:                      # a recycled pid runs something else: our config path tells ours apart
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            zombie = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            return None
        return info if not zombie and str(self.config_path.resolve()).encode() in cmdline else None

    def start(self, wait: float = 15.0) -> AlertmanagerStatus:
        """Start Alertmanager (or find ours running), wait until it is ready; return its status."""
        info = self._running()
        if info is not None:
            self.port = int(info["port"])
            return self.status()
        binary = self._binary or find_alertmanager()
        if binary is None:
            raise RuntimeError("Alertmanager not found: install Debian's `prometheus-alertmanager` "
                               "package (scripts/setup does)")
        self.port = self.port or free_port(HOST)
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.config_text is not None or not self.config_path.exists():
            self.config_path.write_text(self.config_text if self.config_text is not None else DEFAULT_CONFIG)
        cmd = [binary, f"--config.file={self.config_path.resolve()}",
               f"--storage.path={(self.root / 'data').resolve()}", f"--data.retention={DATA_RETENTION}",
               f"--web.listen-address={HOST}:{self.port}", f"--web.route-prefix=/{self._token()}",
               "--cluster.listen-address="]
        t0 = time.monotonic()
        self._proc = spawn_logged(cmd, self.log_path, self.root)   # rotated like influxd's; Ctrl-C of a shell leaves it
        self._info_path.write_text(json.dumps({"pid": self._proc.pid, "port": self.port, "started": time.time()}))
        try:
            self._wait_ready(wait)
        except BaseException:
            self.stop()
            raise
        log.info("Alertmanager (pid %d) ready at %s in %.2f s", self._proc.pid, self.url, time.monotonic() - t0)
        return self.status()

    def _wait_ready(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        while _get_json(f"{self.url}/api/v2/status", timeout=1.0) is None:
            if self._running() is None:
                raise RuntimeError(f"Alertmanager exited during start-up; see {self.log_path}:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Alertmanager on port {self.port} not ready after {wait:.0f} s; "
                                   f"see {self.log_path}")
            time.sleep(0.05)

    def _log_tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop our server (SIGTERM, SIGKILL after `timeout` s); return whether one was running."""
        info = self._running()
        if info is not None:
            pid = int(info["pid"])
            for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + grace
                while self._running() is not None and time.monotonic() < deadline:
                    if self._proc is not None and self._proc.pid == pid:
                        self._proc.poll()                      # reap our own child
                    time.sleep(0.05)
                if self._running() is None:
                    break
                log.warning("Alertmanager (pid %d) ignored SIGTERM for %.0f s; killing it", pid, grace)
        remove_tree(self._info_path)
        self._proc = None
        return info is not None

    def status(self) -> AlertmanagerStatus:
        """Return whether our server runs, its pid, URL and version."""
        info = self._running()
        if info is None:
            return AlertmanagerStatus(False)
        url = f"http://{HOST}:{info['port']}/{self._token()}"
        doc = _get_json(f"{url}/api/v2/status")
        version = doc.get("versionInfo", {}).get("version") if isinstance(doc, dict) else None
        return AlertmanagerStatus(True, int(info["pid"]), url, version)


# ---------------------------------------------------------------------------------------------
# command line: marketspread alertmanager start|stop|status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `alertmanager` subcommand's arguments."""
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"HTTP port on 127.0.0.1 (default {DEFAULT_PORT}; 0 = any free)")
    parser.add_argument("--state-dir", type=Path, default=None, help="state folder (default .state/, MS_STATE_DIR)")
    parser.add_argument("--wait", type=float, default=15.0, help="seconds to wait for the server (default 15)")


def run(args: argparse.Namespace) -> int:
    """Run `alertmanager start|stop|status`; print the URL to set as MS_ALERTMANAGER_URL on start."""
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} is not a TCP port (0..65535)")
    srv = AlertmanagerServer(args.state_dir or default_state_dir(), args.port)
    if args.action == "start":
        st = srv.start(wait=args.wait)
        print(st.url)
        print(f"configuration: {srv.config_path} (replace it with your routes and receivers, then restart); "
              f"the evaluator posts to it with MS_ALERTMANAGER_URL={st.url}")
        return 0
    if args.action == "stop":
        print("Alertmanager stopped" if srv.stop(timeout=args.wait) else "Alertmanager was not running")
        return 0
    st = srv.status()
    if st.running:
        print(f"Alertmanager {st.version or '?'} running, pid {st.pid}, {st.url}, configuration {srv.config_path}")
        return 0
    print(f"Alertmanager not running (state dir {srv.state_dir})")
    return 3

"""The started `marketspread ui` (a real process on a free port) under hostile requests, over raw sockets.

DNS rebinding (a foreign Host), framing, malformed Dash callbacks, slow-loris clients,
the token redirect, login guessing and the cookie's Secure flag behind a TLS proxy
(issue 14). Nothing here needs InfluxDB: the requests are refused, or touch the rules
file only, before any query would run.
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.influx.server import free_port
from perf.fleet import wait_until
from tests.reliability.harness import fleet_for

TOKEN = "tok-0123456789abcdef-for-tests"
THREADS, CONNECTIONS, TIMEOUT_S = 4, 20, 2
FRAMING = {"x-frame-options": "DENY", "content-security-policy": "frame-ancestors 'none'",
           "x-content-type-options": "nosniff"}
UNSET = ("MS_UI_TOKEN", "MS_UI_USER", "MS_UI_PASSWORD", "MS_UI_ALLOWED_HOSTS", "MS_UI_ALLOWED_ORIGINS",
         "MS_UI_SECURE_COOKIE", "MS_UI_PROXY_HOPS", "MS_UI_THREADS", "MS_UI_CONNECTION_LIMIT", "MS_UI_TIMEOUT_S",
         "MS_UI_HOST", "MS_UI_PORT")


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]        # lower-case names
    body: bytes


@dataclass
class Ui:
    port: int
    pid: int
    rules: Path

    def request(self, method: str = "GET", path: str = "/", headers: dict | None = None, body: bytes = b"",
                host: str | None = None) -> Reply:
        """Send one HTTP/1.1 request as written (Host included) and read the whole reply."""
        head = {"Host": host if host is not None else f"127.0.0.1:{self.port}", "Connection": "close",
                **(headers or {})}
        if body or method == "POST":
            head["Content-Length"] = str(len(body))
        raw = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items() if v is not None)
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(raw.encode("latin-1") + b"\r\n" + body)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        top, _, rest = data.partition(b"\r\n\r\n")
        lines = top.decode("latin-1").split("\r\n")
        headers_ = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers_[name.strip().lower()] = value.strip()
        return Reply(int(lines[0].split()[1]), headers_, rest)

    def callback(self, body: dict, host: str | None = None, origin: str | None = None, **headers) -> Reply:
        h = {"Content-Type": "application/json", "Origin": origin, **headers}
        return self.request("POST", "/_dash-update-component", h, json.dumps(body).encode(), host)


def _start(tmp_path_factory, name: str, env: dict[str, str]):
    root = tmp_path_factory.mktemp(name)
    rules = root / "rules.json"
    fleet = fleet_for(root, env={"MS_INFLUX_URL": "http://127.0.0.1:9", "MS_STATE_DIR": str(root / "state"),
                                 "MS_ALERTS_FILE": str(rules), **env})
    for var in UNSET:
        if var not in env:
            fleet.env.pop(var, None)
    port = free_port()
    proc = fleet.spawn("ui", ["ui", "--port", port])
    ui = Ui(port, proc.popen.pid, rules)

    def up() -> bool:
        try:
            return ui.request("GET", "/_dash-layout", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200
        except OSError:
            return False
    wait_until(up, 90, "the dashboard to answer", [proc])
    return fleet, ui


@pytest.fixture(scope="module")
def open_ui(tmp_path_factory):
    """The dashboard as run by default: loopback, no credentials; small limits to reach them."""
    fleet, ui = _start(tmp_path_factory, "open-ui", {
        "MS_UI_ALLOWED_HOSTS": "metrics.example", "MS_UI_THREADS": str(THREADS),
        "MS_UI_CONNECTION_LIMIT": str(CONNECTIONS), "MS_UI_TIMEOUT_S": str(TIMEOUT_S)})
    yield ui
    fleet.stop_all()


@pytest.fixture(scope="module")
def token_ui(tmp_path_factory):
    """A dashboard with a token, its cookie marked Secure (MS_UI_SECURE_COOKIE)."""
    fleet, ui = _start(tmp_path_factory, "token-ui", {"MS_UI_TOKEN": TOKEN, "MS_UI_SECURE_COOKIE": "1"})
    yield ui
    fleet.stop_all()


@pytest.fixture
def proxied_ui(tmp_path_factory):
    """A dashboard with a token and basic auth behind one trusted proxy (MS_UI_PROXY_HOPS=1)."""
    fleet, ui = _start(tmp_path_factory, "proxied-ui", {"MS_UI_TOKEN": TOKEN, "MS_UI_USER": "ops",
                                                       "MS_UI_PASSWORD": "right-password", "MS_UI_PROXY_HOPS": "1"})
    yield ui
    fleet.stop_all()


def _save_rule_body(ui: Ui, name: str) -> dict:
    """The alerts page's save-form callback as the browser sends it, built from /_dash-dependencies."""
    deps = json.loads(ui.request("GET", "/_dash-dependencies").body)
    dep = next(d for d in deps if any(i["id"] == "alerts-save" for i in d["inputs"]))
    outputs = [dict(zip(("id", "property"), o.rsplit(".", 1))) for o in dep["output"].strip(".").split("...")]
    form = {"alerts-name": name, "alerts-condition": "p99 > 5ms"}

    def entry(item, value):
        return [] if item["id"].startswith("{") else {"id": item["id"], "property": item["property"], "value": value}
    inputs = [entry(i, 1 if i["id"] == "alerts-save" else None) for i in dep["inputs"]]
    state = [entry(s, form.get(s["id"])) for s in dep["state"]]
    return {"output": dep["output"], "outputs": outputs, "inputs": inputs, "state": state,
            "changedPropIds": ["alerts-save.n_clicks"]}


def test_a_foreign_host_gets_400_and_changes_nothing(open_ui):
    body = _save_rule_body(open_ui, "rebound")
    evil = f"evil.example:{open_ui.port}"
    # DNS rebinding: the browser's Origin and Host both name the attacker's site
    r = open_ui.callback(body, host=evil, origin=f"http://{evil}")
    assert r.status == 400 and b"not a name this dashboard answers to" in r.body
    assert not open_ui.rules.exists()
    for host in (evil, "evil.example", f"localhost.evil.example:{open_ui.port}", f"127.0.0.1.nip.io:{open_ui.port}",
                 f"[::2]:{open_ui.port}", "127.0.0.1@evil.example", ""):
        assert open_ui.request("GET", "/", host=host).status == 400, host
        assert open_ui.callback(body, host=host).status == 400, host
    assert open_ui.request("GET", "/", host=None, headers={"Host": None}).status == 400     # no Host at all
    assert not open_ui.rules.exists()

    # the same request on a name the dashboard answers to does create the rule
    own = f"127.0.0.1:{open_ui.port}"
    r = open_ui.callback(body, host=own, origin=f"http://{own}")
    assert r.status == 200 and b"Created rebound" in r.body
    assert [rule["name"] for rule in json.loads(open_ui.rules.read_text())["rules"]] == ["rebound"]
    for host in (f"localhost:{open_ui.port}", f"[::1]:{open_ui.port}", "LOCALHOST", "metrics.example",
                 f"metrics.example:{open_ui.port}"):
        assert open_ui.request("GET", "/", host=host).status == 200, host


def test_every_response_carries_the_framing_headers_and_no_werkzeug(open_ui):
    replies = {path: open_ui.request("GET", path) for path in
               ("/", "/run/x", "/alerts", "/_dash-layout", "/assets/style.css", "/no-such-page",
                "/export/x/sink.csv", "/export/a%0A/sink.csv")}
    replies["foreign host"] = open_ui.request("GET", "/", host="evil.example")
    replies["callback"] = open_ui.callback({"output": "nope"})
    assert {k: r.status for k, r in replies.items()} == {
        "/": 200, "/run/x": 200, "/alerts": 200, "/_dash-layout": 200, "/assets/style.css": 200,
        "/no-such-page": 404, "/export/x/sink.csv": 503, "/export/a%0A/sink.csv": 400, "foreign host": 400,
        "callback": 400}                              # Dash answers unknown paths with its 404 page, as a 200
    for what, r in replies.items():
        assert {k: r.headers.get(k) for k in FRAMING} == FRAMING, what
        assert r.headers["server"] == "marketspread-ui", what
        assert "werkzeug" not in json.dumps(r.headers).lower(), what


@pytest.mark.parametrize("body", [
    b"not json", b"{}", b"[]", b'"x"', b'{"output": 5}', b'{"output": "no-such.children"}',
    b'{"output": "..runs-table.children...runs-banner.children..", "outputs": 7}',
    b'{"output": "..runs-table.children...runs-banner.children..", "outputs": [], "inputs": "x"}',
    b'{"output": "..runs-table.children...runs-banner.children..", "outputs": [], "inputs": [5]}',
    b'{"output": "..runs-table.children...runs-banner.children..", "outputs": [], "inputs": []}',
    b'{"output": "..runs-table.children...runs-banner.children..", "outputs": [], '
    b'"inputs": [{"id": "runs-interval", "property": "n_intervals", "value": 0}], "changedPropIds": {"a": 1}}',
])
def test_malformed_callbacks_get_a_400_with_a_reason(open_ui, body):
    r = open_ui.request("POST", "/_dash-update-component", {"Content-Type": "application/json"}, body)
    assert r.status == 400 and r.body.startswith(b"bad callback request: "), (r.status, r.body[:200])
    assert b"Traceback" not in r.body


def _sockets_of(pid: int) -> int:
    """Sockets the process holds open (accepted connections and its listening socket)."""
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return n


def _threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def test_slow_loris_clients_hold_no_more_than_the_cap_and_are_timed_out(open_ui):
    assert open_ui.request().status == 200                      # warm: every thread the server ever starts
    threads_before = _threads_of(open_ui.pid)
    lorises = []
    try:
        for _ in range(3 * CONNECTIONS):                        # half-open requests that never finish
            s = socket.create_connection(("127.0.0.1", open_ui.port), timeout=30)
            s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{open_ui.port}\r\nX-Slow: ".encode())
            lorises.append(s)
        # the server takes connections up to its cap (waitress counts its own channels in it), and no more
        wait_until(lambda: _sockets_of(open_ui.pid) >= CONNECTIONS - 5, 30, "the server to accept its cap", [])
        time.sleep(0.5)                                          # room to overshoot, if it did
        assert _sockets_of(open_ui.pid) <= CONNECTIONS + 1      # + its listening socket
        assert _threads_of(open_ui.pid) <= max(threads_before, THREADS + 2)   # no thread per connection

        # idle half-open requests are closed after the timeout, so they cannot hold the server
        def closed_by_server(s: socket.socket) -> bool:
            s.settimeout(0.05)
            try:
                return s.recv(1) == b""
            except socket.timeout:
                return False
            except OSError:
                return True
        wait_until(lambda: all(closed_by_server(s) for s in lorises[:CONNECTIONS]), 60,
                   "the server to time out the first half-open requests", [])
        assert open_ui.request().status == 200
    finally:
        for s in lorises:
            s.close()


def test_the_token_redirect_stays_on_this_site(token_ui):
    for path, location in (("/%09/evil.example", "/%09/evil.example"), ("//evil.example", "/evil.example"),
                           ("/%5C%5Cevil.example", "/%5C%5Cevil.example"), ("/%0A/evil.example", "/%0A/evil.example"),
                           ("/run/r-1", "/run/r-1")):
        r = token_ui.request("GET", f"{path}?token={TOKEN}&x=1")
        assert r.status == 303, path
        assert r.headers["location"] == f"{location}?x=1", path
        seen = r.headers["location"].replace("\t", "").replace("\n", "").replace("\r", "")   # as a browser reads it
        assert seen.startswith("/") and seen[1:2] not in ("/", "\\"), path
    cookie = r.headers["set-cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and TOKEN not in cookie       # MS_UI_SECURE_COOKIE=1
    session = cookie.split(";", 1)[0]
    assert token_ui.request("GET", "/run/r-1", {"Cookie": session}).status == 200


def test_failed_logins_are_limited_per_client(proxied_ui):
    def get(client: str, auth: str) -> int:
        return proxied_ui.request("GET", "/_dash-layout", {"Authorization": auth, "X-Forwarded-For": client}).status
    import base64
    wrong_basic = "Basic " + base64.b64encode(b"ops:guess").decode()
    right_basic = "Basic " + base64.b64encode(b"ops:right-password").decode()
    statuses = [get("203.0.113.7", f"Bearer guess-{i}" if i % 2 else wrong_basic) for i in range(10)]
    assert statuses == [401] * 10
    r = proxied_ui.request("GET", "/_dash-layout",
                           {"Authorization": "Bearer guess-x", "X-Forwarded-For": "203.0.113.7"})
    assert r.status == 429 and int(r.headers["retry-after"]) > 0 and b"too many failed logins" in r.body
    assert get("203.0.113.7", f"Bearer {TOKEN}") == 429          # the right one too: guessing has stopped
    assert get("203.0.113.7", right_basic) == 429
    assert proxied_ui.request("GET", f"/?token={TOKEN}", {"X-Forwarded-For": "203.0.113.7"}).status == 429
    assert get("198.51.100.9", f"Bearer {TOKEN}") == 200        # another client is not locked out
    assert get("198.51.100.9", right_basic) == 200


def test_the_cookie_is_secure_when_a_trusted_proxy_says_https(proxied_ui):
    r = proxied_ui.request("GET", f"/?token={TOKEN}", {"X-Forwarded-Proto": "https"})
    assert r.status == 303 and "Secure" in r.headers["set-cookie"]
    r = proxied_ui.request("GET", f"/?token={TOKEN}", {"X-Forwarded-Proto": "http"})
    assert r.status == 303 and "Secure" not in r.headers["set-cookie"]

"""Checks on every request below the credentials: the Host it names, the shape of Dash
callbacks, and response headers that keep the dashboard out of other sites' frames.

- **Host allow-list** (DNS rebinding): a page on `evil.example` whose name is made to
  resolve to 127.0.0.1 reaches the dashboard as its own origin, so Origin checks pass;
  only the Host header still names `evil.example`. A request whose Host is not the bound
  address, `localhost`, `127.0.0.1`, `[::1]` or a name of `MS_UI_ALLOWED_HOSTS` gets a 400
  before anything else runs.
- **Framing and sniffing**: `X-Frame-Options: DENY`, a CSP with `frame-ancestors 'none'`
  (no clickjacking of the alert buttons), `X-Content-Type-Options: nosniff`, and
  `Referrer-Policy: same-origin` (a `?token=` URL never leaks to another site).
- **Callback shape**: a Dash callback request that is not a JSON object naming a known
  callback with lists of inputs and state of the declared lengths gets a 400 with the
  reason (Dash itself answers such a request with a 500).
- **Callback inputs**: any exception raised while a callback handles its inputs (a crafted
  request giving a dropdown a number, a store a string) is answered with a 400, and logged
  as one line without traceback, at most one line per `REJECT_LOG_S` with the count of
  the others, so crafted requests can neither fill the log nor read a traceback.

    install(server, allowed_hosts("127.0.0.1", ["metrics.example"]))   # before the credentials
    install_callback_check(server, lambda: app.callback_map)           # after Dash is mounted
"""
from __future__ import annotations

import logging
import re
import socket
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, InternalServerError

log = logging.getLogger(__name__)

DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("", "0.0.0.0", "::")
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
CALLBACK_PATH = "/_dash-update-component"
REJECT_LOG_S = 10.0                  # at most one log line per this many seconds for rejected callbacks
_HOST = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9_.\-]+))(?::\d{1,5})?")


def _normal(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def host_name(header: str | None) -> str | None:
    """Return the host name of a Host header (`name`, `name:port`, `[v6]:port`), lower case; None if malformed."""
    m = _HOST.fullmatch(header or "")
    return _normal(m.group(1) or m.group(2)) if m else None


def allowed_hosts(bind_host: str | None, extra: Iterable[str] = ()) -> frozenset[str]:
    """Return the host names the dashboard answers to: loopback names, the bound address, `extra`.

    A wildcard bind (0.0.0.0, ::) adds this machine's host name; LAN addresses and a
    proxy's name must be listed in `MS_UI_ALLOWED_HOSTS`.
    """
    names = {_normal(h) for h in (*DEFAULT_HOSTS, *extra) if _normal(h)}
    if bind_host is not None:
        names.add(_normal(socket.gethostname()) if bind_host in WILDCARD_BINDS else _normal(bind_host))
    return frozenset(names)


def _id_ok(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, dict) and all(isinstance(k, str) for k in value))


def _prop_ok(item: Any) -> bool:
    """One input/state/output entry: {"id": str|dict, "property": str}, or a list of them (wildcards)."""
    if isinstance(item, list):
        return all(_prop_ok(i) and not isinstance(i, list) for i in item)
    return isinstance(item, dict) and _id_ok(item.get("id")) and isinstance(item.get("property"), str)


def callback_problem(body: Any, callbacks: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Return why `body` is not a well-formed request for one of `callbacks`, or None (pure)."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in callbacks:
        return "'output' names no callback of this dashboard"
    outputs = body.get("outputs")
    if not (isinstance(outputs, dict) and _prop_ok(outputs)) and \
            not (isinstance(outputs, list) and all(_prop_ok(o) for o in outputs)):
        return "'outputs' must be an output or a list of them"
    declared = callbacks[output]
    for key, want in (("inputs", "inputs"), ("state", "state")):
        given = body.get(key, [])
        if not isinstance(given, list) or not all(_prop_ok(i) for i in given):
            return f"{key!r} must be a list of {{id, property}} entries"
        if len(given) != len(declared.get(want, [])):
            return f"{key!r} has {len(given)} entries; this callback takes {len(declared.get(want, []))}"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        return "'changedPropIds' must be a list of strings"
    return None


def _plain(message: str, status: int) -> Response:
    return Response(message + "\n", status=status, mimetype="text/plain")


def install(server: Flask, hosts: frozenset[str]) -> None:
    """Refuse requests naming a foreign Host; add the security headers to every response.

    Call before anything else registers a `before_request` hook: this one must run first.
    """
    @server.before_request
    def _check_host():
        if host_name(request.headers.get("Host")) not in hosts:
            shown = (request.headers.get("Host") or "")[:80]
            return _plain(f"bad request: Host {shown!r} is not a name this dashboard answers to "
                          "(add it to MS_UI_ALLOWED_HOSTS)", 400)
        return None

    @server.after_request
    def _security_headers(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def install_callback_check(server: Flask, callbacks: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
    """Answer a malformed Dash callback request with a 400 and its reason.

    Call after Dash is mounted (its own set-up hook fills the callback map) and after the
    credentials check, so a stranger learns nothing about the callbacks.
    """
    @server.before_request
    def _check_callback():
        if request.method == "POST" and request.path == CALLBACK_PATH:
            problem = callback_problem(request.get_json(silent=True), callbacks())
            if problem is not None:
                return _plain(f"bad callback request: {problem}", 400)
        return None


class RejectLog:
    """Log rejected callback requests as one line per `every_s`, counting those not logged."""

    def __init__(self, every_s: float = REJECT_LOG_S, clock: Callable[[], float] = time.monotonic):
        self.every_s, self._clock = every_s, clock
        self._last = float("-inf")
        self._quiet = 0
        self._lock = threading.Lock()

    def rejected(self, output: str, error: BaseException) -> None:
        """Note one rejected request; log it unless a line went out within `every_s`."""
        with self._lock:
            now = self._clock()
            if now - self._last < self.every_s:
                self._quiet += 1
                return
            quiet, self._quiet, self._last = self._quiet, 0, now
        log.warning("callback %s refused its inputs (%s)%s", output[:120], type(error).__name__,
                    f"; {quiet} more refused since the last line" if quiet else "")


def install_callback_errors(server: Flask, reject_log: RejectLog | None = None) -> None:
    """Answer an exception raised while a callback handles its inputs with a 400, logged rate-limited.

    Other paths keep Flask's behaviour (the traceback logged, a 500).
    """
    reject_log = reject_log or RejectLog()

    @server.errorhandler(Exception)
    def _callback_error(error: Exception):
        if isinstance(error, HTTPException):
            return error
        if request.path != CALLBACK_PATH:
            server.log_exception((type(error), error, error.__traceback__))
            return InternalServerError()
        body = request.get_json(silent=True)
        reject_log.rejected(str(body.get("output", "")) if isinstance(body, dict) else "", error)
        return _plain("bad callback request: the callback could not use these inputs", 400)

"""Who may use the dashboard: loopback-only by default, credentials for anything wider.

- Listening on a loopback address needs nothing. Listening on any other address
  (`--host 0.0.0.0`, a LAN address) is refused unless credentials are configured
  (`check_bind`), from the environment only:
  `MS_UI_TOKEN` (a shared secret), or `MS_UI_USER` + `MS_UI_PASSWORD` (HTTP basic auth).
- Once configured they are required for every request: pages, Dash's `/_dash-*`
  endpoints and assets, exports. A token comes as `Authorization: Bearer <token>` or, once,
  as `?token=<token>`, which is swapped for a signed session cookie and dropped from the URL
  by a redirect; user and password come as HTTP basic auth (the browser asks).
- Every state-changing request (any method but GET/HEAD/OPTIONS; Dash callbacks are POSTs)
  must come from the dashboard's own origin: an `Origin` (or, lacking it, `Referer`) that
  names another site is refused, so a page elsewhere cannot drive a logged-in browser.
- Secrets are never logged or shown: the config's repr redacts them and the request log
  has `token=` values masked. `MS_UI_SECRET_KEY` signs the session cookie (default: random
  per process, so sessions end with it).
- Failed logins are limited per client and in all (`throttle.LoginThrottle`: 10 a minute per
  client, 100 a minute in all, then 429),
  and the redirect that drops `?token=` only ever leads to a path of this dashboard.
- Behind a TLS proxy: `MS_UI_SECURE_COOKIE=1` marks the cookie Secure;
  `MS_UI_PROXY_HOPS=N` trusts `X-Forwarded-For` / `X-Forwarded-Proto` from N proxies
  (client address for the login limit; the cookie is Secure on https requests).

    install(server, AuthConfig.from_env())     # in create_app
    check_bind("0.0.0.0", auth)                 # before serving; ValueError without credentials
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import quote, urlencode, urlsplit

from flask import Flask, Response, redirect, request, session
from flask.sessions import SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix

from collector.settings import prefixed_env
from metrics_ui.throttle import LoginThrottle

TOKEN_PARAM = "token"
MIN_WIDE_TOKEN = 16                      # a token guarding a wide bind: not guessable in any login budget
SESSION_KEY = "ms_ui_auth"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REALM = "Spark streaming monitor"
_TOKEN_IN_TEXT = re.compile(r"(token=)[^&\s\"']+", re.IGNORECASE)


@dataclass(frozen=True)
class AuthConfig:
    """Credentials the dashboard requires (none: loopback use only), and origins it trusts."""
    token: str | None = None
    user: str | None = None
    password: str | None = None
    secret_key: str | None = None
    allowed_origins: tuple[str, ...] = ()     # extra origins allowed to POST (e.g. a proxy's)
    allowed_hosts: tuple[str, ...] = ()       # extra Host names answered (http_guard), e.g. a proxy's
    secure_cookie: bool = False               # mark the session cookie Secure (served over https)
    proxy_hops: int = 0                       # trusted proxies in front: X-Forwarded-For/-Proto

    def __post_init__(self) -> None:
        if (self.user is None) != (self.password is None) or self.user == "" or self.password == "":
            raise ValueError("set both MS_UI_USER and MS_UI_PASSWORD (non-empty), or neither")
        if self.token == "":
            raise ValueError("MS_UI_TOKEN is set but empty")
        if not 0 <= self.proxy_hops <= 5:
            raise ValueError(f"MS_UI_PROXY_HOPS must be 0..5, got {self.proxy_hops}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "AuthConfig":
        """Read `MS_UI_TOKEN`, `_USER`, `_PASSWORD`, `_SECRET_KEY`, `_ALLOWED_ORIGINS`, `_ALLOWED_HOSTS`,
        `_SECURE_COOKIE`, `_PROXY_HOPS` (None: this process's environment)."""
        environ = prefixed_env("MS_UI_", environ)
        def listed(name: str) -> tuple[str, ...]:
            return tuple(o.strip().rstrip("/") for o in environ.get(name, "").split(",") if o.strip())
        hops = environ.get("MS_UI_PROXY_HOPS", "0").strip() or "0"
        if not hops.isdigit():
            raise ValueError(f"MS_UI_PROXY_HOPS must be a number of proxies, got {hops[:20]!r}")
        return cls(environ.get("MS_UI_TOKEN"), environ.get("MS_UI_USER"), environ.get("MS_UI_PASSWORD"),
                   environ.get("MS_UI_SECRET_KEY"), listed("MS_UI_ALLOWED_ORIGINS"), listed("MS_UI_ALLOWED_HOSTS"),
                   environ.get("MS_UI_SECURE_COOKIE", "").strip().lower() in ("1", "true", "yes"), int(hops))

    @property
    def enabled(self) -> bool:
        """Whether any credential is configured."""
        return bool(self.token or self.user)

    def __repr__(self) -> str:
        shown = [f"token={'***' if self.token else None}", f"user={self.user!r}",
                 f"password={'***' if self.password else None}"]
        return (f"AuthConfig({', '.join(shown)}, allowed_origins={self.allowed_origins!r}, "
                f"allowed_hosts={self.allowed_hosts!r}, secure_cookie={self.secure_cookie}, "
                f"proxy_hops={self.proxy_hops})")


def is_loopback(host: str) -> bool:
    """Return whether `host` is a loopback address (or `localhost`)."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: AuthConfig) -> None:
    """Raise ValueError if listening on `host` would expose the dashboard without credentials."""
    if not is_loopback(host) and not auth.enabled:
        raise ValueError(f"refusing to listen on {host!r} without credentials: anyone who can reach it would "
                         "see every run. Set MS_UI_TOKEN (or MS_UI_USER and MS_UI_PASSWORD), or listen on "
                         "127.0.0.1")
    if not is_loopback(host) and auth.token and len(auth.token) < MIN_WIDE_TOKEN:
        raise ValueError(f"refusing to listen on {host!r} with a {len(auth.token)}-character MS_UI_TOKEN: "
                         f"anyone who can reach it could guess it. Use at least {MIN_WIDE_TOKEN} characters "
                         "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(24))'`)")


class _RedactTokens(logging.Filter):
    """Mask `token=` values in log records (werkzeug logs each request line with its query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "token=" in text.lower():
            record.msg, record.args = _TOKEN_IN_TEXT.sub(r"\1***", text), None
        return True


def _same_origin(origin: str, allowed: tuple[str, ...]) -> bool:
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    if parts.netloc.lower() == request.host.lower():
        return True
    return f"{parts.scheme}://{parts.netloc}".lower() in {a.lower() for a in allowed}


def _cross_site(auth: AuthConfig) -> str | None:
    """Return why a state-changing request looks cross-site, or None."""
    origin = request.headers.get("Origin")
    if origin is not None:
        return None if _same_origin(origin, auth.allowed_origins) else "Origin is not this dashboard"
    referer = request.headers.get("Referer")
    if referer is not None:
        return None if _same_origin(referer, auth.allowed_origins) else "Referer is not this dashboard"
    return None                         # not a browser (curl, scripts): credentials still apply


def _fingerprint(auth: AuthConfig, key: str) -> str:
    secret = f"{auth.token or ''}\0{auth.user or ''}\0{auth.password or ''}".encode()
    return hmac.new(key.encode(), secret, hashlib.sha256).hexdigest()[:32]


def _equal(given: str | None, expected: str | None) -> bool:
    return given is not None and expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _basic_ok(auth: AuthConfig) -> bool:
    header = request.headers.get("Authorization", "")
    if not auth.user or not header.lower().startswith("basic "):
        return False
    try:
        user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return False
    return _equal(user, auth.user) & _equal(password, auth.password)


def _bearer_ok(auth: AuthConfig) -> bool:
    header = request.headers.get("Authorization", "")
    return bool(auth.token) and header.lower().startswith("bearer ") and _equal(header[7:].strip(), auth.token)


def _presented_credentials() -> bool:
    """Whether the request tries to log in (a failure then counts against its client)."""
    return "Authorization" in request.headers or TOKEN_PARAM in request.args


def local_path(path: str) -> str:
    """Return `path` as a redirect target on this site: percent-encoded, one leading slash.

    `/%09/evil.example` decodes to a path a browser reads as `//evil.example` (it drops the
    tab), another site; encoded and with leading slashes collapsed it stays a path here.
    """
    return "/" + quote(path, safe="/:@!$&'()*+,;=-._~").lstrip("/")


class _SessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie, Secure when configured or when the request came over https."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config["SESSION_COOKIE_SECURE"] or request.is_secure)


def _denied(auth: AuthConfig) -> Response:
    how = []
    if auth.token:
        how.append("open the dashboard once with ?token=<MS_UI_TOKEN>, or send Authorization: Bearer <token>")
    if auth.user:
        how.append("sign in with the user and password of MS_UI_USER / MS_UI_PASSWORD")
    resp = Response("authentication required: " + "; or ".join(how) + "\n", status=401, mimetype="text/plain")
    if auth.user:
        resp.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
    return resp


def install(server: Flask, auth: AuthConfig) -> None:
    """Guard every request of `server`: cross-site changes refused; credentials required if configured."""
    key = auth.secret_key or secrets.token_hex(32)
    server.config.update(SECRET_KEY=key, SESSION_COOKIE_NAME="ms_ui_session", SESSION_COOKIE_HTTPONLY=True,
                         SESSION_COOKIE_SAMESITE="Lax", SESSION_COOKIE_SECURE=auth.secure_cookie)
    server.session_interface = _SessionInterface()
    if auth.proxy_hops:
        server.wsgi_app = ProxyFix(server.wsgi_app, x_for=auth.proxy_hops, x_proto=auth.proxy_hops)
    throttle = LoginThrottle()
    request_log = logging.getLogger("werkzeug")
    if not any(isinstance(f, _RedactTokens) for f in request_log.filters):
        request_log.addFilter(_RedactTokens())
    expected = _fingerprint(auth, key)

    @server.before_request
    def _guard():
        if request.method not in SAFE_METHODS:
            why = _cross_site(auth)
            if why is not None:
                return Response(f"cross-site request refused: {why}\n", status=403, mimetype="text/plain")
        if not auth.enabled:
            return None
        if hmac.compare_digest(str(session.get(SESSION_KEY, "")), expected):
            return None
        client = request.remote_addr or "?"
        wait = throttle.retry_after(client)
        if wait > 0:
            return Response(f"too many failed logins (from {client} or in all); try again in {wait:.0f} s\n", status=429,
                            mimetype="text/plain", headers={"Retry-After": str(int(wait) + 1)})
        if _bearer_ok(auth) or _basic_ok(auth):
            return None
        given = request.args.get(TOKEN_PARAM)
        if auth.token and request.method in SAFE_METHODS and _equal(given, auth.token):
            session[SESSION_KEY] = expected
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != TOKEN_PARAM]
            return redirect(local_path(request.path) + ("?" + urlencode(rest) if rest else ""), code=303)
        if _presented_credentials():
            throttle.failed(client)
        return _denied(auth)

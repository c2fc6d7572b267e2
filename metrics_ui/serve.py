"""Serve the dashboard with waitress, a production WSGI server, with its limits set.

Werkzeug's development server gives every connection a thread and never times one out:
1,000 half-open requests held 1,000 threads. Waitress reads requests on one event loop and
hands only complete ones to a fixed pool of `threads`; it accepts at most
`connection_limit` connections, closes one idle for `timeout_s`, and buffers at most
`MAX_BODY_BYTES` of a request body; a request not read whole within the timeout of its
first byte being seen is closed too (trickled headers). Settings: `MS_UI_THREADS`,
`MS_UI_CONNECTION_LIMIT`, `MS_UI_TIMEOUT_S`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping

from waitress import create_server

from collector.settings import prefixed_env

log = logging.getLogger(__name__)

SERVER_IDENT = "marketspread-ui"           # the Server header
MAX_BODY_BYTES = 8 << 20                   # Dash callbacks are a few kB
MAX_HEADER_BYTES = 64 << 10


@dataclass(frozen=True)
class ServeConfig:
    """Limits of the dashboard's server."""
    threads: int = 8                       # requests handled at once
    connection_limit: int = 500            # open connections (cheap: no thread each); more wait to be accepted
    timeout_s: float = 10.0                # an idle (or half-sent) connection is closed after this

    def __post_init__(self) -> None:
        if not 1 <= self.threads <= 256 or not 1 <= self.connection_limit <= 10_000 or \
                not 1 <= self.timeout_s <= 3600:
            raise ValueError("MS_UI_THREADS must be 1..256, MS_UI_CONNECTION_LIMIT 1..10000, "
                             "MS_UI_TIMEOUT_S 1..3600")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ServeConfig":
        """Read `MS_UI_THREADS`, `MS_UI_CONNECTION_LIMIT`, `MS_UI_TIMEOUT_S` (defaults otherwise; None: this process's)."""
        environ = prefixed_env("MS_UI_", environ)
        values: dict[str, float] = {}
        for name, key, kind in (("MS_UI_THREADS", "threads", int), ("MS_UI_CONNECTION_LIMIT", "connection_limit", int),
                                ("MS_UI_TIMEOUT_S", "timeout_s", float)):
            text = environ.get(name, "").strip()
            if text:
                try:
                    values[key] = kind(text)
                except ValueError:
                    raise ValueError(f"{name} must be a number, got {text[:20]!r}") from None
        return cls(**values)


def serve(wsgi_app: Callable, host: str, port: int, cfg: ServeConfig, keep_proxy_headers: bool = False,
          on_ready: Callable[[str, int], None] | None = None) -> None:
    """Serve `wsgi_app` on host:port until interrupted; `on_ready(address, port)` per socket listening.

    `X-Forwarded-*` headers are dropped unless `keep_proxy_headers` (the app trusts a proxy).
    """
    server = create_server(
        wsgi_app, host=host, port=port, threads=cfg.threads, connection_limit=cfg.connection_limit,
        channel_timeout=cfg.timeout_s, cleanup_interval=max(1, min(30, int(cfg.timeout_s / 2))),
        max_request_body_size=MAX_BODY_BYTES, max_request_header_size=MAX_HEADER_BYTES,
        ident=SERVER_IDENT, expose_tracebacks=False, asyncore_use_poll=True,
        clear_untrusted_proxy_headers=not keep_proxy_headers)
    install_request_deadline(server, cfg.timeout_s)
    # `localhost` may bind two sockets (127.0.0.1 and ::1): waitress then lists each
    listening = getattr(server, "effective_listen", None) or [(server.effective_host, server.effective_port)]
    if on_ready is not None:
        for address, bound_port in listening:
            on_ready(str(address), int(bound_port))
    try:
        server.run()
    finally:
        server.close()


def install_request_deadline(server, deadline_s: float) -> None:
    """Close a connection whose request is not read whole `deadline_s` after it was first seen.

    Waitress's timeout counts silence only, so a client sending a byte of headers every few
    seconds keeps a connection slot for good; this gives each request a total deadline,
    checked at waitress's clean-up ticks (every `cleanup_interval`).
    """
    # one server, or (`localhost`: two sockets) a MultiSocketServer whose map holds one per socket
    servers = [server] if hasattr(server, "maintenance") else list(getattr(server, "map", {}).values())
    for srv in (s for s in servers if hasattr(s, "maintenance")):
        original = srv.maintenance

        def maintenance(now: float, srv=srv, original=original) -> None:
            original(now)
            for channel in list(srv.active_channels.values()):
                request = channel.request         # the request being read, None between requests
                if request is None or request.completed:
                    continue
                started = request.__dict__.setdefault("_ms_first_seen", now)
                if now - started >= deadline_s:
                    channel.will_close = True
        srv.maintenance = maintenance

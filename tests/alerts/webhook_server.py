"""A real local HTTP server that receives webhook POSTs (for the alert tests)."""
from __future__ import annotations

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookReceiver:
    """Serve on a free loopback port; each JSON POST lands in `received`.

    `fail_first` answers that many requests with HTTP 500 first (to exercise retries);
    `redirect_to` answers every request with a 302 to that URL instead. `hosts` keeps
    the Host header of every request.
    """

    def __init__(self, fail_first: int = 0, redirect_to: str | None = None):
        self.received: queue.Queue[dict] = queue.Queue()
        self.requests = 0
        self.hosts: list[str] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests += 1
                receiver.hosts.append(self.headers.get("Host") or "")
                if redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.end_headers()
                    return
                if receiver.requests <= receiver.fail_first:
                    self.send_response(500)
                    self.end_headers()
                    return
                receiver.received.put({"content_type": self.headers.get("Content-Type"), **json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next(self, timeout: float = 60.0) -> dict:
        """Return the next payload received (raise queue.Empty after `timeout`)."""
        return self.received.get(timeout=timeout)

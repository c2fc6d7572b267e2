"""Webhook notifications: a JSON POST per FIRING and RESOLVED, retried with backoff, never blocking.

`WebhookNotifier.submit()` only puts the message on a bounded queue (a full queue drops
it and records the drop as a failed attempt), so the evaluator never waits on a slow or
dead receiver. One thread sends: new messages at once, failed ones again after 1, 2, 4,
8 ... s (up to `max_attempts`), each attempt reported to `on_attempt` (the evaluator
writes it to InfluxDB, where the UI shows failures). A 2xx answer is a delivery.

Each attempt resolves the host once, checks every address against the `WebhookPolicy`
(alerts.webhook_target: no loopback, private, link-local ... unless allowed) and connects
to a checked address; a refused target is recorded and not retried. What is recorded
says only the kind of failure ("refused: loopback address", "connection failed",
"HTTP 500"): the UI shows it to every user, so no address, port or exception text.

Payload (one alert per POST):
    {"rule": "e2e-p99", "state": "FIRING", "previous": "PENDING", "condition": "p99 > 5ms",
     "value": 12000000.0, "value_text": "12 ms", "threshold": 5000000.0, "scope": {...},
     "window": "1m", "for": "30s", "at": "2024-05-01T12:00:00.000000000Z", "summary": "..."}
"""
from __future__ import annotations

import base64
import heapq
import http.client
import itertools
import json
import logging
import queue
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from collector.query.ranges import format_time

from alerts.evaluate import Transition
from alerts.history import NotificationRecord
from alerts.rules import Rule, format_duration, redact_url
from alerts.webhook_target import Resolver, WebhookPolicy, WebhookRefused, resolve_target, system_resolve

log = logging.getLogger(__name__)

MAX_QUEUE = 1000
MAX_ATTEMPTS = 6
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
TIMEOUT_S = 5.0
MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class Notification:
    """One message for one webhook: the rule's name, the state it went to, the JSON body."""
    rule: str
    state: str
    url: str
    payload: Mapping[str, Any]


def build_payload(rule: Rule, tr: Transition) -> dict[str, Any]:
    """Return the JSON body announcing a rule's transition."""
    cond = rule.condition
    verb = "fires" if tr.state == "FIRING" else "is resolved"
    return {"rule": rule.name, "state": tr.state, "previous": tr.previous, "condition": cond.text,
            "value": tr.value, "value_text": cond.format_value(tr.value), "threshold": cond.threshold,
            "scope": {"job": rule.job, "pipeline": rule.pipeline, "step": rule.step, "worker": rule.worker,
                      **{k: getattr(rule, k) for k in rule.FIGURE_SCOPE if getattr(rule, k) is not None}},
            "window": format_duration(rule.window_s), "for": format_duration(rule.for_s),
            "at": format_time(tr.at_ns),
            "summary": f"{rule.name} {verb}: {rule.scope_text()} {cond.metric} = {cond.format_value(tr.value)} "
                       f"(condition {cond.text} over {format_duration(rule.window_s)})"}


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to one checked address; the Host header still names the URL's host."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to one checked address; SNI and certificate checks use the URL's host name."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post_json(url: str, payload: Mapping[str, Any] | Sequence[Mapping[str, Any]], timeout: float = TIMEOUT_S, *,
              policy: WebhookPolicy = WebhookPolicy(), resolve: Resolver = system_resolve) -> int:
    """POST `payload` as JSON to a checked address of `url`; return the HTTP status.

    The host is resolved once and every address checked (`resolve_target`); the
    connection goes to a checked address, never to the name again. Redirects are not
    followed: a 3xx is returned like any other status. Raises WebhookRefused, OSError
    (DNS, connect, TLS, timeout) or http.client.HTTPException.
    """
    target = resolve_target(url, policy, resolve)
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Content-Type": "application/json", "User-Agent": "marketspread-alerts/1"}
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(user_pass).decode()
    body = json.dumps(payload).encode()
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    error: OSError | None = None
    for address in target.addresses:
        conn = kind(target.host, target.port, address, timeout)
        try:
            try:
                conn.connect()
            except OSError as e:               # this address is down: try the next (nothing was sent)
                error = e
                continue
            conn.request("POST", path, body, headers)
            resp = conn.getresponse()
            resp.read(65536)
            return resp.status
        finally:
            conn.close()
    raise error if error is not None else OSError("no address to connect to")


def backoff_s(attempt: int, first_s: float = FIRST_BACKOFF_S, max_s: float = MAX_BACKOFF_S) -> float:
    """Return the wait before retry `attempt + 1`: first_s, then doubling, at most max_s."""
    return min(max_s, first_s * 2 ** (attempt - 1))


def describe_failure(e: BaseException) -> str:
    """Return what a user may see of a failed attempt: its kind, never addresses or ports."""
    if isinstance(e, WebhookRefused):
        return str(e)
    if isinstance(e, socket.gaierror):
        return "name not resolved"
    if isinstance(e, ssl.SSLCertVerificationError):
        return "TLS certificate not accepted"
    if isinstance(e, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(e, http.client.HTTPException):
        return "bad HTTP response"
    if isinstance(e, OSError):
        return "connection failed"
    return "bad webhook URL"


class WebhookNotifier:
    """Send notifications on a background thread; `submit` never blocks."""

    def __init__(self, on_attempt: Callable[[NotificationRecord], None] | None = None, *,
                 max_queue: int = MAX_QUEUE, max_attempts: int = MAX_ATTEMPTS,
                 first_backoff_s: float = FIRST_BACKOFF_S, timeout_s: float = TIMEOUT_S,
                 policy: WebhookPolicy = WebhookPolicy(), resolve: Resolver = system_resolve,
                 send: Callable[[str, Mapping[str, Any], float], int] | None = None):
        self.on_attempt = on_attempt or (lambda _r: None)
        self.max_attempts = max_attempts
        self.first_backoff_s = first_backoff_s
        self.timeout_s = timeout_s
        self._send = send or partial(post_json, policy=policy, resolve=resolve)
        self._queue: queue.Queue[Notification] = queue.Queue(maxsize=max_queue)
        self._retry: list[tuple[float, int, int, Notification]] = []     # (due, seq, attempt, n)
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alert-webhooks", daemon=True)
        self.sent = self.failed = self.dropped = 0

    def start(self) -> "WebhookNotifier":
        self._thread.start()
        return self

    def submit(self, n: Notification) -> bool:
        """Queue a notification; return False (and record a failure) when the queue is full."""
        try:
            self._queue.put_nowait(n)
            return True
        except queue.Full:
            self.dropped += 1
            self._report(n, 0, False, None, "dropped: notification queue full")
            return False

    def pending(self) -> int:
        """Return the notifications queued or waiting for a retry."""
        return self._queue.qsize() + len(self._retry)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after sending what is queued now (retries still waiting are given up)."""
        self._stop.set()
        self._thread.join(timeout)

    def _report(self, n: Notification, attempt: int, ok: bool, status: int | None, error: str) -> None:
        try:
            self.on_attempt(NotificationRecord(n.rule, time.time_ns(), n.state, attempt, ok, status,
                                               error[:MAX_ERROR_CHARS], redact_url(n.url)))
        except Exception:
            log.exception("recording a webhook attempt failed")

    def _attempt(self, n: Notification, attempt: int) -> None:
        refused = False
        try:
            status = self._send(n.url, n.payload, self.timeout_s)
            ok = 200 <= status < 300
            error = "" if ok else f"HTTP {status}" + (" (redirects are not followed)" if 300 <= status < 400 else "")
        except (OSError, ValueError, http.client.HTTPException) as e:   # refused, DNS, connect, TLS, bad URL
            # the record is shown in the UI: its kind only; the detail goes to the operator's log
            status, ok, error = None, False, describe_failure(e)
            refused = isinstance(e, WebhookRefused)            # the policy will not change its mind: no retry
            log.warning("webhook %s %s -> %s: %s (%s: %s)", n.rule, n.state, redact_url(n.url), error,
                        type(e).__name__, e)
        self._report(n, attempt, ok, status, error)
        if ok:
            self.sent += 1
            log.info("webhook %s %s -> %s: delivered (attempt %d)", n.rule, n.state, redact_url(n.url), attempt)
            return
        if attempt < self.max_attempts and not refused and not self._stop.is_set():
            delay = backoff_s(attempt, self.first_backoff_s)
            heapq.heappush(self._retry, (time.monotonic() + delay, next(self._seq), attempt + 1, n))
            log.warning("webhook %s %s -> %s failed (%s); retry %d in %.1f s", n.rule, n.state,
                        redact_url(n.url), error, attempt + 1, delay)
        else:
            self.failed += 1
            log.error("webhook %s %s -> %s failed %d times (%s); given up", n.rule, n.state,
                      redact_url(n.url), attempt, error)

    def _run(self) -> None:
        while True:
            if self._retry and self._retry[0][0] <= time.monotonic():
                _, _, attempt, n = heapq.heappop(self._retry)
                self._attempt(n, attempt)
                continue
            wait = max(0.0, self._retry[0][0] - time.monotonic()) if self._retry else 0.2
            try:
                n = self._queue.get(timeout=min(wait, 0.2))
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            self._attempt(n, 1)

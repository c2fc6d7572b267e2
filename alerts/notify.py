"""Webhook notifications: a JSON POST per FIRING and RESOLVED, retried with backoff, never blocking.

`WebhookNotifier.submit()` only puts the message on a bounded queue (a full queue drops
it and records the drop as a failed attempt), so the evaluator never waits on a slow or
dead receiver. One thread sends: new messages at once, failed ones again after 1, 2, 4,
8 ... s (up to `max_attempts`), each attempt reported to `on_attempt` (the evaluator
writes it to InfluxDB, where the UI shows failures). A 2xx answer is a delivery.

Payload (one alert per POST):
    {"rule": "e2e-p99", "state": "FIRING", "previous": "PENDING", "condition": "p99 > 5ms",
     "value": 12000000.0, "value_text": "12 ms", "threshold": 5000000.0, "scope": {...},
     "window": "1m", "for": "30s", "at": "2024-05-01T12:00:00.000000000Z", "summary": "..."}
"""
from __future__ import annotations

import heapq
import itertools
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .evaluate import Transition
from .history import NotificationRecord
from .rules import Rule, format_duration, redact_url

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
    from metrics_ui.ranges import format_time
    cond = rule.condition
    verb = "fires" if tr.state == "FIRING" else "is resolved"
    return {"rule": rule.name, "state": tr.state, "previous": tr.previous, "condition": cond.text,
            "value": tr.value, "value_text": cond.format_value(tr.value), "threshold": cond.threshold,
            "scope": {"job": rule.job, "pipeline": rule.pipeline, "step": rule.step, "worker": rule.worker},
            "window": format_duration(rule.window_s), "for": format_duration(rule.for_s),
            "at": format_time(tr.at_ns),
            "summary": f"{rule.name} {verb}: {rule.scope_text()} {cond.metric} = {cond.format_value(tr.value)} "
                       f"(condition {cond.text} over {format_duration(rule.window_s)})"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook answers; it does not send us elsewhere (a 3xx is a failed attempt)."""

    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def post_json(url: str, payload: Mapping[str, Any], timeout: float = TIMEOUT_S) -> int:
    """POST `payload` as JSON; return the HTTP status (raise OSError / HTTPError on failure)."""
    body = json.dumps(payload).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "marketspread-alerts/1"})
    with _OPENER.open(req, timeout=timeout) as resp:
        resp.read(65536)
        return resp.status


class WebhookNotifier:
    """Send notifications on a background thread; `submit` never blocks."""

    def __init__(self, on_attempt: Callable[[NotificationRecord], None] | None = None, *,
                 max_queue: int = MAX_QUEUE, max_attempts: int = MAX_ATTEMPTS,
                 first_backoff_s: float = FIRST_BACKOFF_S, timeout_s: float = TIMEOUT_S,
                 send: Callable[[str, Mapping[str, Any], float], int] = post_json):
        self.on_attempt = on_attempt or (lambda _r: None)
        self.max_attempts = max_attempts
        self.first_backoff_s = first_backoff_s
        self.timeout_s = timeout_s
        self._send = send
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
        try:
            status = self._send(n.url, n.payload, self.timeout_s)
            ok, error = 200 <= status < 300, "" if 200 <= status < 300 else f"HTTP {status}"
        except urllib.error.HTTPError as e:
            status, ok, error = e.code, False, f"HTTP {e.code} {e.reason}"
        except (OSError, ValueError) as e:            # refused, timeout, DNS, TLS, bad URL
            cause = e.reason if isinstance(getattr(e, "reason", None), BaseException) else e
            status, ok, error = None, False, f"{type(cause).__name__}: {cause}"
        self._report(n, attempt, ok, status, error)
        if ok:
            self.sent += 1
            log.info("webhook %s %s -> %s: delivered (attempt %d)", n.rule, n.state, redact_url(n.url), attempt)
            return
        if attempt < self.max_attempts and not self._stop.is_set():
            delay = min(MAX_BACKOFF_S, self.first_backoff_s * 2 ** (attempt - 1))
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

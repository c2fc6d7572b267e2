"""Webhook delivery over real loopback HTTP: retries with backoff, failures recorded, never blocking."""
from __future__ import annotations

import threading
import time

from collector.influx.server import free_port
from alerts.notify import Notification, WebhookNotifier
from alerts.webhook_target import WebhookPolicy

from .webhook_server import WebhookReceiver


LOOPBACK = WebhookPolicy.parse("127.0.0.1")        # the local receiver is an allowed internal target


def _recorder():
    attempts, lock = [], threading.Lock()

    def on_attempt(rec):
        with lock:
            attempts.append(rec)
    return attempts, on_attempt


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred():
        time.sleep(0.02)
    return pred()


def test_failed_posts_are_retried_with_backoff_until_delivered():
    attempts, on_attempt = _recorder()
    with WebhookReceiver(fail_first=2) as hook:
        n = WebhookNotifier(on_attempt, first_backoff_s=0.1, max_attempts=5, policy=LOOPBACK).start()
        try:
            assert n.submit(Notification("r1", "FIRING", hook.url, {"rule": "r1", "state": "FIRING"}))
            assert hook.next(timeout=10)["rule"] == "r1"
            assert _wait(lambda: len(attempts) == 3)
        finally:
            n.stop()
    assert [(a.attempt, a.ok, a.status) for a in attempts] == [(1, False, 500), (2, False, 500), (3, True, 204)]
    assert attempts[0].error == "HTTP 500"
    gaps = [(b.at_ns - a.at_ns) / 1e9 for a, b in zip(attempts, attempts[1:])]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19                      # 0.1 s, then 0.2 s
    assert (n.sent, n.failed) == (1, 0)


def test_an_unreachable_webhook_is_given_up_and_recorded_and_submit_never_blocks():
    attempts, on_attempt = _recorder()
    url = f"http://127.0.0.1:{free_port()}/hook"                    # nothing listens there
    n = WebhookNotifier(on_attempt, first_backoff_s=0.05, max_attempts=3, max_queue=2, policy=LOOPBACK).start()
    try:
        t0 = time.monotonic()
        accepted = [n.submit(Notification(f"r{i}", "RESOLVED", url, {"i": i})) for i in range(50)]
        assert time.monotonic() - t0 < 1.0                            # a full queue drops, it does not wait
        assert accepted[:2] == [True, True] and not all(accepted)
        assert _wait(lambda: n.pending() == 0 and n.failed == sum(accepted))
    finally:
        n.stop()
    tried = [a for a in attempts if a.attempt > 0]
    assert len(tried) == 3 * sum(accepted) and not any(a.ok for a in tried)
    # what the UI shows says what failed, not where: no address, port or exception text
    assert all(a.error == "connection failed" and a.status is None for a in tried)
    dropped = [a for a in attempts if a.attempt == 0]
    assert len(dropped) == n.dropped == 50 - sum(accepted)
    assert all(a.error == "dropped: notification queue full" for a in dropped)

"""Webhook targets that write 127.0.0.1 (or another internal IPv4 address) in an IPv6 form are refused.

Real sockets: the system resolver reads the literal, the notifier tries to deliver to a
receiver listening on loopback, and the attempt is recorded as refused, never sent.
"""
from __future__ import annotations

import ipaddress
import threading
import time

import pytest

from alerts.notify import Notification, WebhookNotifier
from alerts.webhook_target import WebhookPolicy, WebhookRefused, address_class, check_webhook_target
from tests.alerts.webhook_server import WebhookReceiver

FORMS = [
    ("::127.0.0.1", "loopback"),               # IPv4-compatible (deprecated, still parsed)
    ("::ffff:0:7f00:1", "loopback"),           # IPv4-translated (SIIT)
    ("64:ff9b:1::7f00:1", "loopback"),         # local-use NAT64 prefix (RFC 8215)
    ("::a9fe:a9fe", "link-local"),             # 169.254.169.254, compatible form
    ("::ffff:0:a00:1", "private"),             # 10.0.0.1, translated form
    ("64:ff9b:1::c0a8:101", "private"),        # 192.168.1.1 behind local-use NAT64
]


@pytest.mark.parametrize("address, kind", FORMS)
def test_ipv6_forms_are_classified_by_their_embedded_ipv4_address(address, kind):
    assert address_class(ipaddress.ip_address(address)) == kind
    with pytest.raises(WebhookRefused, match=f"resolves to an? {kind} address: refused"):
        check_webhook_target(f"http://[{address}]:80/hook", WebhookPolicy())       # as a rule is saved


def test_a_rule_firing_at_an_ipv6_form_of_loopback_sends_nothing():
    with WebhookReceiver() as hook:
        attempts, done = [], threading.Event()
        n = WebhookNotifier(lambda a: (attempts.append(a), len(attempts) == 3 and done.set()),
                            first_backoff_s=0.05, max_attempts=1).start()
        try:
            for address, _ in FORMS[:3]:
                n.submit(Notification("r", "FIRING", f"http://[{address}]:{hook.port}/hook", {"rule": "r"}))
            assert done.wait(20)
            time.sleep(0.3)
        finally:
            n.stop()
        assert hook.requests == 0
    assert [a.error for a in attempts] == ["refused: loopback address"] * 3

"""A connection's first bytes (pure): fixish, another protocol, or not yet known; the connection summary."""
from __future__ import annotations

from engine.ingress.connlog import ConnectionSummary
from engine.ingress.foreign import UNDECIDED, foreign_protocol
from engine.ingress.stats import IngressCounters
from engine.wire.fixish import Nbbo, Order, encode_nbbo, encode_order


def test_http_and_tls_starts_are_foreign_and_every_fixish_frame_is_not():
    assert foreign_protocol(b"POST /orders HTTP/1.1\r\n") == "an HTTP request"
    assert foreign_protocol(b"OPTIONS * HTTP/1.1") == "an HTTP request"
    assert foreign_protocol(b"\x16\x03\x01\x02\x00") == "a TLS handshake"
    assert foreign_protocol(b"PO") == foreign_protocol(b"CONNEC") == foreign_protocol(b"\x16") == UNDECIDED
    assert foreign_protocol(b"POSTX") is None and foreign_protocol(b"garbage") is None
    for frame in (encode_order(Order(1, 1, b"ORDER1", b"AAPL", 1.0, 2.0, b"0" * 21)),
                  encode_nbbo(Nbbo(b"AAPL", b"0" * 21, 1.0, 2.0))):
        assert all(foreign_protocol(frame[:n]) is None for n in range(1, len(frame) + 1))


def test_the_summary_says_what_changed_at_most_once_a_period_and_nothing_when_nothing_did():
    c = IngressCounters(("nbbo", "orders"))
    summary = ConnectionSummary(every=60)

    def line(now):
        return summary.line(c.snapshot(0, 0, False, 0.0, {}, False, None), now) if summary.due(now) else None
    assert line(0.0) is None                       # nothing yet
    c.connections_total["orders"] += 2_000
    c.connections_foreign["orders"] += 500
    assert line(1.0) == "ingress connections: 2,000 opened, 500 closed as HTTP or TLS; 0 open"
    c.connections_total["orders"] += 1
    assert line(30.0) is None                      # within the period
    assert line(61.0) == "ingress connections in the last 60 s: 1 opened; 0 open"
    assert line(200.0) is None                     # nothing changed

"""Admission of ingress connections (pure): clients, shares, frameless connections making room."""
from __future__ import annotations

from dataclasses import dataclass

from engine.ingress.admission import Admission, client_key


@dataclass(eq=False)
class Conn:
    stream: str
    client: str
    accepted: int = 0
    opened: float = 0.0
    last_active: float = 0.0
    closed: bool = False


def _open(a: Admission, host: str, now: float = 0.0, stream: str = "orders"):
    client, evict = a.admit(stream, host)
    if client is None:
        return None, evict
    c = Conn(stream, client, opened=now, last_active=now)
    a.track(c)
    return c, evict


def test_a_client_is_an_ipv4_address_or_an_ipv6_slash_64():
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2::5") == client_key("2001:db8:1:2:ffff::1") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::5") != client_key("2001:db8:1:2::5")


def test_a_client_gets_its_share_and_a_full_port_resets_its_oldest_frameless_connection():
    a = Admission(max_connections=4, per_client=2, first_frame_s=10, idle_s=300)
    first, _ = _open(a, "10.0.0.1")
    second, _ = _open(a, "10.0.0.1")
    assert _open(a, "10.0.0.1") == (None, None)                 # its share is taken
    sender, _ = _open(a, "10.0.0.2")
    sender.accepted = 5                                          # a real sender: keeps its place
    _open(a, "10.0.0.3")
    c, evict = _open(a, "10.0.0.4")                              # full: the oldest frameless goes
    assert c is not None and evict is first
    a.release(first)                                             # the server closes it: counted once
    assert a.open["orders"] == 4
    assert a.expired([second, sender], 11.0) == [(second, "sent no whole frame in 10 s")]
    assert a.expired([sender], 301.0) == [(sender, "idle for 300 s")]
    Admission.unmuted([second], 50.0)
    assert a.expired([second], 55.0) == []                       # muted time is not the sender's

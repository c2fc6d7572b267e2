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
    a.framed(sender)
    _open(a, "10.0.0.3")
    c, evict = _open(a, "10.0.0.4")                              # full: the oldest frameless goes
    assert c is not None and evict is first
    a.release(first)                                             # the server closes it: counted once
    assert a.open["orders"] == 4
    assert a.expired([second, sender], 11.0) == [(second, "sent no whole frame in 10 s")]
    assert a.expired([sender], 301.0) == [(sender, "idle for 300 s")]
    Admission.unmuted([second], 50.0)
    assert a.expired([second], 55.0) == []                       # muted time is not the sender's


def test_a_flood_of_frameless_connections_makes_room_from_itself_not_from_a_sender_yet_to_be_read():
    """Connections accepted in one burst are read after it: the flood's newer ones must not push a sender out."""
    a = Admission(max_connections=8, per_client=4, first_frame_s=10, idle_s=300)
    for i in range(4):
        _open(a, "10.0.1.1", now=i)
    sender, _ = _open(a, "10.0.0.2", now=5)                      # its frame is in its socket, not read yet
    evicted = []
    for i in range(50):                                          # fewer addresses than the cap, over and over
        _, evict = _open(a, f"10.0.2.{i % 5}", now=6 + i)
        evicted.append(evict)
    assert sender not in evicted
    assert sum(e is not None for e in evicted) >= 40             # the flood made room from itself
    assert a.open["orders"] == 8


def test_a_connection_that_sent_a_frame_leaves_the_frameless():
    a = Admission(max_connections=2, per_client=2, first_frame_s=10, idle_s=300)
    sender, _ = _open(a, "10.0.0.2")
    sender.accepted = 1
    a.framed(sender)
    hog, _ = _open(a, "10.0.0.1")
    hog2, evict = _open(a, "10.0.0.1")
    assert evict is hog
    other, evict = _open(a, "10.0.0.3")
    assert evict is hog2
    other.accepted = 1
    a.framed(other)
    assert _open(a, "10.0.0.1") == (None, None)                  # only senders left: the port is full
    a.release(other)
    assert a.open["orders"] == 1 and _open(a, "10.0.0.1")[0] is not None

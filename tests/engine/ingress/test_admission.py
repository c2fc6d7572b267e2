"""Admission of ingress connections (pure): clients, shares, the longest-idle connection making room."""
from __future__ import annotations

from dataclasses import dataclass

from engine.ingress.admission import Admission, client_key


@dataclass(eq=False)
class Conn:
    stream: str
    client: str
    accepted: int = 0
    uncommitted: int = 0
    opened: float = 0.0
    last_active: float = 0.0
    polled: bool = True               # the server has looked at it (admission.Connection)
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


def _send(a: Admission, c: Conn, now: float, frames: int = 1) -> None:
    """The server read `frames` good frames from `c` at `now`."""
    c.last_active = now
    a.active(c)
    if frames and not c.accepted:
        a.framed(c)
    c.accepted += frames


def test_a_full_share_makes_room_from_its_longest_idle_connection_even_when_every_sender_is_local():
    a = Admission(max_connections=1024, per_client=4, first_frame_s=10, idle_s=300)
    idle = [_open(a, "127.0.0.1", now=i)[0] for i in range(4)]    # a local user's idle sockets fill the share
    _send(a, idle[0], 5.0, frames=0)                              # a byte: now the least idle of them
    sender, evict = _open(a, "127.0.0.1", now=6)
    assert sender is not None and evict is idle[1]                # the longest idle gives way
    a.release(evict)                                              # the server closes it: counted once
    assert a.open["orders"] == 4
    assert [_open(a, "127.0.0.1", now=7)[1] for _ in range(2)] == [idle[2], idle[3]]


def test_a_full_port_makes_room_from_frameless_ones_first_then_from_the_longest_idle_sender():
    a = Admission(max_connections=4, per_client=2, first_frame_s=10, idle_s=300)
    senders = [_open(a, f"10.0.0.{i}", now=i)[0] for i in range(1, 4)]
    for i, s in enumerate(senders):
        _send(a, s, 10.0 + i)
    hog, _ = _open(a, "10.0.0.9", now=20)
    c, evict = _open(a, "10.0.0.4", now=21)                       # the frameless one goes first, though newer
    assert evict is hog
    _send(a, c, 22.0)
    _, evict = _open(a, "10.0.0.5", now=23)                       # then whoever sent longest ago, any address
    assert evict is senders[0]
    assert a.expired([senders[1]], 312.0) == [(senders[1], "idle for 300 s")]
    late, _ = _open(a, "10.0.0.6", now=24)
    assert a.expired([late], 35.0) == [(late, "sent no whole frame in 10 s")]
    Admission.unmuted([late], 50.0)
    assert a.expired([late], 55.0) == []                          # muted time is not the sender's


def test_a_flood_accepted_in_one_burst_cannot_push_out_a_sender_yet_to_be_read():
    """Connections accepted in one burst are read after it: the flood's newcomers are refused, not the sender."""
    a = Admission(max_connections=8, per_client=4, first_frame_s=10, idle_s=300)
    hogs = [_open(a, "127.0.0.1", now=i)[0] for i in range(4)]    # looked at: nothing sent
    burst = [_open(a, "127.0.0.2", now=5)[0]]                     # the sender: its frame not read yet
    burst[0].polled = False
    evicted, refused, admitted = [], 0, []
    for i in range(50):                                           # the burst: every newcomer unread too
        c, evict = _open(a, "127.0.0.1", now=6 + i)
        if c is None:
            refused += 1
            continue
        c.polled = False
        evicted.append(evict)
        admitted.append(c)
    assert evicted == hogs and refused == 46 and a.open["orders"] == 5
    for c in burst + admitted:
        c.polled = True                                           # the next loop looks at each of them
    _send(a, burst[0], 60.0)                                      # and reads the sender's frame
    later = [_open(a, f"127.0.0.{3 + i}", now=61 + i)[1] for i in range(8)]
    assert burst[0] not in later and set(admitted) <= set(later)  # the flood makes room from itself


def test_connections_with_uncommitted_records_never_give_way():
    a = Admission(max_connections=1, per_client=0, first_frame_s=10, idle_s=300)
    sender, _ = _open(a, "10.0.0.1")
    _send(a, sender, 1.0)
    sender.uncommitted = 3                                        # read this loop, not yet durable
    assert _open(a, "10.0.0.2", now=2) == (None, None)
    sender.uncommitted = 0
    assert _open(a, "10.0.0.2", now=2)[1] is sender

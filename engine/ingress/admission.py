"""Who may hold an ingress connection: a cap per port, a share per client, the longest-idle giving way.

A port takes at most `max_connections`. One client (an IPv4 address, or an IPv6 /64,
which one host can rotate through) holds at most `per_client` of them. When a new
connection finds its client's share or the port full, the longest-idle connection of
that share or port gives way (reset if frameless, else closed cleanly: all it sent is
durable), whatever its address: one that never sent a whole good frame while there are
any, else one that did; so idle sockets, or senders that sent one frame and went quiet,
cannot keep a real sender out, even when every sender is 127.0.0.1. Only a
connection the server has looked at (`polled`: its socket was checked for bytes after
it was accepted) and that has no uncommitted records can give way, so a flood accepted
in one burst cannot push out a sender whose first frame is still unread: the newcomer
is refused instead. A connection that has not sent a whole good frame within
`first_frame_s` of listening time is dropped, one silent for `idle_s` too. Pure
bookkeeping, no I/O: the server closes what this module names.

    admission = Admission(max_connections=1024, per_client=64, first_frame_s=10, idle_s=300)
    client, evict = admission.admit("orders", "192.0.2.7")   # client None: refuse
    admission.track(conn)                                    # the admitted connection
    admission.active(conn)                                   # it sent bytes
    admission.framed(conn)                                   # its first good frame
    admission.release(conn)                                  # when it closes
"""
from __future__ import annotations

import ipaddress
import logging
import resource
from collections import Counter, OrderedDict
from typing import Iterable, Protocol

log = logging.getLogger(__name__)

FD_RESERVE = 64                  # descriptors kept for the log, files and listeners


class Connection(Protocol):
    """What admission reads of a server's connection."""
    stream: str
    client: str
    accepted: int                 # good frames taken: a frame means a real sender
    uncommitted: int              # records not yet durable: never reset under them
    opened: float                 # monotonic listening time the first-frame deadline counts from
    last_active: float
    polled: bool                  # checked for bytes since accepted (or unmuted)
    closed: bool


def client_key(host: str) -> str:
    """The client a source address belongs to: the IPv4 address (also inside IPv6), or the IPv6 /64."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class Admission:
    """Connection counts per port and per client, and their connections, least recently active first."""

    def __init__(self, max_connections: int, per_client: int, first_frame_s: float, idle_s: float):
        self.max_connections, self.per_client = max_connections, per_client
        self.first_frame_s, self.idle_s = first_frame_s, idle_s
        self.open: Counter[str] = Counter()
        self._clients: Counter[tuple[str, str]] = Counter()
        # (stream, framed) and (stream, client, framed) -> connections by last activity, oldest first
        self._quiet: dict[tuple, OrderedDict[int, Connection]] = {}
        self._framed: dict[int, bool] = {}          # every admitted connection: has it sent a frame

    def admit(self, stream: str, host: str) -> tuple[str | None, Connection | None]:
        """Return (the client key, or None to refuse; a connection to close for room, or None)."""
        client = client_key(host)
        evict = None
        if self.per_client > 0 and self._clients[stream, client] >= self.per_client:
            evict = self._longest_idle((stream, client))
        elif self.open[stream] >= self.max_connections:
            evict = self._longest_idle((stream,))
        else:
            return self._take(stream, client), None
        if evict is None:
            return None, None
        self.release(evict)
        return self._take(stream, client), evict

    def _take(self, stream: str, client: str) -> str:
        self.open[stream] += 1
        self._clients[stream, client] += 1
        return client

    def track(self, conn: Connection) -> None:
        """Note an admitted connection (it has sent no frame yet)."""
        self._framed[id(conn)] = False
        self._place(conn, False)

    def active(self, conn: Connection) -> None:
        """Note that a connection sent bytes: it is now the least idle of its share and port."""
        framed = self._framed.get(id(conn))
        if framed is not None:
            for key in self._keys(conn, framed):
                self._quiet[key].move_to_end(id(conn))

    def framed(self, conn: Connection) -> None:
        """Note a connection's first good frame: it gives way only after every frameless one."""
        if self._framed.get(id(conn)) is False:
            self._unplace(conn, False)
            self._framed[id(conn)] = True
            self._place(conn, True)

    def release(self, conn: Connection) -> None:
        """Forget a connection that closes (once; later calls do nothing)."""
        framed = self._framed.pop(id(conn), None)
        if framed is None:
            return
        self._unplace(conn, framed)
        self.open[conn.stream] -= 1
        self._clients[conn.stream, conn.client] -= 1
        if self._clients[conn.stream, conn.client] <= 0:
            del self._clients[conn.stream, conn.client]

    @staticmethod
    def _keys(conn: Connection, framed: bool) -> tuple[tuple, tuple]:
        return (conn.stream, framed), (conn.stream, conn.client, framed)

    def _place(self, conn: Connection, framed: bool) -> None:
        for key in self._keys(conn, framed):
            self._quiet.setdefault(key, OrderedDict())[id(conn)] = conn

    def _unplace(self, conn: Connection, framed: bool) -> None:
        for key in self._keys(conn, framed):
            conns = self._quiet.get(key)
            if conns is not None and conns.pop(id(conn), None) is not None and not conns:
                del self._quiet[key]

    def _longest_idle(self, scope: tuple) -> Connection | None:
        """The connection of `scope` (a port, or a client's share of it) that gives way, or None."""
        frameless = self._quiet.get((*scope, False))
        for conn in (frameless or self._quiet.get((*scope, True), {})).values():
            if conn.polled and not conn.uncommitted and not conn.closed:
                return conn
        return None     # (a sender only waits behind connections not looked at yet, which may be senders)

    def expired(self, conns: Iterable[Connection], now: float) -> list[tuple[Connection, str]]:
        """The connections to drop now, each with why: no whole frame in time, or silent too long."""
        out = []
        for c in conns:
            if c.accepted == 0 and self.first_frame_s > 0 and now - c.opened > self.first_frame_s:
                out.append((c, f"sent no whole frame in {self.first_frame_s:g} s"))
            elif self.idle_s > 0 and now - c.last_active > self.idle_s:
                out.append((c, f"idle for {self.idle_s:g} s"))
        return out

    @staticmethod
    def unmuted(conns: Iterable[Connection], now: float) -> None:
        """Restart every connection's clocks: muted time is the ingress's, not the sender's; and
        none gives way before the server has looked at it again (its bytes may be waiting)."""
        for c in conns:
            c.last_active = c.opened = now
            c.polled = False


def connection_cap(per_port: int) -> int:
    """Return the per-port connection cap the process's descriptor limit allows (raising it if it may)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * per_port + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    cap = per_port if soft == resource.RLIM_INFINITY else max(1, min(per_port, (soft - FD_RESERVE) // 2))
    if cap < per_port:
        log.warning("ingress: %d connections per port asked, the descriptor limit (%d) allows %d",
                    per_port, soft, cap)
    return cap

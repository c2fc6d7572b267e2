"""Who may hold an ingress connection: a cap per port, a share per client, a deadline for the first frame.

A port takes at most `max_connections`. One client (an IPv4 address, or an IPv6 /64,
which one host can rotate through) holds at most `per_client` of them. A connection that
has not sent a whole good frame within `first_frame_s` of listening time is dropped, and
when the port is full a new connection takes the place of a frameless one: the oldest of
the client holding the most. So idle or trickling sockets cannot keep a real sender out,
and a flood of connections accepted in one burst, before any of them is read, makes room
from itself rather than from a sender whose first frame is still unread (unless the flood
comes from as many addresses as the port has places). A connection that has sent frames
keeps its place until it is silent for `idle_s`. Pure bookkeeping, no I/O: the server
closes what this module names.

    admission = Admission(max_connections=1024, per_client=64, first_frame_s=10, idle_s=300)
    client, evict = admission.admit("orders", "192.0.2.7", now)   # client None: refuse
    ...
    admission.framed(conn)                                        # its first good frame
    admission.release(conn)                                       # when it closes
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
    opened: float                 # monotonic listening time the first-frame deadline counts from
    last_active: float
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
    """Connection counts per port and per client, and each client's frameless connections in opening order."""

    def __init__(self, max_connections: int, per_client: int, first_frame_s: float, idle_s: float):
        self.max_connections, self.per_client = max_connections, per_client
        self.first_frame_s, self.idle_s = first_frame_s, idle_s
        self.open: Counter[str] = Counter()
        self._clients: Counter[tuple[str, str]] = Counter()
        self._frameless: dict[str, dict[str, OrderedDict[int, Connection]]] = {}
        self._admitted: set[int] = set()

    def admit(self, stream: str, host: str) -> tuple[str | None, Connection | None]:
        """Return (the client key, or None to refuse; a frameless connection to reset for room, or None)."""
        client = client_key(host)
        if self.per_client > 0 and self._clients[stream, client] >= self.per_client:
            return None, None
        evict = None
        if self.open[stream] >= self.max_connections:
            evict = self._oldest_frameless(stream)
            if evict is None:
                return None, None
            self.release(evict)
        self.open[stream] += 1
        self._clients[stream, client] += 1
        return client, evict

    def track(self, conn: Connection) -> None:
        """Note an admitted connection (it has sent no frame yet)."""
        self._admitted.add(id(conn))
        self._frameless.setdefault(conn.stream, {}).setdefault(conn.client, OrderedDict())[id(conn)] = conn

    def framed(self, conn: Connection) -> None:
        """Note a connection's first good frame: a real sender, no longer one to make room with."""
        clients = self._frameless.get(conn.stream, {})
        waiting = clients.get(conn.client)
        if waiting is not None and waiting.pop(id(conn), None) is not None and not waiting:
            del clients[conn.client]

    def release(self, conn: Connection) -> None:
        """Forget a connection that closes (once; later calls do nothing)."""
        if id(conn) not in self._admitted:
            return
        self._admitted.discard(id(conn))
        self.framed(conn)
        self.open[conn.stream] -= 1
        self._clients[conn.stream, conn.client] -= 1
        if self._clients[conn.stream, conn.client] <= 0:
            del self._clients[conn.stream, conn.client]

    def _oldest_frameless(self, stream: str) -> Connection | None:
        """The oldest frameless connection of the client with the most (ties: the oldest of them)."""
        best, most = None, 0
        for waiting in self._frameless.get(stream, {}).values():
            first = next(iter(waiting.values()))
            if len(waiting) > most or (len(waiting) == most and first.opened < best.opened):
                best, most = first, len(waiting)
        return best

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
        """Restart every connection's clocks: muted time is the ingress's, not the sender's."""
        for c in conns:
            c.last_active = c.opened = now


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

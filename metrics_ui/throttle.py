"""Failed logins per client and in all, so a password or token cannot be guessed at line speed (pure, no I/O).

A client (its IPv4 address; for IPv6 its /64, which one host can rotate through) that
fails `limit` times within `window_s` seconds is refused until its oldest failure in the
window ages out, right credentials or not. Next to it a global budget: after
`global_limit` failures within the window from any clients (guessing spread over many
addresses), every client that is not logged in yet is refused until the oldest of them
ages out; sessions already open are not affected. Memory is bounded: at most
`max_clients` clients are remembered, the least recently failing first forgotten.

    throttle = LoginThrottle()
    if throttle.retry_after(addr) > 0: refuse (429)
    elif credentials are wrong: throttle.failed(addr)
"""
from __future__ import annotations

import ipaddress
import threading
import time
from collections import OrderedDict, deque
from typing import Callable

MAX_FAILURES = 10
WINDOW_S = 60.0
MAX_CLIENTS = 10_000
GLOBAL_FAILURES = 100


def client_key(address: str) -> str:
    """The client an address belongs to: itself for IPv4 (also inside IPv6), its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.version == 6 and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(getattr(ip, "ipv4_mapped", None) or ip)


class LoginThrottle:
    """Sliding-window count of failed logins per client; thread-safe (the server has many threads)."""

    def __init__(self, limit: int = MAX_FAILURES, window_s: float = WINDOW_S, max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic, global_limit: int = GLOBAL_FAILURES):
        if limit < 1 or window_s <= 0 or max_clients < 1 or global_limit < 1:
            raise ValueError("limit, window_s, max_clients and global_limit must be positive")
        self.limit, self.window_s, self.max_clients, self._clock = limit, window_s, max_clients, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque(maxlen=global_limit)
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times

    def retry_after(self, client: str) -> float:
        """Return the seconds until `client` may try again; 0 if it may now."""
        with self._lock:
            now = self._clock()
            overall = 0.0
            if len(self._all) == self._all.maxlen and self._all[0] > now - self.window_s:
                overall = self._all[0] + self.window_s - now
            times = self._recent(client_key(client), now)
            if times is None or len(times) < self.limit:
                return overall
            return max(overall, times[-self.limit] + self.window_s - now)

    def failed(self, client: str) -> None:
        """Record one failed login of `client`."""
        client = client_key(client)
        with self._lock:
            now = self._clock()
            self._all.append(now)
            times = self._recent(client, now) or deque(maxlen=self.limit)
            times.append(now)
            self._failures[client] = times
            self._failures.move_to_end(client)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)

"""Failed logins per client, so a password or token cannot be guessed at line speed (pure, no I/O).

A client (its address) that fails `limit` times within `window_s` seconds is refused
until its oldest failure in the window ages out, right credentials or not. Memory is
bounded: at most `max_clients` clients are remembered, the least recently failing first
forgotten.

    throttle = LoginThrottle()
    if throttle.retry_after(addr) > 0: refuse (429)
    elif credentials are wrong: throttle.failed(addr)
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from typing import Callable

MAX_FAILURES = 10
WINDOW_S = 60.0
MAX_CLIENTS = 10_000


class LoginThrottle:
    """Sliding-window count of failed logins per client; thread-safe (the server has many threads)."""

    def __init__(self, limit: int = MAX_FAILURES, window_s: float = WINDOW_S, max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic):
        if limit < 1 or window_s <= 0 or max_clients < 1:
            raise ValueError("limit, window_s and max_clients must be positive")
        self.limit, self.window_s, self.max_clients, self._clock = limit, window_s, max_clients, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
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
            times = self._recent(client, now)
            if times is None or len(times) < self.limit:
                return 0.0
            return times[-self.limit] + self.window_s - now

    def failed(self, client: str) -> None:
        """Record one failed login of `client`."""
        with self._lock:
            now = self._clock()
            times = self._recent(client, now) or deque(maxlen=self.limit)
            times.append(now)
            self._failures[client] = times
            self._failures.move_to_end(client)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)

"""The ingress' connection log: one summary line a minute with counts, not a line per connection.

A flood of 19,000 connections wrote 38,000 INFO lines before; each connection's own
lines are now DEBUG (`marketspread -v ingress`), and this line says what the minute
held, only when it held something. Pure: the server hands in its stats snapshot.

    summary = ConnectionSummary()
    if summary.due(now):
        line = summary.line(server.stats(), now)             # None: nothing happened
"""
from __future__ import annotations

import math

from engine.ingress.stats import IngressStats

SUMMARY_EVERY = 60.0             # seconds between two summary lines at most
_COUNTS = (("connections_total", "opened"), ("connections_refused", "refused"),
           ("connections_evicted", "gave way to new ones"), ("connections_idle", "dropped silent"),
           ("connections_foreign", "closed as HTTP or TLS"), ("connections_reset", "reset"),
           ("bad", "bad runs"))


class ConnectionSummary:
    """What changed in the connection counters since the last line it gave."""

    def __init__(self, every: float = SUMMARY_EVERY):
        self.every = every
        self._seen: dict[str, int] = {}
        self._at = -math.inf

    def due(self, now: float) -> bool:
        """Whether `every` seconds passed since the last line (the server snapshots its stats only then)."""
        return now - self._at >= self.every

    def line(self, st: IngressStats, now: float) -> str | None:
        """A line of the counts since the last one, or None if none changed."""
        counts = {name: sum(getattr(st, name).values()) for name, _ in _COUNTS}
        delta = {name: n - self._seen.get(name, 0) for name, n in counts.items()}
        if not any(delta.values()):
            return None
        since = "" if math.isinf(self._at) else f" in the last {now - self._at:.0f} s"
        self._seen, self._at = counts, now
        parts = ", ".join(f"{delta[name]:,} {what}" for name, what in _COUNTS if delta[name])
        return f"ingress connections{since}: {parts}; {sum(st.connections_open.values())} open"

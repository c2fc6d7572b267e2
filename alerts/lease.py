"""One evaluator per rules namespace and database at a time: a lease kept in the metrics backend itself.

Every process that may evaluate (the dashboard, a watched or monitored job, `marketspread
job`, `alerts serve`) runs an evaluator; each cycle it writes a heartbeat point
(`alert_lease`, tags namespace and holder, field started_ns) straight to the backend and reads
the namespace's heartbeats of the last `ttl_s`. The holder among them that started first
(ties by holder id) leads and evaluates; the others stand by, reading the same
heartbeats, and the oldest of them takes over once the leader's heartbeat is older than
`ttl_s` (it died) or it released the lease (it stopped). The processes may be on other
hosts: the database, not a file, is what they share. A new holder does not lead in its
first cycle, so two evaluators started together both see each other before either
evaluates: no notification is ever sent twice.

InfluxDB has no compare-and-set (`MetricsReader.heartbeat`, `heartbeats`); the lease needs none, because every holder decides from
the same set of heartbeats by the same order. What it needs is that a heartbeat is in the
database before the next cycle of the others reads, which a direct write (not the batching
writer) gives.
"""
from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

from collector.metrics.backend import MetricsReader
from collector.units import NS

from alerts.wiring import reader_of

#: A leader not heard from for this many cycles has lost the lease.
TTL_CYCLES = 3


@dataclass(frozen=True)
class Holder:
    """A process holding or waiting for the lease: who it is and since when it has been a candidate."""
    id: str                     # host:pid:random, unique per evaluator
    started_ns: int
    seen_ns: int                # its newest heartbeat

    @property
    def process(self) -> str:
        """Return `host pid N` for display."""
        host, _, rest = self.id.partition(":")
        return f"{host} pid {rest.split(':')[0]}"


def new_holder_id() -> str:
    """Return a holder id for this process' evaluator: host, pid and 32 random bits."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{secrets.token_hex(4)}"


def leader_of(holders: list[Holder]) -> Holder | None:
    """Return who leads among the live holders: the first started, then the smallest id (pure)."""
    return min(holders, key=lambda h: (h.started_ns, h.id), default=None)


class Lease:
    """The lease of one namespace in one database, as seen by one evaluator (`holder`)."""

    def __init__(self, client, namespace: str, interval_s: float, holder: str | None = None,
                 started_ns: int | None = None):
        self.reader: MetricsReader = reader_of(client)
        self.namespace = namespace
        self.ttl_ns = int(TTL_CYCLES * interval_s * NS)
        self.holder = holder or new_holder_id()
        self.started_ns = started_ns
        self._cycles = 0

    def renew(self, now_ns: int) -> Holder | None:
        """Write this holder's heartbeat, then return the leader (this one or another); raises MetricsError.

        A holder in its first cycle is never its own leader's answer: it returns the leader
        it sees among the others, or None.
        """
        if self.started_ns is None:
            self.started_ns = now_ns
        self.reader.heartbeat(self.namespace, self.holder, self.started_ns, False, now_ns)
        self._cycles += 1
        holders = self.holders(now_ns)
        if self._cycles < 2:
            holders = [h for h in holders if h.id != self.holder]
        return leader_of(holders)

    def leads(self, leader: Holder | None) -> bool:
        """Return whether `leader` (from `renew`) is this holder."""
        return leader is not None and leader.id == self.holder

    def holders(self, now_ns: int) -> list[Holder]:
        """Return the live holders of the namespace: heard from within the TTL and not released."""
        return [Holder(h.holder, h.started_ns, h.seen_ns) for h in self.reader.heartbeats(self.namespace,
                                                                                          now_ns - self.ttl_ns)
                if not h.released and h.started_ns is not None]

    def release(self, now_ns: int) -> None:
        """Give the lease up at once (a stopping evaluator), so a standby takes over at its next cycle."""
        if self.started_ns is None:
            return
        self.reader.heartbeat(self.namespace, self.holder, self.started_ns, True, now_ns)

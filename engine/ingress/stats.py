"""The ingress' stats file: its counters as one JSON snapshot beside the log.

The ingress rewrites `stats.json` in its log folder every 100 ms, so other processes
(the job's backpressure figures, the demo, tests, benchmarks) read its counters without
talking to it. Written whole to a temp file, then renamed: a reader never sees half.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

STATS_FILE = "stats.json"


@dataclass(frozen=True)
class IngressStats:
    """A snapshot of the ingress counters (also written as `stats.json` in the log folder)."""
    accepted: dict[str, int]
    accepted_total: int
    bad: dict[str, int]                 # bad runs per stream
    bad_total: int
    bad_reasons: dict[str, int]         # bad runs per reason category
    bytes_in: dict[str, int]
    connections_open: dict[str, int]
    connections_total: dict[str, int]
    head: int
    consumed: int
    backlog: int
    muted: bool
    mute_episodes: int
    muted_seconds: float
    ports: dict[str, int]
    disk_full: bool = False             # muted because a write failed or space is below the mark
    write_failures: int = 0             # failed commits (their records were truncated away)
    records_rolled_back: int = 0
    connections_reset: dict[str, int] = field(default_factory=dict)    # unstored bytes: RST
    connections_refused: dict[str, int] = field(default_factory=dict)  # over max_connections
    connections_idle: dict[str, int] = field(default_factory=dict)     # dropped after idle_timeout
    connections_evicted: dict[str, int] = field(default_factory=dict)  # gave way to a new one (longest idle)
    connections_foreign: dict[str, int] = field(default_factory=dict)  # began like HTTP or TLS: closed
    deadletter_dropped: int = 0         # bad runs counted but not kept (cap or full disk)
    deadletter_rotations: int = 0


@dataclass
class IngressCounters:
    """The ingress loop's running counts, per stream where a sender would ask per stream."""
    streams: tuple[str, ...]
    accepted: dict[str, int] = field(default_factory=dict)
    bad: dict[str, int] = field(default_factory=dict)
    bad_reasons: dict[str, int] = field(default_factory=dict)
    bytes_in: dict[str, int] = field(default_factory=dict)
    connections_open: dict[str, int] = field(default_factory=dict)
    connections_total: dict[str, int] = field(default_factory=dict)
    connections_reset: dict[str, int] = field(default_factory=dict)
    connections_refused: dict[str, int] = field(default_factory=dict)
    connections_idle: dict[str, int] = field(default_factory=dict)
    connections_evicted: dict[str, int] = field(default_factory=dict)
    connections_foreign: dict[str, int] = field(default_factory=dict)
    mute_episodes: int = 0
    muted_seconds: float = 0.0
    write_failures: int = 0
    records_rolled_back: int = 0

    def __post_init__(self) -> None:
        for name in _PER_STREAM:
            getattr(self, name).update(dict.fromkeys(self.streams, 0))

    def snapshot(self, head: int, consumed: int, muted: bool, muted_s: float, ports: dict[str, int],
                 disk_full: bool, dead) -> IngressStats:
        """Return the counts as a frozen `IngressStats` (`dead`: the dead-letter file, or None)."""
        per_stream = {name: dict(getattr(self, name)) for name in _PER_STREAM}
        return IngressStats(
            **per_stream, accepted_total=sum(self.accepted.values()), bad_total=sum(self.bad.values()),
            bad_reasons=dict(self.bad_reasons), head=head, consumed=consumed, backlog=max(0, head - consumed),
            muted=muted, mute_episodes=self.mute_episodes, muted_seconds=round(muted_s, 6), ports=dict(ports),
            disk_full=disk_full, write_failures=self.write_failures, records_rolled_back=self.records_rolled_back,
            deadletter_dropped=dead.dropped if dead else 0, deadletter_rotations=dead.rotations if dead else 0)


_PER_STREAM = ("accepted", "bad", "bytes_in", "connections_open", "connections_total", "connections_reset",
               "connections_refused", "connections_idle", "connections_evicted", "connections_foreign")


def reason_category(reason: str) -> str:
    """Map a scanner reason to a bounded category, so counters cannot grow per length value."""
    for prefix, category in (("truncated", "truncated frame"), ("garbage", "garbage bytes"),
                             ("oversized", "oversized frame"), ("unknown message type", "unknown type"),
                             ("wrong length", "wrong length"), ("pending overflow", "pending overflow")):
        if reason.startswith(prefix):
            return category
    if reason.endswith("on the wrong stream"):
        return "wrong stream"
    if reason.startswith("scanner error"):
        return "scanner error"
    return re.sub(r"\d+", "N", reason)


def read_stats(log_dir: str | os.PathLike) -> dict | None:
    """Return the last stats the ingress wrote in `log_dir`, or None if there are none."""
    try:
        return json.loads((Path(log_dir) / STATS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_stats(log_dir: str | os.PathLike, data: dict) -> None:
    """Replace `stats.json` in `log_dir` with `data` and the time it was written."""
    path = Path(log_dir) / STATS_FILE
    tmp = path.with_name(STATS_FILE + ".tmp")
    tmp.write_text(json.dumps(dict(data, written_ns=time.time_ns())))
    os.replace(tmp, path)

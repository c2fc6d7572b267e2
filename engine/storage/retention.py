"""What may be deleted to keep the state folder bounded: pure decisions, no I/O.

Two kinds of data grow with the events. The ingress log is needed only until Spark has
committed the batches that read it: a segment may go once every record in it is below
the end offset of the newest committed batch (a restart replays from there, never
earlier) and below any reader hold. Result batches are the job's output: like a Kafka
topic they are kept for a time and/or up to a total size, oldest first, and only once
committed; readers that fall behind are told how many batches they missed.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_UNITS_S = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_UNITS_B = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
            "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_OFF = ("0", "off", "none", "")
_NUM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration_s(text: str) -> float | None:
    """Parse a retention time ("24h", "90m", "30s", "7d"); None when off ("0", "off")."""
    if str(text).strip().lower() in _OFF:
        return None
    m = _NUM.match(str(text))
    unit = (m.group(2).lower() or "s") if m else None
    if m is None or unit not in _UNITS_S:
        raise ValueError(f"results retention {text!r} is not a time like 24h, 90m, 30s or 0 (off)")
    return float(m.group(1)) * _UNITS_S[unit]


def parse_size_bytes(text: str) -> int | None:
    """Parse a retention size ("10GiB", "500MB", "1048576"); None when off ("0", "off")."""
    if str(text).strip().lower() in _OFF:
        return None
    m = _NUM.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS_B:
        raise ValueError(f"results retention size {text!r} is not a size like 10GiB, 500MB or 0 (off)")
    return int(float(m.group(1)) * _UNITS_B[unit])


@dataclass(frozen=True)
class RetentionPolicy:
    """What the job keeps: the whole log or not, and result batches by age and/or bytes."""
    log: bool = True
    results_age_s: float | None = 24 * 3600.0
    results_bytes: int | None = 10 << 30

    @classmethod
    def from_settings(cls, log: bool, results_retention: str, results_retention_bytes: str) -> "RetentionPolicy":
        """Build from the config's text settings (raises ValueError with one clear line)."""
        return cls(log, parse_duration_s(results_retention), parse_size_bytes(results_retention_bytes))


@dataclass(frozen=True)
class BatchFootprint:
    """One committed result batch on disk: its id, bytes and when it was written."""
    batch: int
    nbytes: int
    written_ns: int


def log_keep_from(committed_end: int | None, hold: int | None) -> int:
    """The lowest log sequence number that must stay readable.

    `committed_end` is the end offset of the newest batch in Spark's commit log: a restart
    re-plans from it (an uncommitted batch is re-run from that same offset), so nothing
    below it is read again. Unknown (no commit yet, an unreadable entry) keeps everything.
    `hold` is the position of a reader outside the job that still needs older records.
    """
    if committed_end is None:
        return 0
    return committed_end if hold is None else min(committed_end, hold)


def segments_to_delete(firsts: Iterable[int], segment_records: int, keep_from: int) -> list[int]:
    """First sequence numbers of the segments whose records all lie below `keep_from`.

    The newest segment is always kept: the ingress derives its size from it on restart.
    """
    ordered = sorted(firsts)
    return [f for f in ordered[:-1] if f + segment_records <= keep_from]


def results_keep_from(batches: Iterable[BatchFootprint], committed: int, now_ns: int,
                      policy: RetentionPolicy, current: int = 0, total: int | None = None) -> int:
    """The first result batch to keep (every batch below it may be deleted).

    `batches`: the footprints of batches `current..committed` on disk, in batch order (a
    batch that wrote nothing has none); `total`: their bytes, if known (a day of batches
    is ~10^6 footprints: the loop stops at the first batch kept). Oldest batches go first
    while they are older than the age bound or the total exceeds the size bound, as Kafka
    deletes a topic's oldest segments. Never past the newest committed batch: an
    uncommitted batch is still being written (or will be rewritten by a restart), and the
    newest committed one is kept so that a reader always finds the batch the commit log
    names.
    """
    if total is None:
        batches = list(batches)
        total = sum(b.nbytes for b in batches if b.batch >= current)
    limit = max(current, committed)                       # batches >= limit are never deleted
    keep = current
    for b in batches:
        if b.batch < current:
            continue
        if b.batch >= limit:
            break
        too_old = policy.results_age_s is not None and now_ns - b.written_ns > policy.results_age_s * 1e9
        too_big = policy.results_bytes is not None and total > policy.results_bytes
        if not (too_old or too_big):
            break
        total -= b.nbytes
        keep = b.batch + 1
    return keep

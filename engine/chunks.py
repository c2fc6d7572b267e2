"""Chunks: the durable log cut into per-shard files that Spark's own file source picks up.

The job reads the ingress through Spark's JVM `binaryFile` stream source instead of a
Python data source: a micro-batch then needs no Python worker to read, which measured
~200 ms per batch against ~350 ms (bench/README.md). The writer cuts what the log has
made durable since the last cut, [a, b), into one file per shard,
`chunks/<a>-<b>.s<k>.ev`, holding that shard's records in seq order (`CHUNK_DTYPE`),
and writes one file for *every* shard, empty ones included, so each shard's chunks form
an unbroken chain of ranges. The stateful task applies a shard's chunks only along that
chain (`ChunkChain`): a directory listing that misses a file does not reorder events.

Cuts happen *on demand*: as soon as the job has taken every cut so far (its `position`,
written after each batch), so each micro-batch reads one cut; while it is busy nothing
is cut (a cut made mid-batch would only make the next batch start with stale data).
Spark's file source keeps one log entry per file it ever read, so few files per batch
also keep that log small. A cut is forced at `max_records` pending, and while the job
lags by more than `LAG_RECORDS` every `interval_s`.

Chunks are derived data. `chunked` (u64) says how far the log has been cut; a writer
reopened after a crash re-cuts [chunked, head) from the log, under the same names. Files
whose whole range the job has committed (`consumed`) are deleted.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .records import CHUNK_DTYPE, chunk_records

CHUNK_DIR = "chunks"
CHUNK_GLOB = "*.ev"
CHUNK_RE = re.compile(r"(\d{20})-(\d{20})\.s(\d+)\.ev$")
LAYOUT = "_layout.json"              # hidden from Spark (leading underscore)
# Every chunk file starts with this header and its record count (u64 LE): Spark's file
# source silently skips zero-length files, and a shard's empty chunk must still arrive.
CHUNK_MAGIC = b"MSCHUNK1"
HEADER_BYTES = 16
DEFAULT_INTERVAL_S = 0.25
MAX_CHUNK_RECORDS = 65_536           # per cut, all shards together
GC_INTERVAL_S = 1.0
# While the job lags by more than this many records, cut every `interval_s` regardless.
LAG_RECORDS = 100_000


def chunk_dir(log_dir: str | os.PathLike) -> Path:
    return Path(log_dir) / CHUNK_DIR


def chunk_name(a: int, b: int, shard: int) -> str:
    return f"{a:020d}-{b:020d}.s{shard}.ev"


def parse_chunk_name(name: str) -> tuple[int, int, int] | None:
    """Return (a, b, shard) of a chunk file name or path; None for anything else."""
    m = CHUNK_RE.search(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def read_chunked(log_dir: str | os.PathLike) -> int:
    """Return how far the log has been cut into chunks."""
    from .ingress_log import _read_u64
    return _read_u64(Path(log_dir) / "chunked")


def read_position(log_dir: str | os.PathLike) -> int:
    """Return how far the job has taken chunks (written after each batch, before Spark's commit)."""
    from .ingress_log import _read_u64
    return _read_u64(Path(log_dir) / "position")


def write_position(log_dir: str | os.PathLike, value: int) -> None:
    from .ingress_log import _write_u64
    _write_u64(Path(log_dir) / "position", value)


def chunk_origin(log_dir: str | os.PathLike) -> int:
    """Where a fresh query starts: the first chunk still present, else the cut position."""
    starts = [p[0] for e in os.scandir(chunk_dir(log_dir)) if (p := parse_chunk_name(e.name))] \
        if chunk_dir(log_dir).is_dir() else []
    return min(starts) if starts else read_chunked(log_dir)


def check_layout(log_dir: str | os.PathLike, shards: int) -> None:
    """Record the shard count of the chunks, or fail if they were cut for another count."""
    d = chunk_dir(log_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / LAYOUT
    if path.exists():
        have = json.loads(path.read_text())["shards"]
        if have != shards:
            raise ValueError(f"{d} holds chunks for {have} shards, not {shards}: run ingress and "
                             f"job with the same --shards (or start from an empty state folder)")
        return
    tmp = d / (LAYOUT + ".tmp")
    tmp.write_text(json.dumps({"shards": shards}))
    os.replace(tmp, path)


class ChunkWriter:
    """Cut committed log records into per-shard chunk files (used by `LogWriter`)."""

    def __init__(self, log_dir: str | os.PathLike, shards: int, interval_s: float = DEFAULT_INTERVAL_S,
                 max_records: int = MAX_CHUNK_RECORDS):
        self.log_dir = Path(log_dir)
        self.dir = chunk_dir(log_dir)
        self.shards = shards
        self.interval_s = interval_s
        self.max_records = max_records
        check_layout(log_dir, shards)
        self.chunked = read_chunked(log_dir)
        self._pending: list[tuple[int, np.ndarray]] = []   # (first seq, records) committed, not cut
        self._pending_n = 0
        self._last_cut = time.monotonic()
        self._next_gc = 0.0

    def recover(self, head: int, read) -> None:
        """Re-cut [chunked, head) with `read(a, b) -> records` (after a crash between the two)."""
        while self.chunked < head:
            b = min(head, self.chunked + self.max_records)
            self._cut([(self.chunked, read(self.chunked, b))])

    def add(self, first_seq: int, records: np.ndarray) -> None:
        """Take records that are now durable in the log (contiguous with earlier ones)."""
        self._pending.append((first_seq, records))
        self._pending_n += len(records)
        if self._pending_n >= self.max_records:
            self.flush()

    def tick(self, consumed: int | None = None, position: int | None = None) -> None:
        """Cut when the job has taken every cut (or it lags, see the module doc); now and
        then delete chunks the job committed."""
        now = time.monotonic()
        if self._pending:
            position = read_position(self.log_dir) if position is None else position
            lag = self.chunked + self._pending_n - position
            if position >= self.chunked or (lag > LAG_RECORDS and now - self._last_cut >= self.interval_s):
                self.flush()
        if consumed is not None and now >= self._next_gc:
            self._next_gc = now + GC_INTERVAL_S
            self.collect_garbage(consumed)

    def flush(self) -> None:
        """Cut everything pending now (in cuts of at most `max_records`)."""
        if self._pending:
            a = self._pending[0][0]
            rec = self._pending[0][1] if len(self._pending) == 1 else \
                np.concatenate([r for _, r in self._pending])
            for i in range(0, len(rec), self.max_records):
                self._cut([(a + i, rec[i:i + self.max_records])])
            self._pending, self._pending_n = [], 0
        self._last_cut = time.monotonic()

    def _cut(self, parts: list[tuple[int, np.ndarray]]) -> None:
        a = parts[0][0]
        if a != self.chunked:
            raise RuntimeError(f"chunk cut at {a} but the log is chunked up to {self.chunked}")
        rec = parts[0][1] if len(parts) == 1 else np.concatenate([r for _, r in parts])
        b = a + len(rec)
        for k, c in enumerate(chunk_records(rec, a, self.shards)):
            final = self.dir / chunk_name(a, b, k)
            tmp = self.dir / ("." + final.name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(CHUNK_MAGIC + len(c).to_bytes(8, "little"))
                f.write(c.tobytes())
            os.replace(tmp, final)
        from .ingress_log import _write_u64
        self.chunked = b
        _write_u64(self.log_dir / "chunked", b)

    def collect_garbage(self, consumed: int) -> int:
        """Delete chunk files that lie wholly below `consumed`; return how many."""
        n = 0
        for e in os.scandir(self.dir):
            p = parse_chunk_name(e.name)
            if p is not None and p[1] <= consumed:
                try:
                    os.unlink(e.path)
                    n += 1
                except FileNotFoundError:
                    pass
        return n


@dataclass(frozen=True)
class Chunk:
    """One chunk file's content as the stateful task sees it."""
    a: int
    b: int
    data: bytes


class ChunkChain:
    """Order a shard's chunks along their ranges; keep those after a gap for later.

    `upto` is where the shard's applied events end. Chunks arrive as Spark lists files,
    which can skip a file that is being renamed in; a chunk whose start is not `upto`
    waits (in the state row) until the missing range arrives.
    """

    def __init__(self, upto: int, waiting: list[Chunk]):
        self.upto = upto
        self.waiting = waiting

    def take(self, arrived: list[Chunk]) -> list[Chunk]:
        """Return the chunks that continue the chain, in order; keep the rest waiting."""
        by_start = {c.a: c for c in self.waiting}
        for c in arrived:
            if c.b > self.upto:            # a replayed range already applied is skipped
                by_start.setdefault(c.a, c)
        ready = []
        while self.upto in by_start:
            c = by_start.pop(self.upto)
            ready.append(c)
            self.upto = c.b
        self.waiting = sorted(by_start.values(), key=lambda c: c.a)
        return ready

    def waiting_bytes(self) -> tuple[bytes, bytes]:
        """Serialise the waiting chunks for a state row: ranges (i8 pairs) and data."""
        ranges = np.array([(c.a, c.b, len(c.data)) for c in self.waiting], dtype="<i8").reshape(-1, 3)
        return ranges.tobytes(), b"".join(c.data for c in self.waiting)

    @staticmethod
    def waiting_from(ranges: bytes, data: bytes) -> list[Chunk]:
        r = np.frombuffer(ranges, dtype="<i8").reshape(-1, 3)
        out, off = [], 0
        for a, b, n in r:
            out.append(Chunk(int(a), int(b), data[off:off + int(n)]))
            off += int(n)
        return out


def chunk_records_of(data: bytes) -> memoryview:
    """Return a chunk file's records (after checking its header)."""
    if data[:8] != CHUNK_MAGIC or len(data) < HEADER_BYTES:
        raise ValueError("not a chunk file (bad header)")
    n = int.from_bytes(data[8:16], "little")
    if len(data) != HEADER_BYTES + n * CHUNK_DTYPE.itemsize:
        raise ValueError(f"chunk file is {len(data)} bytes, its header says {n} records")
    return memoryview(data)[HEADER_BYTES:]


def chunk_events(chunks: list[Chunk]) -> np.ndarray:
    """Concatenate chunks' records (`CHUNK_DTYPE`), already in seq order along the chain."""
    return np.frombuffer(b"".join(chunk_records_of(c.data) for c in chunks), dtype=CHUNK_DTYPE)

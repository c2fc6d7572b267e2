"""The ingress log: one ordered, durable, replayable sequence of accepted messages.

Both streams go into one log, so the order of the log is the arrival order the state
sees. Records are fixed width (`RECORD_BYTES`): a record's sequence number is its index,
a Spark offset is a sequence number, and reading a range is one `pread` per segment.

Layout of a log folder::

    seg-00000000000000000000.log   records [0, SEGMENT_RECORDS)
    seg-00000000000001048576.log   ...
    head        u64 LE: records durably written (fsync'd) and visible to readers
    consumed    u64 LE: records the job has committed (written by the Spark source)

Record layout (64 bytes): ingest time in ns (i64 LE), then the message payload as
received (its first byte is the message type), zero padded.
"""
from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path

import numpy as np

from collector.safe_delete import remove_file_in, remove_in

RECORD_BYTES = 64
PAYLOAD_OFFSET = 8
DEFAULT_SEGMENT_RECORDS = 1 << 20      # 64 MiB per segment
_SEG_RE = re.compile(r"^seg-(\d{20})\.log$")


def _seg_name(first: int) -> str:
    return f"seg-{first:020d}.log"


def write_u64(path: Path, value: int) -> None:
    """Overwrite an 8-byte counter in place (an aligned 8-byte pwrite is not torn)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, int(value).to_bytes(8, "little"), 0)
    finally:
        os.close(fd)


def read_u64(path: Path) -> int:
    """Read an 8-byte counter (0 if it does not exist yet)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
    except FileNotFoundError:
        return 0
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def read_head(log_dir: str | os.PathLike) -> int:
    """Return the number of durable records in the log."""
    return read_u64(Path(log_dir) / "head")


def read_consumed(log_dir: str | os.PathLike) -> int:
    """Return the number of records the job has committed."""
    return read_u64(Path(log_dir) / "consumed")


def write_consumed(log_dir: str | os.PathLike, value: int) -> None:
    """Record that the job has committed everything below `value`."""
    write_u64(Path(log_dir) / "consumed", value)


class LogWriter:
    """Append records and make them durable in group commits.

    `append` buffers in the OS; `commit` fsyncs the open segment(s) and only then
    advances `head`, so a reader never sees a record that a crash could take back.
    Opening an existing log recovers `head` from the segment sizes and truncates a
    partially written record. When `append` or `commit` fails (a short write, ENOSPC,
    EIO from fsync: the bytes cannot be trusted), `rollback` truncates the log back to
    `head`, the last whole, durable record.

    `on_durable(first_seq, records)`, when set, is called by each commit with the
    records it made durable, after the fsync and before `head` moves (the shard files,
    shard_files.py, are written there so that a reader seeing `head` finds them); it
    must not raise.
    """

    def __init__(self, log_dir: str | os.PathLike, segment_records: int = DEFAULT_SEGMENT_RECORDS,
                 fsync: bool = True):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_records = segment_records
        self.fsync = fsync
        self._fd: int | None = None
        self._seg_first = 0
        self._dirty: set[int] = set()
        self.on_durable = None
        self._undurable: list[np.ndarray] = []   # records appended since the last commit (for on_durable)
        self._buf = np.empty((0, RECORD_BYTES), dtype=np.uint8)   # reused by every append
        self.size = self._recover()
        self.head = self.size
        write_u64(self.dir / "head", self.head)

    def _recover(self) -> int:
        segs = sorted(int(m.group(1)) for p in self.dir.iterdir() if (m := _SEG_RE.match(p.name)))
        if not segs:
            return 0
        last = segs[-1]
        path = self.dir / _seg_name(last)
        n = path.stat().st_size // RECORD_BYTES
        os.truncate(path, n * RECORD_BYTES)
        return last + n

    def _open_for(self, seq: int) -> int:
        first = seq - seq % self.segment_records
        if self._fd is None or first != self._seg_first:
            if self._fd is not None:
                self._dirty.add(self._fd)
            path = self.dir / _seg_name(first)
            created = not path.exists()
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            self._seg_first = first
            if created and self.fsync:
                # The new file's name must survive a power cut as well as its records.
                dfd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        return self._fd

    def _records(self, payloads: np.ndarray, ingest_ns: int | np.ndarray) -> np.ndarray:
        """Lay payload rows out as records, in a buffer the writer keeps between appends.

        A fresh array per append (and `tobytes` of it) cost ~85 % of an append: every
        chunk's memory was new pages, faulted in and zeroed (docs/PERFORMANCE.md, "Design
        decisions": "Log appends through a reused buffer").
        `on_durable` keeps the records until the commit, so then they get their own array.
        """
        n, width = payloads.shape
        if self.on_durable is not None:
            rec = np.empty((n, RECORD_BYTES), dtype=np.uint8)
        else:
            if len(self._buf) < n:
                self._buf = np.empty((n, RECORD_BYTES), dtype=np.uint8)
            rec = self._buf[:n]
        ts = np.ascontiguousarray(np.broadcast_to(np.asarray(ingest_ns, dtype="<i8"), (n,)))
        rec[:, :PAYLOAD_OFFSET] = ts.view(np.uint8).reshape(n, 8)
        rec[:, PAYLOAD_OFFSET:PAYLOAD_OFFSET + width] = payloads
        rec[:, PAYLOAD_OFFSET + width:] = 0
        return rec

    def append(self, payloads: np.ndarray, ingest_ns: int | np.ndarray) -> int:
        """Append payload rows (n, <=56 bytes each); return the first sequence number."""
        n = payloads.shape[0]
        rec = self._records(payloads, ingest_ns)
        first = self.size
        done = 0
        while done < n:
            seq = self.size
            room = self.segment_records - seq % self.segment_records
            take = min(room, n - done)
            fd = self._open_for(seq)
            data = rec[done:done + take]       # written from the array itself: no copy
            self.size += take            # before the write: a failed one leaves a tail to roll back
            written = os.pwrite(fd, data, (seq % self.segment_records) * RECORD_BYTES)
            if written != data.nbytes:   # the disk filled during the call
                name = _seg_name(seq - seq % self.segment_records)
                raise OSError(errno.ENOSPC, f"short write to log segment {name}: {written} of {data.nbytes} bytes")
            done += take
        if self.on_durable is not None:
            self._undurable.append(rec)
        return first

    def commit(self) -> int:
        """Make everything appended durable, then publish it; return the new head."""
        if self.size == self.head:
            return self.head
        for fd in list(self._dirty):     # one at a time: a failure leaves the rest to rollback()
            if self.fsync:
                os.fsync(fd)
            self._dirty.discard(fd)
            os.close(fd)
        if self.fsync and self._fd is not None:
            os.fsync(self._fd)
        if self.on_durable is not None and self._undurable:
            recs, self._undurable = self._undurable, []
            self.on_durable(self.head, recs[0] if len(recs) == 1 else np.concatenate(recs))
        self.head = self.size
        write_u64(self.dir / "head", self.head)
        return self.head

    def rollback(self) -> int:
        """Forget every record appended since the last commit: truncate the log to `head`.

        Segments begun after `head` are removed. If this raises, the log still has a
        tail beyond `head` (`size > head`): call it again before the next `append`.
        """
        for fd in self._dirty | ({self._fd} if self._fd is not None else set()):
            try:
                os.close(fd)
            except OSError:
                pass
        self._dirty.clear()
        self._fd = None
        self._undurable = []
        first = self.head - self.head % self.segment_records
        for p in self.dir.iterdir():
            m = _SEG_RE.match(p.name)
            if m and int(m.group(1)) > first:
                remove_in(self.dir, p)
        path = self.dir / _seg_name(first)
        if path.exists():
            os.truncate(path, (self.head - first) * RECORD_BYTES)
        self.size = self.head
        return self.head

    def close(self) -> None:
        """Commit and release file handles (if the commit fails, roll back, then raise)."""
        try:
            self.commit()
        except OSError:
            self.rollback()
            raise
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LogReader:
    """Read ranges of records by sequence number (used inside Spark tasks)."""

    def __init__(self, log_dir: str | os.PathLike, segment_records: int = DEFAULT_SEGMENT_RECORDS):
        self.dir = Path(log_dir)
        self.segment_records = segment_records

    def head(self) -> int:
        """Return the number of durable records."""
        return read_head(self.dir)

    def read(self, start: int, end: int, buffer: np.ndarray | None = None) -> np.ndarray:
        """Return records [start, end) as an (n, RECORD_BYTES) uint8 array.

        Into `buffer` (a flat uint8 array, large enough) when given: the result is then a
        view of it, valid until the buffer's next use.
        """
        n_bytes = (end - start) * RECORD_BYTES
        if buffer is None:
            flat = np.empty(n_bytes, dtype=np.uint8)
        elif buffer.size < n_bytes:
            raise ValueError(f"read buffer of {buffer.size} bytes for {n_bytes}")
        else:
            flat = buffer[:n_bytes]
        out = flat.reshape(end - start, RECORD_BYTES)
        seq = start
        while seq < end:
            first = seq - seq % self.segment_records
            take = min(end, first + self.segment_records) - seq
            with open(self.dir / _seg_name(first), "rb", buffering=0) as f:
                f.seek((seq - first) * RECORD_BYTES)
                view = memoryview(flat[(seq - start) * RECORD_BYTES:(seq - start + take) * RECORD_BYTES])
                got = f.readinto(view)
                if got != take * RECORD_BYTES:
                    raise IOError(f"log segment {first} is short: wanted {take} records at {seq}")
            seq += take
        return out


def wait_for(predicate, timeout: float, interval: float = 0.01) -> bool:
    """Poll `predicate` until true or `timeout` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --------------------------------------------------------------------------- retention

HOLD = "hold"           # u64 LE, optional: a reader outside the job still needs records from here


def segment_firsts(log_dir: str | os.PathLike) -> list[int]:
    """First sequence numbers of the segments on disk, in order."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _SEG_RE.match(n)))


def first_retained(log_dir: str | os.PathLike) -> int:
    """The lowest sequence number still on disk (0 for an empty log)."""
    firsts = segment_firsts(log_dir)
    return firsts[0] if firsts else 0


def read_hold(log_dir: str | os.PathLike) -> int | None:
    """The hold a reader outside the job placed (`HOLD`), None if there is none."""
    path = Path(log_dir) / HOLD
    return read_u64(path) if path.exists() else None


def write_hold(log_dir: str | os.PathLike, seq: int) -> None:
    """Keep records from `seq` on until the hold moves or is removed (a tap, the tests' reference)."""
    write_u64(Path(log_dir) / HOLD, seq)


def delete_segments(log_dir: str | os.PathLike, firsts: list[int]) -> int:
    """Delete the given segments (retention.segments_to_delete); return the bytes freed.

    Oldest first, so the log on disk always stays one contiguous range; a reader of a
    deleted range gets FileNotFoundError naming the segment.
    """
    return sum(remove_file_in(log_dir, Path(log_dir) / _seg_name(first)) for first in sorted(firsts))

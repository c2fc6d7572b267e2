"""Per-shard files: each symbol shard's records of the ingress log, so a shard task reads only its own.

With `--shards N` each stateful task would read its batch's whole log range and keep its
own symbols, so the bytes read per event grew with N. The ingress also writes each
commit's records split by shard (`split_records`: the shard `records.shard_rows` gives),
and a task reads its shard's records from here (`read_shard`): 72 bytes per event read,
whatever N.

The files are a cache of the log, never a source of truth: nothing here is fsync'd on a
local file system (on a shared one, NFS and the like, each write is flushed before
`covered` moves, as another machine's reader sees only flushed data); an ingress start
removes them and rebuilds them from the log, from the first record a job may still need
(`ShardFileWriter.open`); a reader uses them only for a range they cover and otherwise
reads the log (`read_shard` returns None). A job on a log written with
another shard count, or with no ingress running, is therefore only slower, never wrong.

Layout, beside the log::

    shards-<N>/<generation>/start      u64 LE: the first sequence number these files hold
    shards-<N>/<generation>/span       u64 LE: records of the log one segment spans
    shards-<N>/<generation>/covered    u64 LE: every record of [start, covered) is in the files
    shards-<N>/<generation>/<s>/seg-<F>.log    shard s's records with F <= seq < F + span

A record (`SHARD_RECORD`, 72 bytes) is the sequence number (i8 LE), then the 64-byte log
record; a segment holds its shard's records in ascending order. A segment spans the same
sequence numbers as a log segment (2^20 records: ~72/N MiB per shard file): the number
of files stays N per log segment, a reader finds the segments of a range by arithmetic,
and retention deletes a span's shard segments once all its records are below what the
job may read again (`delete_shard_segments`; at the latest with the log segment). Every
segment of a span is created when the span begins, so a missing one means deleted, never empty.

Each ingress start makes a new generation (its name a ns time stamp; readers take the
newest) and removes the others. A reader checks `start` and `covered` of one generation
and then reads only files of that generation: below `covered` they never change, and a
file of a removed generation is gone (the reader falls back to the log), never replaced
by a half-rebuilt one of the same name.
"""
from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from collector.safe_delete import link_free, remove_file_in, remove_in

from engine.storage.diskspace import is_shared_fs
from engine.formats.log import (RECORD_BYTES, LogReader, LogWriter, first_retained, read_u64, segment_firsts,
                                write_u64)
from engine.formats.records import record_symbols, shard_of

log = logging.getLogger(__name__)

SHARD_RECORD = np.dtype([("seq", "<i8"), ("rec", "u1", (RECORD_BYTES,))])
SHARD_RECORD_BYTES = SHARD_RECORD.itemsize
START, SPAN, COVERED = "start", "span", "covered"
CATCH_UP_CHUNK = 1 << 18         # log records read per step of a rebuild (16 MiB)
CATCH_UP_LIMIT = 4 << 20         # a larger gap starts a new generation at its end instead
RETRY_S = 1.0                    # after a failed write, the shard files rest this long
_DIR_RE = re.compile(r"^shards-(\d+)$")
_GEN_RE = re.compile(r"^\d{20}$")


def _seg_name(first: int) -> str:
    return f"seg-{first:020d}.log"


def split_records(first: int, rec: np.ndarray, n_shards: int) -> list[np.ndarray]:
    """Split consecutive log records (sequence numbers from `first`) into one SHARD_RECORD array per shard.

    One stable sort by shard (a radix sort of small ints: its cost does not grow with
    `n_shards`, where one pass per shard did: 2-3x at 16 shards), then one gather.
    """
    shard = shard_of(record_symbols(rec), n_shards)
    order = np.argsort(shard.astype(np.min_scalar_type(n_shards - 1)), kind="stable")
    out = np.empty(len(rec), SHARD_RECORD)
    out["seq"] = order
    out["seq"] += first
    out["rec"] = rec.view(f"V{RECORD_BYTES}").reshape(-1)[order].view(np.uint8).reshape(-1, RECORD_BYTES)
    return np.split(out, np.cumsum(np.bincount(shard, minlength=n_shards))[:-1])


def remove_shard_files(log_dir: str | os.PathLike) -> None:
    """Remove every shard file of a log (all shard counts, all generations)."""
    for path in _shard_dirs(log_dir):
        try:
            remove_in(log_dir, path)                # a linked shard folder goes as a link
        except OSError as e:
            log.warning("could not remove shard files %s: %s", path, e)


def _shard_dirs(log_dir: str | os.PathLike) -> list[Path]:
    try:
        return [Path(log_dir) / n for n in os.listdir(log_dir) if _DIR_RE.match(n)]
    except FileNotFoundError:
        return []


def _generations(folder: Path) -> list[Path]:
    try:
        return sorted(folder / n for n in os.listdir(folder) if _GEN_RE.match(n))
    except FileNotFoundError:
        return []


class ShardFileWriter:
    """Keep a log's shard files up to date: the log writer's commits call `add`.

    Example::

        writer = LogWriter(log_dir)
        shards = ShardFileWriter.open(writer, n_shards=4, consumed=read_consumed(log_dir))
        writer.append(payloads, ingest_ns)
        writer.commit()          # fsync, shards.add(...), then head
        writer.close(); shards.close()

    A failed write (a full disk) never fails the log's commit: the files rest for
    `RETRY_S`, readers read the log meanwhile, and the next commit after that starts a
    new generation and catches up from the log.
    """

    def __init__(self, log_dir: str | os.PathLike, n_shards: int, start: int, span: int, sync: bool = False):
        """Follow a log from record `start` on; the first `add` (or `open`) makes the files.

        `sync`: flush each write of the files before `covered` moves (a shared file system).
        """
        self.log_dir = Path(log_dir)
        self.sync = sync
        self.n_shards = n_shards
        self.span = span
        self.covered = start
        self.dir: Path | None = None         # the current generation
        self._fds: list[int] = []
        self._covered_fd: int | None = None
        self._seg: int | None = None         # first seq of the span the open files are for
        self._broken = True                  # no generation yet
        self._retry_at = 0.0
        self._warned_at = -60.0

    @classmethod
    def open(cls, writer: LogWriter, n_shards: int, consumed: int) -> "ShardFileWriter | None":
        """Remove the log's shard files; with `n_shards` > 1 rebuild them and follow `writer`'s commits.

        The rebuild covers the records a job may still read: from `consumed` (or the first
        retained record) to the head, so its size is bounded by the backlog.
        """
        remove_shard_files(writer.dir)
        if n_shards <= 1:
            return None
        start = min(writer.head, max(consumed, first_retained(writer.dir)))
        t0 = time.monotonic()
        shards = cls(writer.dir, n_shards, start, writer.segment_records, sync=is_shared_fs(writer.dir))
        try:
            shards._restart(start)
            shards._catch_up(writer.head)
        except Exception as e:       # a full disk, say: the ingress starts anyway, jobs read the log
            shards._failed(e)
        log.info("shard files for %d shards rebuilt from the log: records %d..%d in %.2f s", n_shards,
                 start, shards.covered, time.monotonic() - t0)
        writer.on_durable = shards.add
        return shards

    def add(self, first: int, rec: np.ndarray) -> None:
        """Add log records [first, first + len(rec)), just made durable (LogWriter.on_durable)."""
        try:
            if self._broken or first != self.covered:
                if time.monotonic() < self._retry_at:
                    return
                self._restart(self.covered if 0 <= first - self.covered <= CATCH_UP_LIMIT else first)
                self._catch_up(first)
            self._write(first, rec)
        except Exception as e:       # a cache: whatever goes wrong must not fail the log's commit
            self._failed(e)

    def close(self) -> None:
        """Close the open files (they stay: a job reads them until the next ingress start)."""
        self._close_files()

    # ------------------------------------------------------------------ internals

    def _new_generation(self, start: int) -> Path:
        parent = self.log_dir / f"shards-{self.n_shards}"
        newest = _generations(parent)
        name = max(time.time_ns(), int(newest[-1].name) + 1 if newest else 0)
        remove_shard_files(self.log_dir)
        folder = parent / f"{name:020d}"
        for s in range(self.n_shards):
            (folder / str(s)).mkdir(parents=True)
        write_u64(folder / START, start)
        write_u64(folder / SPAN, self.span)
        write_u64(folder / COVERED, start)   # last: a reader takes a generation by its `covered`
        return folder

    def _restart(self, start: int) -> None:
        self._close_files()
        self.covered = start
        self.dir = self._new_generation(start)
        self._covered_fd = os.open(self.dir / COVERED, os.O_WRONLY)
        self._broken = False

    def _catch_up(self, to: int) -> None:
        reader = LogReader(self.log_dir, self.span)
        while self.covered < to:
            end = min(to, self.covered + CATCH_UP_CHUNK)
            self._write(self.covered, reader.read(self.covered, end))

    def _open_span(self, seg: int) -> None:
        if seg == self._seg:
            return
        self._close_span()
        for s in range(self.n_shards):
            self._fds.append(os.open(self.dir / str(s) / _seg_name(seg), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                                     0o644))
        self._seg = seg

    def _close_span(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds, self._seg = [], None

    def _close_files(self) -> None:
        self._close_span()
        if self._covered_fd is not None:
            try:
                os.close(self._covered_fd)
            except OSError:
                pass
            self._covered_fd = None

    def _write(self, first: int, rec: np.ndarray) -> None:
        done = 0
        while done < len(rec):
            seq = first + done
            seg = seq - seq % self.span
            take = min(len(rec) - done, seg + self.span - seq)
            self._open_span(seg)
            for fd, part in zip(self._fds, split_records(seq, rec[done:done + take], self.n_shards)):
                data = part.view(np.uint8)
                if len(data) and os.write(fd, data) != len(data):
                    raise OSError(f"short write to a shard file of {self.dir}")
                if len(data) and self.sync:
                    os.fdatasync(fd)
            done += take
        self.covered = first + len(rec)
        os.pwrite(self._covered_fd, self.covered.to_bytes(8, "little"), 0)   # as write_u64, one call
        if self.sync:
            os.fsync(self._covered_fd)

    def _failed(self, err: BaseException) -> None:
        self._close_files()
        self._broken = True
        self._retry_at = time.monotonic() + RETRY_S
        now = time.monotonic()
        if now - self._warned_at >= 60:
            self._warned_at = now
            log.warning("shard files stopped at record %d (jobs read the log from there; retrying in "
                        "%.0f s): %s", self.covered, RETRY_S, err)


# --------------------------------------------------------------------------- reading

class ShardRecords(NamedTuple):
    """One shard's records of a range: sequence numbers, (n, 64) log records, bytes read."""
    seq: np.ndarray
    rec: np.ndarray
    nbytes: int


def read_shard(log_dir: str | os.PathLike, n_shards: int, shard: int, lo: int, hi: int) -> ShardRecords | None:
    """Return `shard`'s records with sequence numbers in [lo, hi), or None if the shard files do not cover it.

    None sends the caller to the log (LogReader.read and records.shard_rows).
    """
    gens = _generations(Path(log_dir) / f"shards-{n_shards}")
    if not gens or hi <= lo:
        return None
    gen = gens[-1]
    covered = read_u64(gen / COVERED)        # first: `start` and `span` were written before it
    start, span = read_u64(gen / START), read_u64(gen / SPAN)
    if not (start <= lo and hi <= covered and span > 0):
        return None
    parts, nbytes = [], 0
    for seg in range(lo - lo % span, hi, span):
        try:
            fd = os.open(gen / str(shard) / _seg_name(seg), os.O_RDONLY)
        except FileNotFoundError:            # a removed generation, or retention went past lo
            return None
        try:
            got = _read_range(fd, lo, hi)
        finally:
            os.close(fd)
        if got is None:
            return None
        parts.append(got[0])
        nbytes += got[1]
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    seq = out["seq"]
    if len(seq) and (seq[0] < lo or seq[-1] >= hi or bool((np.diff(seq) <= 0).any())):
        return None                          # never expected; the log is the truth
    return ShardRecords(seq, out["rec"], nbytes)


def _seq_at(fd: int, i: int) -> int:
    return int.from_bytes(os.pread(fd, 8, i * SHARD_RECORD_BYTES), "little", signed=True)


def _lower_bound(fd: int, n: int, seq: int) -> int:
    """The first record index in [0, n) whose seq is >= `seq` (records ascend)."""
    a, b = 0, n
    while a < b:
        m = (a + b) // 2
        if _seq_at(fd, m) < seq:
            a = m + 1
        else:
            b = m
    return a


def _read_range(fd: int, lo: int, hi: int) -> tuple[np.ndarray, int] | None:
    """Read one segment's records with seq in [lo, hi); return them and the bytes read."""
    n = os.fstat(fd).st_size // SHARD_RECORD_BYTES
    i, j = _lower_bound(fd, n, lo), _lower_bound(fd, n, hi)
    probes = 8 * (max(1, n).bit_length() * 2)
    out = np.empty(j - i, SHARD_RECORD)
    want = (j - i) * SHARD_RECORD_BYTES
    if want and os.preadv(fd, [out.view(np.uint8)], i * SHARD_RECORD_BYTES) != want:
        return None
    return out, want + probes


# --------------------------------------------------------------------------- retention

def delete_shard_segments(log_dir: str | os.PathLike, below: int) -> int:
    """Delete the shard segments whose records all lie below `below` (the first retained log record).

    Returns the bytes freed. Called by the retention worker after it deletes log segments.
    """
    freed = 0
    for folder in _shard_dirs(log_dir):
        n_shards = int(_DIR_RE.match(folder.name).group(1))
        for gen in _generations(folder):
            span = read_u64(gen / SPAN)
            if span <= 0:
                continue
            for shard_dir in (gen / str(s) for s in range(n_shards)):
                if not link_free(log_dir, shard_dir):
                    continue                        # a link on the way leads outside: nothing there is ours
                for first in segment_firsts(shard_dir):
                    if first + span > below:
                        break
                    freed += remove_file_in(log_dir, shard_dir / _seg_name(first))
    return freed

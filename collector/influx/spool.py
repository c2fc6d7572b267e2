"""Bounded on-disk store of encoded batches the server did not take yet (the writer's outage buffer)."""
from __future__ import annotations

import fcntl
import logging
import os
import re
import stat
import threading
from collections import deque
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote, unquote

from collector.safe_delete import remove_tree

log = logging.getLogger(__package__)     # the writer's logger, as before the split into modules


class SpoolFile(NamedTuple):
    path: Path
    seq: int
    points: int
    nbytes: int
    rp: str | None


_SPOOL_NAME = re.compile(r"^(\d{16})\.(\d+)\.([^.]*)\.lp$")
_DEFAULT_RP = "@"
_TARGET = ".target"                      # the server and database its points are for


class Spool:
    """Folder of line-protocol files named `<seq>.<points>.<rp>.lp`, oldest = lowest seq.

    Bounded in bytes: past `max_bytes` the oldest files are deleted and their points
    counted as dropped. Files are written to a temporary name and renamed, so a crash
    leaves whole files only. One writer per folder (an exclusive lock file).

    With a `target` (the server and database), `open` adopts the files of sibling folders
    of the same target that no writer holds (a process that ended during an outage), so
    whichever process of the state folder runs next backfills them; `close` removes the
    folder once it is empty. So there are never more folders than writers plus the
    spools of other targets, and all of them stay within their byte bound.
    """

    def __init__(self, path: Path, max_bytes: int, target: str | None = None):
        self.path = Path(path)
        self.target = target
        self.max_bytes = max(0, int(max_bytes))
        self.chunk_bytes = max(1, min(4 << 20, self.max_bytes // 16))
        self._files: deque[SpoolFile] = deque()
        self._inflight: SpoolFile | None = None
        self._lock = threading.Lock()
        self._lockfd: int | None = None
        self._seq = 0
        self.nbytes = 0
        self.npoints = 0

    def open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if self.path.is_symlink():           # its files are deleted: never in a folder behind a link
            raise RuntimeError(f"metrics spool {self.path} is a link; it must be a real folder")
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"metrics spool {self.path} is in use by another writer") from None
        self._lockfd = fd
        found = []
        for f in self.path.iterdir():
            m = _SPOOL_NAME.match(f.name)
            st = os.lstat(f)
            if not stat.S_ISREG(st.st_mode):
                if m or f.name.endswith(".tmp"):
                    log.warning("metrics spool %s: %s is not a regular file (a link?); removed as such",
                                self.path, f.name)
                    remove_tree(f)                       # a link goes as a link: its target stays
            elif m:
                rp = unquote(m[3])
                found.append(SpoolFile(f, int(m[1]), int(m[2]), st.st_size,
                                        None if rp == _DEFAULT_RP else rp))
            elif f.name.endswith(".tmp"):
                remove_tree(f)                           # a write cut short by a crash
        found.sort(key=lambda s: s.seq)
        with self._lock:
            self._files.extend(found)
            self._seq = found[-1].seq + 1 if found else 0
            self.nbytes = sum(s.nbytes for s in found)
            self.npoints = sum(s.points for s in found)
        if self.target is not None:
            _write_new(self.path / _TARGET, self.target.encode())

    def adopt_orphans(self) -> tuple[int, int]:
        """Move the files of unheld sibling spools of our target into ours; return (points, dropped)."""
        if self.target is None or self._lockfd is None:
            return 0, 0
        adopted = dropped = 0
        try:
            siblings = sorted(p for p in self.path.parent.iterdir() if p != self.path)
        except OSError:
            return 0, 0
        for sib in siblings:
            try:
                if not stat.S_ISDIR(os.lstat(sib).st_mode) or _read(sib / _TARGET).decode() != self.target:
                    continue
                fd = os.open(sib / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except (OSError, UnicodeDecodeError):
                continue                              # not a spool, another target's, or a link
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue                              # its writer is alive: it backfills itself
            try:
                n, d = self._take_files(sib)
                adopted, dropped = adopted + n, dropped + d
                remove_tree(sib)
            except OSError as e:
                log.warning("metrics spool %s: cannot adopt %s (%s)", self.path, sib, e)
            finally:
                os.close(fd)
        return adopted, dropped

    def _take_files(self, sib: Path) -> tuple[int, int]:
        found = []
        for f in sib.iterdir():
            m = _SPOOL_NAME.match(f.name)
            if m and stat.S_ISREG(os.lstat(f).st_mode):
                found.append((int(m[1]), f, int(m[2]), m[3]))
        adopted = dropped = 0
        for _, f, n, rp in sorted(found):
            with self._lock:
                seq = self._seq
                self._seq += 1
                dest = self.path / f"{seq:016d}.{n}.{rp}.lp"
                os.rename(f, dest)
                size = os.lstat(dest).st_size
                rp = unquote(rp)
                self._files.append(SpoolFile(dest, seq, n, size, None if rp == _DEFAULT_RP else rp))
                self.nbytes += size
                self.npoints += n
                adopted += n
                dropped += self._evict()
        return adopted, dropped

    def close(self) -> None:
        if self._lockfd is not None:
            with self._lock:
                empty = not self._files and self._inflight is None
            if empty:                                 # nothing left to backfill: the folder goes
                try:
                    remove_tree(self.path)
                except OSError as e:
                    log.warning("metrics spool %s: empty but not removed (%s)", self.path, e)
            os.close(self._lockfd)
            self._lockfd = None

    def __len__(self) -> int:
        return len(self._files)

    def append(self, body: bytes, rp: str | None) -> tuple[int, int]:
        """Store encoded lines; return (points stored, points dropped to stay in bounds)."""
        stored = dropped = 0
        pos = 0
        while pos < len(body):
            end = pos + self.chunk_bytes
            if end >= len(body):
                end = len(body)
            else:
                nl = body.rfind(b"\n", pos, end)
                end = (nl if nl >= pos else body.index(b"\n", end)) + 1
            chunk = body[pos:end]
            pos = end
            n = chunk.count(b"\n")
            with self._lock:
                seq = self._seq
                self._seq += 1
                name = f"{seq:016d}.{n}.{quote(rp or _DEFAULT_RP, safe='')}.lp"
                tmp = self.path / (name + ".tmp")
                _write_new(tmp, chunk)
                os.replace(tmp, self.path / name)
                self._files.append(SpoolFile(self.path / name, seq, n, len(chunk), rp))
                self.nbytes += len(chunk)
                self.npoints += n
                stored += n
                dropped += self._evict()
        return stored, dropped

    def _evict(self) -> int:
        dropped = 0
        while self.nbytes > self.max_bytes and self._files:
            idx = 1 if self._files[0] is self._inflight else 0
            if idx >= len(self._files):
                break
            f = self._files[idx]
            del self._files[idx]
            remove_tree(f.path)
            self.nbytes -= f.nbytes
            self.npoints -= f.points
            dropped += f.points
        return dropped

    def claim_oldest(self) -> tuple[SpoolFile, bytes] | None:
        """Return the oldest file and its bytes, kept from eviction until `release`."""
        with self._lock:
            if not self._files:
                return None
            f = self._inflight = self._files[0]
        try:
            return f, _read(f.path)
        except OSError as e:                              # deleted by hand: forget it
            log.warning("metrics spool file %s unreadable (%s); skipped", f.path, e)
            self.release(f, done=True)
            return None

    def release(self, f: SpoolFile, done: bool) -> None:
        """End a claim; `done` deletes the file (its points reached the server)."""
        with self._lock:
            self._inflight = None
            if done:
                try:
                    self._files.remove(f)
                except ValueError:
                    return
                remove_tree(f.path)
                self.nbytes -= f.nbytes
                self.npoints -= f.points


def _write_new(path: Path, data: bytes) -> None:
    """Write a new file at `path`; whatever was there (a planted link too) is replaced, never followed."""
    remove_tree(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)      # a link put in its place is not read
    with os.fdopen(fd, "rb") as f:
        return f.read()

"""Free space of the state folder's file system, and when it is too low to take more input.

The ingress reads it with one `statvfs` every fraction of a second (never per record)
and mutes below a low-space mark, so it stops before the disk is full; a write that
fails anyway (ENOSPC, EIO) mutes it too, until space comes back. The job uses
`is_disk_full` to turn a failure deep in Spark into one line for the user.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

RESUME_FLOOR_BYTES = 64 << 20        # after a failed write: at most this much room before resuming ...
RESUME_FLOOR_SHARE = 0.10            # ... or this share of a small disk


@dataclass(frozen=True)
class DiskSpace:
    """Bytes an unprivileged writer may still use, of the file system's total."""
    free: int
    total: int


@dataclass(frozen=True)
class SpaceMark:
    """When to mute and when to resume, from `min_free_bytes` and `min_free_percent`.

    The mark is the smaller of the two; resuming needs twice the mark, and after a
    write failed, at least `RESUME_FLOOR_*` more, so that a disk hovering at full does
    not make the ingress fail, resume and fail again on every few kilobytes.
    """
    min_free_bytes: int
    min_free_percent: int

    def mark(self, space: DiskSpace) -> int:
        """Return the free bytes below which the ingress mutes (0: never before a failure)."""
        return max(0, min(self.min_free_bytes, space.total * self.min_free_percent // 100))

    def low(self, space: DiskSpace) -> bool:
        """Return whether free space is below the mark."""
        return space.free < self.mark(space)

    def recovered(self, space: DiskSpace, after_failure: bool) -> bool:
        """Return whether there is room enough to take input again."""
        need = 2 * self.mark(space)
        if after_failure:
            need = max(need, min(RESUME_FLOOR_BYTES, int(space.total * RESUME_FLOOR_SHARE)))
        return space.free >= max(1, need)


def disk_space(path: str | os.PathLike) -> DiskSpace:
    """Return the free and total bytes of the file system holding `path`."""
    st = os.statvfs(path)
    return DiskSpace(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)


def is_disk_full(exc: BaseException) -> bool:
    """Return whether an error (or its cause, or Spark's text of it) is a full or failing disk."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(exc)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def full_path(exc: BaseException | None, candidates: list[Path]) -> Path:
    """Return where a failed write went: the folder among `candidates` its error names, else the fullest.

    A mount under the state folder (results/, checkpoint/) can be full while the state
    folder's own file system has room, so the one-line error must `statvfs` that mount.
    """
    named: list[Path] = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        texts = [str(exc)] + ([str(exc.filename)] if isinstance(exc, OSError) and exc.filename else [])
        named += [c for c in candidates for t in texts if str(c) in t or str(c.resolve()) in t]
        exc = exc.__cause__ or exc.__context__
    if named:
        return max(named, key=lambda c: len(str(c)))          # the deepest folder named
    fullest, least = candidates[-1], None
    for c in candidates:
        try:
            free = disk_space(c).free
        except OSError:
            continue
        if least is None or free < least:
            fullest, least = c, free
    return fullest


def describe_free(path: str | os.PathLike) -> str:
    """Return 'N bytes free in PATH' (or why it is unknown), for one-line errors."""
    try:
        return f"{disk_space(path).free:,} bytes free in {path}"
    except OSError as e:
        return f"free space in {path} unknown ({e.strerror})"


# File systems that other machines share: a write there is visible to another machine's
# reader only once flushed (close-to-open consistency), however it is ordered locally.
SHARED_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p", "afs", "gpfs",
             "beegfs", "ocfs2", "gfs2", "fuse"}


def fs_type(path: str | os.PathLike, mountinfo: str | None = None) -> str:
    """Return the type of the file system holding `path` ("" if unknown), from /proc/self/mountinfo."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo") as f:
                mountinfo = f.read()
        except OSError:
            return ""
    target = os.path.realpath(path)
    best, kind = -1, ""
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = parts[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:      # the deepest mount wins; a later one over the same point too
            best, kind = len(point), rest.split()[0]
    return kind


def is_shared_fs(path: str | os.PathLike) -> bool:
    """Return whether `path` is on a file system other machines share (or of an unknown type)."""
    kind = fs_type(path)
    return not kind or kind.split(".")[0] in SHARED_FS

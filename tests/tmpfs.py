"""A small real file system for tests that fill a disk: a tmpfs mounted for the test."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size_mb: int):
    """Mount a `size_mb` MiB tmpfs at `where` for the block; skip the test where mounting is not allowed."""
    where.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {res.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(path: Path, chunk: int = 1 << 20) -> int:
    """Write zeros to `path` until the disk is full; return the bytes written."""
    block = bytes(chunk)
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                n = os.write(fd, block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if chunk > 4096:
                    chunk //= 16
                    block = bytes(chunk)
                    continue
                return written
            written += n
    finally:
        os.close(fd)

"""The ingress's dead-letter file: bad frames set aside, one JSON line each, within a size cap.

Each line holds the reason, the stream, the peer, the bad run's length and at most
`PREFIX_BYTES` of it (as hex), so a line is bounded whatever a sender claims. The file
rotates to `<name>.1` when it reaches half the cap, so the two together never pass
`max_bytes`; lines beyond what one call may keep are dropped and counted (the counters
in `stats.json` keep every bad run). A failed write (a full disk) is truncated back to
the last whole line and counted as dropped: bad input never stops the ingress.
"""
from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path

PREFIX_BYTES = 256               # bytes of a bad run kept (as hex)


@dataclass(frozen=True)
class DeadLetter:
    """One bad run of bytes from one connection."""
    ts_ns: int
    stream: str
    peer: str
    reason: str
    data: bytes

    def line(self) -> bytes:
        """Return the entry as one bounded JSON line."""
        return (json.dumps({"ts_ns": self.ts_ns, "stream": self.stream, "peer": self.peer,
                            "reason": self.reason, "length": len(self.data),
                            "hex": self.data[:PREFIX_BYTES].hex()}) + "\n").encode()


class DeadLetterFile:
    """Append-only JSON lines with rotation; `write` never raises on a full disk."""

    def __init__(self, path: str | os.PathLike, max_bytes: int):
        self.path = Path(path)
        self.rotated = self.path.with_name(self.path.name + ".1")
        self.half = max(1, max_bytes // 2)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.written = self.dropped = self.rotations = 0
        self.error: OSError | None = None          # the last failed write, for the caller to log

    def write(self, letters: list[DeadLetter]) -> int:
        """Append entries, rotating once at most; return how many were dropped."""
        lines = [d.line() for d in letters]
        kept, batch, room, rotated = 0, [], self.half - self.size, False
        for ln in lines:
            if len(ln) > room:
                if rotated:
                    break
                kept += self._flush(batch)
                batch, rotated = [], True
                if not self._rotate():
                    break                          # appending on would pass the cap
                room = self.half
                if len(ln) > room:
                    break
            batch.append(ln)
            room -= len(ln)
        kept += self._flush(batch)
        self.written += kept
        self.dropped += len(lines) - kept
        return len(lines) - kept

    def _flush(self, lines: list[bytes]) -> int:
        if not lines:
            return 0
        data = b"".join(lines)
        try:
            n = os.write(self._fd, data)
            if n != len(data):
                raise OSError(errno.ENOSPC, f"short write to {self.path.name}: {n} of {len(data)} bytes")
        except OSError as e:
            self.error = e
            try:
                os.ftruncate(self._fd, self.size)     # no torn line
            except OSError:
                pass
            return 0
        self.size += len(data)
        return len(lines)

    def _rotate(self) -> bool:
        try:
            os.replace(self.path, self.rotated)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            self.error = e
            return False
        os.close(self._fd)
        self._fd, self.size = fd, 0
        self.rotations += 1
        return True

    def close(self) -> None:
        """Release the file."""
        os.close(self._fd)

"""Copy a detached server's output to its log file, rotated and bounded, for as long as the server writes.

`influxd` logs to its standard output and outlives the command that started it, so the
rotation cannot live in that command: `InfluxServer.start` pipes the output into this small
process of its own (`python collector/logpump.py PATH MAX_BYTES BACKUPS`), which ends
when the server closes the pipe. A file a child holds open could not be rotated under it.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

#: A server's log: rotated at this size, this many older files kept.
LOG_MAX_BYTES, LOG_BACKUPS = 10 << 20, 3


def spawn_logged(argv: list[str], log_path: Path, cwd: Path, max_bytes: int = LOG_MAX_BYTES,
                 backups: int = LOG_BACKUPS) -> subprocess.Popen:
    """Start a detached server whose output goes through a pump of its own into a rotated, bounded log.

    Both get their own session: a Ctrl-C of the shell that started them stops neither.
    """
    read_end, write_end = os.pipe()
    try:
        subprocess.Popen([sys.executable, str(Path(__file__)), str(log_path), str(max_bytes), str(backups)],
                         stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         cwd=cwd, start_new_session=True)       # stdlib only: starts in ~20 ms
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.STDOUT,
                                cwd=cwd, start_new_session=True)
    finally:
        os.close(read_end)
        os.close(write_end)


#: Longest line kept whole; a longer one is cut into pieces of this size.
MAX_LINE_BYTES = 64 * 1024


def pump(stream, path: Path, max_bytes: int, backups: int) -> int:
    """Copy `stream`'s lines to `path`, rotated at `max_bytes` (`path.1` .. `path.<backups>`); return lines copied."""
    handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    n = 0
    try:
        for line in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
            handler.emit(logging.makeLogRecord({"msg": line.decode("utf-8", "replace").rstrip("\n")}))
            n += 1
    finally:
        handler.close()
    return n


def main(argv: list[str]) -> int:
    """Run the pump on standard input; a Ctrl-C of a shell it was started from does not end it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path, max_bytes, backups = Path(argv[0]), int(argv[1]), int(argv[2])
    pump(sys.stdin.buffer, path, max_bytes, backups)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Open-file limits of the processes the project starts: InfluxDB holds files per shard.

Example::

    with hard_open_files_limit():
        proc = subprocess.Popen([...])          # the child starts with the hard limit
    print(open_files_limit(proc.pid))
"""
from __future__ import annotations

import contextlib
import logging
import resource

log = logging.getLogger(__name__)

@contextlib.contextmanager
def hard_open_files_limit():
    """Raise this process' soft open-file limit to the hard one while a child is forked (it inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        log.warning("cannot raise the open-file limit from %s to %s (%s)", soft, hard, e)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_files_limit(pid: int) -> str:
    """Return a process' soft open-file limit as text (`unlimited`, `?` when unknown)."""
    try:
        soft, _hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return "?"
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)

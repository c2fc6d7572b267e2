"""Start `marketspread` commands as a fleet of processes and stop them all, whatever happens.

Shared by the whole-path benchmarks (bench/e2e.py) and `marketspread bench`
(perf/perftest.py). Each process leads a session of its own, so stopping one also
reaches what it started (Spark's JVM and Python workers) and nothing outlives a run.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from collector.safe_delete import try_remove_tree
from collector.settings import child_environment

STOP_GRACE = 10.0                  # seconds between SIGTERM and SIGKILL of a session


@dataclass
class Proc:
    """A started `marketspread` command, leader of its own session."""
    name: str
    popen: subprocess.Popen
    log_path: Path
    argv: tuple[str, ...] = ()

    def alive(self) -> bool:
        return self.popen.poll() is None


def marketspread_cmd() -> list[str]:
    """Return how to start `marketspread` with this interpreter (console script or `-m marketspread`)."""
    script = Path(sys.executable).parent / "marketspread"
    return [str(script)] if script.exists() else [sys.executable, "-m", "marketspread"]


class Fleet:
    """The processes of one run; `stop_all` leaves none behind, whatever happened."""

    def __init__(self, log_dir: Path, cwd: Path, env: Mapping[str, str] | None = None):
        self.log_dir, self.cwd = log_dir, cwd
        self.procs: list[Proc] = []
        self.env = child_environment({"PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1", **(env or {})})

    def spawn(self, name: str, args: list) -> Proc:
        """Start `marketspread ARGS` in a new session, output to logs/<name>.log."""
        argv = marketspread_cmd() + [str(a) for a in args]
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as out:
            popen = subprocess.Popen(argv, cwd=self.cwd, env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        proc = Proc(name, popen, log_path, tuple(argv))
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, timeout: float = STOP_GRACE, leader_only: bool = False) -> None:
        """SIGTERM (the leader only, or its whole session), wait, then SIGKILL what is left."""
        if proc.alive():
            signal_session(proc, signal.SIGTERM, session=not leader_only)
            try:
                proc.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"{proc.name} did not stop in {timeout:.0f} s; killing it", file=sys.stderr)
        sweep(proc)

    def stop_all(self) -> None:
        """Stop every process still running, the last started first."""
        for p in reversed(self.procs):
            self.stop(p, timeout=STOP_GRACE)


def session_members(sid: int) -> list[int]:
    """Return the pids in session `sid` (each process we start leads its own session).

    A session, not a process group: PySpark's worker daemons put themselves in process
    groups of their own, but stay in the job's session.
    """
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:            # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()     # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] != "Z":     # a zombie needs no signal
            pids.append(int(d.name))
    return pids


def signal_session(proc: Proc, sig: int, session: bool = True) -> bool:
    """Send `sig` to every process of the session (or its leader); return whether anyone was there."""
    pids = session_members(proc.popen.pid) if session else [proc.popen.pid]
    hit = False
    for pid in pids:
        try:
            os.kill(pid, sig)
            hit = True
        except ProcessLookupError:
            pass
    return hit


def sweep(proc: Proc) -> None:
    """Make sure nothing of the session outlives its leader (e.g. Spark's JVM or Python workers)."""
    if signal_session(proc, signal.SIGTERM):
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline and session_members(proc.popen.pid):
            time.sleep(0.1)
        signal_session(proc, signal.SIGKILL)
    try:
        proc.popen.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        pass


@contextmanager
def signals_ignored():
    """Ignore SIGINT and SIGTERM inside the block (cleanup is bounded by its own timeouts)."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def log_tail(path: Path, lines: int = 15) -> str:
    """Return the last lines of a log file."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def check_alive(procs: list[Proc]) -> None:
    """Raise if one of the processes has exited."""
    for p in procs:
        if not p.alive():
            raise RuntimeError(f"{p.name} exited with code {p.popen.returncode} (log: {p.log_path})")


def wait_until(predicate, timeout: float, what: str, watch: list[Proc], interval: float = 0.2):
    """Poll `predicate` until it returns a true value; raise on timeout or if a watched process dies."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        check_alive(watch)
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def remove_quietly(path: Path) -> None:
    """Remove a run's folder link-safely; say so if it cannot be."""
    if e := try_remove_tree(path):
        print(f"bench: could not remove {path}: {e}", file=sys.stderr)

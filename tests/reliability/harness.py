"""What the reliability tests share: the user's processes, the reference, socket checks.

Everything goes through public interfaces: the `marketspread` commands (started as a user
starts them, each in a session of its own, through perf/fleet.py's `Fleet`), the ingress
log (`LogReader`), the committed results (`read_committed`) and the pure-Python rule
(`reference_results`), never the job's internal classes.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collector.settings import PROJECT_ROOT
from engine.wire.fixish import TYPE_LEN, decode_payload
from engine.ingress.stats import read_stats
from engine.formats.log import PAYLOAD_OFFSET, LogReader, read_consumed, read_head
from engine.formats.batch import read_committed
from tests.batch_files import result_tuples
from engine.rule import reference_results
from engine.tools.generate import generate
from perf.fleet import Fleet, Proc, check_alive, log_tail, session_members, wait_until  # noqa: F401  (re-exported to the tests)

ROOT = PROJECT_ROOT
JOB_READY = 240.0
DRAIN = 300.0


def fleet_for(run_dir: Path, env: dict[str, str] | None = None) -> Fleet:
    """A fleet whose processes import this work tree's code (also in Spark's Python workers)."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    return Fleet(run_dir / "logs", cwd=run_dir,
                 env={"PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable, **(env or {})})


def start_ingress(fleet: Fleet, state: Path, *args, name: str = "ingress", nbbo_port: int = 0,
                  orders_port: int = 0) -> tuple[Proc, dict[str, int]]:
    """Start `marketspread ingress`; return it and its ports once this process listens."""
    stats = state / "ingress" / "stats.json"
    stats.unlink(missing_ok=True)          # a previous process's ports must not count
    proc = fleet.spawn(name, ["ingress", "--state-dir", state, "--nbbo-port", nbbo_port,
                              "--orders-port", orders_port, *args])

    def ports():
        st = read_stats(state / "ingress")
        return st["ports"] if st and all(st.get("ports", {}).values()) else None
    return proc, wait_until(ports, 60, "the ingress to listen", [proc])


def ingested_fleet(run_dir: Path, seed: int) -> tuple[Fleet, Path]:
    """Return a fleet and its state folder, `<run_dir>/state`, where an ingress logged 5,000 quotes and orders."""
    data, state = run_dir / "data", run_dir / "state"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=50, nbbo=5_000, orders=5_000, wide_share=0.1, seed=seed)
    fleet = fleet_for(run_dir)
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics")
        for s, f in (("nbbo", nbbo), ("orders", orders)):
            assert send_outcome(ports[s], f.read_bytes()) == "acked"
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
    except BaseException:
        fleet.stop_all()
        raise
    return fleet, state


def start_job(fleet: Fleet, state: Path, *args, name: str = "job", master: str = "local[2]") -> Proc:
    """Start `marketspread job`; return once its log says the query started."""
    # --keep-log: check_exact reads the whole log (test_retention.py runs with retention on).
    proc = fleet.spawn(name, ["job", "--state-dir", state, "--master", master, "--keep-log", *args])
    wait_until(lambda: "job started" in proc.log_path.read_text(errors="replace"), JOB_READY,
               f"{name} to start its query", [proc], interval=0.3)
    return proc


def start_sender(fleet: Fleet, port: int, file: Path, *args, name: str) -> Proc:
    """Start `marketspread send` to a loopback port."""
    return fleet.spawn(name, ["send", "--port", port, "--file", file, *args])


def kill_session(proc: Proc) -> None:
    """SIGKILL every process of the session (driver, JVM, Python workers) at once."""
    for pid in session_members(proc.popen.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.popen.wait(timeout=30)
    wait_until(lambda: not session_members(proc.popen.pid), 30, f"{proc.name}'s session to die", [])


def stop_gracefully(fleet: Fleet, proc: Proc, timeout: float = 90.0) -> int:
    """SIGTERM the leader only (it shuts down cleanly), wait; return its exit code."""
    fleet.stop(proc, timeout=timeout, leader_only=True)
    return proc.popen.returncode


def drain(state: Path, job: Proc, timeout: float = DRAIN) -> int:
    """Wait until the job has committed the whole log; return the head."""
    head = read_head(state / "ingress")
    wait_until(lambda: read_consumed(state / "ingress") >= head, timeout,
               f"the job to commit the whole log ({head:,} records)", [job])
    return head


# --------------------------------------------------------------------------- exactness

def logged_messages(log_dir: Path, start: int = 0, end: int | None = None) -> list:
    """Decode log records [start, end) into Nbbo/Order messages, in the recorded arrival order."""
    end = read_head(log_dir) if end is None else end
    rec = LogReader(log_dir).read(start, end)
    out = []
    for r in rec:
        kind = int(r[PAYLOAD_OFFSET])
        out.append(decode_payload(r[PAYLOAD_OFFSET:PAYLOAD_OFFSET + TYPE_LEN[kind]].tobytes()))
    return out


@dataclass(frozen=True)
class Exactness:
    """Committed results against the reference over the recorded arrival order."""
    logged: int
    consumed: int
    expected: int
    committed: int
    duplicate_seqs: int
    equal: bool

    @property
    def exact(self) -> bool:
        return self.equal and self.duplicate_seqs == 0 and self.consumed == self.logged


def check_exact(state: Path) -> Exactness:
    """Compare every committed result (in seq order) with `reference_results` over the whole log."""
    log_dir = state / "ingress"
    head = read_head(log_dir)
    want = reference_results(logged_messages(log_dir, 0, head))
    frames, side = read_committed(state / "results")
    order = np.argsort(side[:, 0], kind="stable")
    got = result_tuples(frames[order])
    dups = int(len(side) - len(np.unique(side[:, 0])))
    return Exactness(head, read_consumed(log_dir), len(want), len(got), dups, got == want)


# --------------------------------------------------------------------------- processes and sockets

def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """Return (address, port) of every TCP socket in LISTEN state that process `pid` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:          # 0A: LISTEN
                continue
            hexaddr, hexport = f[1].split(":")
            out.append((_addr(hexaddr, width), int(hexport, 16)))
    return out


def _addr(hexaddr: str, width: int) -> str:
    raw = bytes.fromhex(hexaddr)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def is_loopback(addr: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped loopback address."""
    return addr.startswith("127.") or addr == "::1" or addr.startswith("::ffff:127.")


def rss_bytes(pid: int) -> int:
    """Resident set size of one process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def open_fds(pid: int) -> int:
    """Number of open file descriptors of one process."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def send_outcome(port: int, data: bytes, timeout: float = 60) -> str:
    """Send to the ingress, half-close, wait for its answer: 'acked' (a clean close) or 'reset'.

    The ingress closes cleanly only after the commit that made all of it durable; it
    resets a connection whose bytes it could not store (docs/RELIABILITY.md).
    """
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        return "acked"
    except OSError as e:
        if e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):    # RST, seen on send or after
            return "reset"
        raise


def wait_for_file_text(path: Path, text: str, timeout: float, watch: list[Proc]) -> None:
    """Wait until `text` appears in a (log) file."""
    wait_until(lambda: path.exists() and text in path.read_text(errors="replace"), timeout,
               f"{text!r} in {path.name}", watch, interval=0.3)


def sleep_watching(seconds: float, watch: list[Proc]) -> None:
    """Sleep, raising if a watched process dies meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check_alive(watch)
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))

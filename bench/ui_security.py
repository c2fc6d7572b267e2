"""What a hostile client can do to the started dashboard: slow-loris connections and login guessing.

Starts `marketspread ui` (this tree's code, or `--root` another checkout's) on a free
loopback port with basic auth, then:

- slow loris: opens `--lorises` connections (default 1000) that each send half a request
  and stop; after `--hold` s (default 5) reads the server's threads and open sockets from
  /proc, times one ordinary request made meanwhile, and how long until the server had
  closed every half-open connection (up to `--wait` s);
- guessing: sends wrong basic-auth passwords one after another over fresh connections for
  `--guess-s` s (default 5) and counts the answers: 401 (a guess the server checked) or
  429 (refused by the login limit).

    .venv/bin/python -m bench.ui_security
    .venv/bin/python -m bench.ui_security --root /tmp/old-checkout      # the same on older code

Prints the figures and writes bench/out/ui-security-<UTC>.json (`--record`:
bench/results/). Never fails on a figure.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from collector.influx.server import free_port
from perf.fleet import Fleet, wait_until

WRONG = "Basic " + base64.b64encode(b"ops:wrong-guess").decode()


def _status(port: int, headers: str = "", timeout: float = 60.0) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"GET /_dash-layout HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
                  f"{headers}\r\n".encode())
        first = s.recv(64)
    return int(first.split()[1]) if first else 0


def _proc_figures(pid: int) -> dict[str, int]:
    threads = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("Threads:"))
    sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            sockets += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return {"threads": threads, "sockets": sockets}


def slow_loris(port: int, pid: int, n: int, hold: float, wait: float) -> dict:
    """Hold `n` half-open requests; report what the server holds and whether it still answers."""
    before = _proc_figures(pid)
    lorises, refused = [], 0
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
            s.setblocking(False)
            lorises.append(s)
        except OSError:
            refused += 1
    time.sleep(hold)
    held = _proc_figures(pid)
    t0 = time.monotonic()
    try:
        ordinary = _status(port, f"Authorization: Basic {base64.b64encode(b'ops:pw').decode()}\r\n", timeout=wait)
    except OSError:
        ordinary = 0
    ordinary_s = time.monotonic() - t0
    t0, open_ = time.monotonic(), set(range(len(lorises)))
    while open_ and time.monotonic() - t0 < wait:
        for i in list(open_):
            try:
                if lorises[i].recv(1) == b"":
                    open_.discard(i)
            except BlockingIOError:
                pass
            except OSError:
                open_.discard(i)
        time.sleep(0.2)
    closed_after = time.monotonic() - t0 + hold if not open_ else None
    for s in lorises:
        s.close()
    return {"lorises": n, "connect_refused": refused, "before": before, "while_held": held,
            "ordinary_request_status": ordinary, "ordinary_request_s": round(ordinary_s, 3),
            "all_closed_by_server_after_s": round(closed_after, 1) if closed_after is not None else None,
            "still_open_after_wait": len(open_)}


def guessing(port: int, seconds: float) -> dict:
    """Send wrong passwords for `seconds`; count checked (401) and refused (429) guesses."""
    counts: dict[str, int] = {}
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        code = str(_status(port, f"Authorization: {WRONG}\r\n"))
        counts[code] = counts.get(code, 0) + 1
    elapsed = time.monotonic() - t0
    return {"seconds": round(elapsed, 2), "answers": counts,
            "checked_guesses_per_s": round(counts.get("401", 0) / elapsed, 1),
            "requests_per_s": round(sum(counts.values()) / elapsed, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ui_security", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose `marketspread ui` to start")
    ap.add_argument("--lorises", type=int, default=1000)
    ap.add_argument("--hold", type=float, default=5.0)
    ap.add_argument("--wait", type=float, default=90.0)
    ap.add_argument("--guess-s", type=float, default=5.0)
    add_record_flag(ap)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ui-security-"))
    (work / "logs").mkdir()
    env = {"PYTHONPATH": str(args.root), "MS_INFLUX_URL": "http://127.0.0.1:9", "MS_STATE_DIR": str(work / "state"),
           "MS_UI_USER": "ops", "MS_UI_PASSWORD": "pw"}
    fleet = Fleet(work / "logs", cwd=work, env=env)
    for var in ("MS_UI_TOKEN", "MS_UI_ALLOWED_HOSTS", "MS_UI_PROXY_HOPS", "MS_UI_THREADS",
                "MS_UI_CONNECTION_LIMIT", "MS_UI_TIMEOUT_S"):
        fleet.env.pop(var, None)
    port = free_port()
    proc = fleet.spawn("ui", ["ui", "--port", port])
    try:
        wait_until(lambda: _try(port), 90, "the dashboard to answer", [proc])
        server = ""
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(f"HEAD / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            server = next((ln.split(":", 1)[1].strip() for ln in s.recv(4096).decode("latin-1").split("\r\n")
                           if ln.lower().startswith("server:")), "")
        loris = slow_loris(port, proc.popen.pid, args.lorises, args.hold, args.wait)
        guess = guessing(port, args.guess_s)
    finally:
        fleet.stop_all()
    commit = subprocess.run(["git", "-C", str(args.root), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    record = {"bench": "ui_security", "root": str(args.root), "commit": commit, "server_header": server,
              "slow_loris": loris, "guessing": guess,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "command": " ".join(sys.argv), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps(record, indent=2))
    out = write_result(record, result_path("ui-security", args.record), indent=2)
    print(f"-> {shown(out)}")
    return 0


def _try(port: int) -> bool:
    try:
        return _status(port, timeout=5) in (200, 401)
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())

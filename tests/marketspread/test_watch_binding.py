"""Under `watch` with a local master, the script's Spark listens on loopback only, kill links off."""
from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
LISTEN_JOB = Path(__file__).parent / "data" / "listen_job.py"


def _listening(pid: int) -> set[tuple[str, int]]:
    """The TCP addresses the process `pid` and its descendants listen on."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    out = set()
    for p in procs:
        try:
            out |= {(c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            pass
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    return (getattr(addr, "ipv4_mapped", None) or addr).is_loopback        # ::ffff:127.0.0.1 is loopback


def _run(tmp_path: Path, *script_args: str) -> tuple[str, set[tuple[str, int]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "SPARK_LOCAL_IP"))}
    env.update(MS_INFLUX_URL="http://127.0.0.1:9", MS_STATE_DIR=str(tmp_path / "state"), PYSPARK_PYTHON=sys.executable)
    proc = subprocess.Popen([sys.executable, "-m", "marketspread", "watch", "--", str(LISTEN_JOB), *script_args],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        sockets = _listening(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert line.startswith("READY"), err[-3000:]
    return line, sockets


@pytest.mark.slow                  # a Spark application in a child process, ~15 s
def test_a_watched_local_job_listens_on_loopback_only_with_kill_links_off(tmp_path):
    line, sockets = _run(tmp_path)
    assert line == "READY false"
    assert len(sockets) >= 3, sockets          # driver RPC, block manager, UI (and the relay)
    wide = {(ip, port) for ip, port in sockets if not _loopback(ip)}
    assert not wide, f"listening beyond loopback: {sorted(wide)}"


@pytest.mark.slow
def test_the_users_own_kill_links_setting_wins(tmp_path):
    line, _ = _run(tmp_path, "--kill-links")
    assert line == "READY true"

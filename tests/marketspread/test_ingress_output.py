"""`marketspread ingress` alone: its output grows with its work, not with time or with connections."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from collector.settings import PROJECT_ROOT
from engine.formats.log import wait_for
from engine.ingress.stats import read_stats


def test_an_idle_ingress_prints_no_progress_lines_and_a_connection_flood_few_log_lines(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), MS_STATE_DIR=str(tmp_path), MS_NBBO_PORT="0",
               MS_ORDERS_PORT="0", MS_FSYNC="0", MS_METRICS="0")
    code = ("import logging; logging.basicConfig(level=logging.INFO)\n"
            "from engine.config import Config; from marketspread.ingress import run_ingress\n"
            "raise SystemExit(run_ingress(Config.from_env(), progress_every=0.2))")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (read_stats(tmp_path / "ingress") or {}).get("ports"), 10)
        port = read_stats(tmp_path / "ingress")["ports"]["orders"]
        time.sleep(1.5)                                   # seven progress periods with nothing to say
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
            except OSError:
                pass
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert len(out.splitlines()) <= 2, out            # before: a line every 0.2 s, 10 or more
    assert len(err.splitlines()) <= 6, err            # before: two lines a connection, 1,000 or more

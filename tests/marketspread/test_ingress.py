"""The `marketspread ingress` process: it serves until SIGTERM and stops cleanly."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from collector.settings import PROJECT_ROOT
from engine.formats.log import read_head, wait_for
from engine.ingress.stats import read_stats
from marketspread.cli import build_parser, ingress_config
from marketspread.ingress import SWITCH_INTERVAL_S

DEMO = "demo-2017"
ROOT = PROJECT_ROOT


def _send(port: int, data: bytes) -> None:
    """Send, half-close, and wait for the server's close (it then has `data` durably)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        while s.recv(4096):
            pass


def test_run_ingress_serves_until_sigterm(tmp_path, fixtures):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MS_STATE_DIR=str(tmp_path), MS_NBBO_PORT="0",
               MS_ORDERS_PORT="0", MS_FSYNC="0")
    code = ("import logging; logging.basicConfig(level=logging.INFO)\n"
            "from engine.config import Config; from marketspread.ingress import run_ingress\n"
            "raise SystemExit(run_ingress(Config.from_env(), progress_every=0.2))")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log_dir = tmp_path / "ingress"
    try:
        assert wait_for(lambda: (read_stats(log_dir) or {}).get("ports"), 10)
        ports = read_stats(log_dir)["ports"]
        _send(ports["nbbo"], (fixtures / DEMO / "1000nbbo-fixish.msg").read_bytes())
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "msgs/s" in out and "ingress stopped: 1000 messages" in err
    assert read_head(log_dir) == 1000 and read_stats(log_dir)["accepted_total"] == 1000


def test_the_receive_loop_waits_briefly_for_the_gil_and_the_interpreter_gets_its_own_back(tmp_path):
    """Another thread's Python code holds the loop up at most SWITCH_INTERVAL_S, not CPython's 5 ms."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), MS_STATE_DIR=str(tmp_path), MS_NBBO_PORT="0",
               MS_ORDERS_PORT="0", MS_FSYNC="0", MS_METRICS="0")
    code = ("import os, signal, sys, threading\n"
            "from engine.config import Config; from engine.formats.log import wait_for\n"
            "from engine.ingress.stats import read_stats; from marketspread.ingress import run_ingress\n"
            "cfg = Config.from_env()\n"
            "def probe():\n"
            "    wait_for(lambda: (read_stats(cfg.log_dir) or {}).get('ports'), 10)\n"
            "    print('serving', sys.getswitchinterval(), flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "threading.Thread(target=probe).start()\n"
            "code = run_ingress(cfg, progress_every=60)\n"
            "print('after', sys.getswitchinterval()); raise SystemExit(code)")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split() for line in proc.stdout.splitlines())
    assert float(lines["serving"]) == pytest.approx(SWITCH_INTERVAL_S) and SWITCH_INTERVAL_S < 0.001
    assert float(lines["after"]) == pytest.approx(0.005)         # CPython's default, restored


def test_the_ingress_takes_the_shard_count_given_else_the_checkpoints(tmp_path, monkeypatch):
    """It writes the shard files the job reads (engine/formats/shard_files.py)."""
    monkeypatch.delenv("MS_SHARDS", raising=False)
    args = ["ingress", "--state-dir", str(tmp_path)]
    assert ingress_config(build_parser().parse_args(args)).shards == 1
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    conf = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": "4"}}
    (offsets / "0").write_text("v1\n" + json.dumps(conf) + '\n{"seq":10}')
    assert ingress_config(build_parser().parse_args(args)).shards == 4
    assert ingress_config(build_parser().parse_args([*args, "--shards", "2"])).shards == 2

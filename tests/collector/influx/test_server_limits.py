"""The project's influxd starts with the hard open-file limit and its log rotated and bounded."""
from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from collector.influx.logpump import pump
from collector.influx.server import InfluxServer, find_influxd, free_port

pytestmark = pytest.mark.skipif(find_influxd() is None, reason="influxd is not installed")


def soft_open_files(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if x.startswith("Max open files"))
    return int(line.split()[3])


def test_influxd_gets_the_hard_open_file_limit_and_says_so(tmp_path, caplog):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))     # the usual soft limit elsewhere
    server = InfluxServer(tmp_path / "state", port=free_port())
    try:
        with caplog.at_level(logging.INFO, logger="collector.influx.server"):
            status = server.start()
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (low, hard)     # this process keeps its own
        assert soft_open_files(status.pid) == hard
        [started] = [r.getMessage() for r in caplog.records if "ready at" in r.getMessage()]
        assert started.endswith(f"open files up to {hard}")
        assert os.readlink(f"/proc/{status.pid}/fd/1").startswith("pipe:")   # into the log pump, not a file
    finally:
        server.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    log = (tmp_path / "state" / "logs" / "influxdb.log").read_text()
    assert "Listening on HTTP" in log or "Starting" in log                # influxd's own lines arrive


def test_the_log_pump_rotates_and_bounds_and_ends_with_its_writer(tmp_path):
    path = tmp_path / "influxdb.log"
    script = "for i in range(20000): print(f'line {i:06d} ' + 'x' * 80)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert pump(child.stdout, path, max_bytes=200_000, backups=3) == 20_000
    assert child.wait(timeout=60) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["influxdb.log", "influxdb.log.1", "influxdb.log.2", "influxdb.log.3"]
    assert all((tmp_path / f).stat().st_size <= 200_000 for f in files)
    assert path.read_text().splitlines()[-1].startswith("line 019999 ")


def test_a_line_without_end_is_cut_not_held(tmp_path):
    path = tmp_path / "influxdb.log"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.write('y' * 300_000)"],
                             stdout=subprocess.PIPE)
    assert pump(child.stdout, path, max_bytes=10_000_000, backups=1) == 5      # 64 KiB pieces
    child.wait(timeout=60)
    assert path.stat().st_size >= 300_000

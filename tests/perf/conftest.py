"""Fixtures of the performance-test-run tests: one real `marketspread bench` run per test session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.influx import InfluxClient, ensure_database
from perf.record import RunRecord, record_from_dict
from collector.settings import PROJECT_ROOT

ROOT = PROJECT_ROOT
BENCH_TIMEOUT = 300


def pytest_setup_options():
    """Chrome options for dash_duo: headless (Chromium as root also needs no sandbox; dash adds it)."""
    from selenium.webdriver.chrome.options import Options
    options = Options()
    options.add_argument("--headless=new")
    options.add_argument("--window-size=1400,1000")
    return options


@dataclass(frozen=True)
class BenchDone:
    """A finished real bench run: its JSON file, the record in it, and what the command printed."""
    path: Path
    record: RunRecord
    output: str
    state_dir: Path


@pytest.fixture(scope="session")
def bench_db(influxdb):
    """A database of its own on the test InfluxDB server."""
    client = influxdb.client(db="t_perfruns")
    client.query('DROP DATABASE "t_perfruns"')
    ensure_database(client)
    yield client
    client.query('DROP DATABASE "t_perfruns"')
    client.close()


def run_bench_cli(args: list[str], client: InfluxClient, timeout: float = BENCH_TIMEOUT) -> subprocess.CompletedProcess:
    """Run `marketspread bench ARGS` as a user would, writing to the test database."""
    env = {**os.environ, **client.config.as_env(),
           "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-m", "marketspread", "bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def bench_done(bench_db, tmp_path_factory) -> BenchDone:
    """Run one short real performance test (15 s measured at 20,000 events/s)."""
    state = tmp_path_factory.mktemp("bench-state")
    out = state / "base.json"
    proc = run_bench_cli(["--state-dir", str(state), "--rate", "20000", "--duration", "15", "--warmup", "3",
                          "--messages", "100000", "--label", "base", "--out", str(out)], bench_db)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return BenchDone(out, record_from_dict(json.loads(out.read_text())), proc.stdout, state)

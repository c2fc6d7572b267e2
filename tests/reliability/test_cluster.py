"""Scale-out: the job on a real Spark standalone cluster (a master, two workers) equals local[*].

The cluster comes from the PySpark distribution's own launch classes, on loopback only
(bench/spark_cluster.py, which bench/cluster_shards.py uses too). The job runs as a user
runs it on a cluster: `marketspread ingress --shards 2`, then `marketspread job --master
spark://127.0.0.1:P --shards 2` (executors in the workers read their shard files, or the
ingress log, and write the results; on one machine every executor sees the same files).
The same input through `marketspread replay --master local[*]` (one shard) must give the
same results, and both must equal the reference.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.wire.fixish import read_results
from engine.formats.batch import read_committed
from tests.batch_files import result_tuples
from engine.tools.generate import generate
from engine.tools.sender import send_acknowledged
from perf.spark_cluster import job_bytes_read, start_cluster

from .harness import (ROOT, check_exact, drain, fleet_for, is_loopback, listening_sockets, log_tail,
                      start_ingress, start_job, stop_gracefully)

WORKERS = 2


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        msg = "java is not installed (scripts/setup installs Java 17)"
        if os.environ.get("CI"):
            pytest.fail(msg)               # in CI a missing JVM is a set-up bug, never a skip
        pytest.skip(msg)
    return java


def _send_acknowledged(port: int, path: Path) -> None:
    send_acknowledged("127.0.0.1", port, path.read_bytes(), timeout=120)


@pytest.fixture
def cluster(tmp_path):
    """A standalone master and two 1-core workers on 127.0.0.1 (bench/spark_cluster.py); yields the master URL."""
    java = _java()
    fleet = fleet_for(tmp_path / "cluster")
    try:
        c = start_cluster(fleet, java, tmp_path, workers=WORKERS)
        yield c.url, c.master, c.workers
    finally:
        fleet.stop_all()


def test_job_on_a_standalone_cluster_equals_local(cluster, tmp_path):
    url, master, workers = cluster
    for p in (master, *workers):                       # the cluster itself listens on loopback only
        socks = listening_sockets(p.popen.pid)
        assert socks and all(is_loopback(a) for a, _ in socks), (p.name, socks)
    data = tmp_path / "data"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=50_000, orders=50_000, wide_share=0.2, seed=31)

    state = tmp_path / "state"
    fleet = fleet_for(tmp_path / "run", {"SPARK_LOCAL_IP": "127.0.0.1"})
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics", "--shards", 2)
        job = start_job(fleet, state, "--no-metrics", "--max-rows-per-batch", 25_000, "--shards", 2,
                        "--count-bytes-read", master=url)
        assert "app-" in master.log_path.read_text(), "the job did not register with the master"
        _send_acknowledged(ports["nbbo"], nbbo)         # all quotes first, as replay does
        _send_acknowledged(ports["orders"], orders)
        assert stop_gracefully(fleet, ingress, 30) == 0
        drain(state, job, 180)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
        executors = [p for w in range(WORKERS) for p in (tmp_path / f"work-{w}").glob("app-*/*/stderr")]
        assert len(executors) >= WORKERS, "the job did not run executors on both workers"

        local_out = tmp_path / "local.msg"
        r = subprocess.run([sys.executable, "-m", "marketspread", "replay", "--state-dir", tmp_path / "local",
                            "--master", "local[*]", "--no-metrics", "--nbbo", nbbo, "--orders", orders,
                            "--out", local_out], cwd=ROOT, env=fleet.env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        fleet.stop_all()

    ex = check_exact(state)
    assert ex.exact, ex
    read, events = job_bytes_read(job.log_path)
    assert events == ex.logged and read <= 1.15 * 64 * events, (read, events)   # its shard's records only
    frames, side = read_committed(state / "results")
    on_cluster = result_tuples(frames[side[:, 0].argsort(kind="stable")])
    local = [tuple(r[:8]) for r in read_results(local_out.read_bytes())]
    print(f"\nFIGURES cluster: {ex.logged} events, {len(on_cluster)} results on {url} "
          f"({WORKERS} workers, 2 shards, {read / events:.1f} bytes read per event), {len(local)} on local[*]")
    assert len(local) == ex.expected > 1000
    assert on_cluster == local

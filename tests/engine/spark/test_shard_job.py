"""The job with several shards on real Spark: exact results, and bytes read per event independent of N.

A live ingress (real sockets) writes the log and, for N > 1 shards, the shard files while
the query runs; the tasks' byte counter is the job's own accumulator (`start_query`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from engine.config import Config
from engine.formats.log import read_consumed, read_head
from engine.ingress.server import IngressServer
from engine.spark.job import start_query, stop_query
from engine.tools.generate import generate
from engine.tools.sender import send_acknowledged
from marketspread.progress import ConsumedOffsetListener
from tests.reliability.harness import check_exact


@dataclass(frozen=True)
class Run:
    events: int
    bytes_read: int
    exact: bool
    detail: object

    @property
    def per_event(self) -> float:
        return self.bytes_read / self.events


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("shard-job-data")
    nbbo, orders = d / "nbbo.msg", d / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=40_000, orders=40_000, wide_share=0.2, seed=17)
    return nbbo, orders


def _wait_committed(cfg, query, timeout: float = 300) -> None:
    """Wait until the query has committed the whole log, failing on its error or the timeout."""
    head = read_head(cfg.log_dir)
    deadline = time.monotonic() + timeout
    while read_consumed(cfg.log_dir) < head:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"committed {read_consumed(cfg.log_dir)} of {head}"
        time.sleep(0.05)


def _send(port: int, path: Path) -> None:
    send_acknowledged("127.0.0.1", port, path.read_bytes(), timeout=120)


def _run(spark, state: Path, data: tuple[Path, Path], job_shards: int, ingress_shards: int) -> Run:
    cfg = Config(state_dir=state, nbbo_port=0, orders_port=0, fsync=False, metrics=False,
                 max_rows_per_batch=8_000, shards=job_shards)
    server = IngressServer(replace(cfg, shards=ingress_shards)).start()
    acc = spark.sparkContext.accumulator(0)
    query = start_query(spark, cfg, consumed=ConsumedOffsetListener(str(cfg.log_dir), None), bytes_read=acc)
    try:
        _send(server.ports["nbbo"], data[0])          # quotes first, as replay does
        _send(server.ports["orders"], data[1])
        _wait_committed(cfg, query)
    finally:
        stop_query(spark, query)
        server.stop()
    ex = check_exact(state)
    return Run(ex.logged, acc.value, ex.exact, ex)


def test_results_are_exact_and_bytes_per_event_do_not_grow_with_the_shards(spark, data, tmp_path):
    runs = {n: _run(spark, tmp_path / f"n{n}", data, n, n) for n in (1, 2, 4)}
    print("\nFIGURES bytes read per event: " + ", ".join(f"{n} shards {r.per_event:.1f}" for n, r in runs.items()))
    for n, r in runs.items():
        assert r.exact and r.events == 80_350, (n, r.detail)        # 350 opening quotes too
    assert runs[1].per_event == pytest.approx(64, rel=0.01)          # the log, read once
    for n in (2, 4):
        assert runs[n].per_event <= 1.15 * runs[1].per_event, runs  # not n × 64: the shard files
        assert list((tmp_path / f"n{n}" / "ingress").glob(f"shards-{n}/*/0/seg-*.log"))


def test_a_job_on_a_log_without_its_shard_files_reads_the_log_and_stays_exact(spark, data, tmp_path):
    run = _run(spark, tmp_path / "s", data, job_shards=2, ingress_shards=1)
    assert run.exact, run.detail
    assert not list((tmp_path / "s" / "ingress").glob("shards-*"))
    assert run.per_event == pytest.approx(2 * 64, rel=0.01)          # each task read the whole range


def test_an_ingress_restart_mid_run_rebuilds_the_shard_files_and_the_job_stays_exact(spark, data, tmp_path):
    """A restart (as after a kill) removes the shard files and rebuilds them in a new generation under a live job."""
    cfg = Config(state_dir=tmp_path, nbbo_port=0, orders_port=0, fsync=False, metrics=False,
                 max_rows_per_batch=8_000, shards=2)
    acc = spark.sparkContext.accumulator(0)
    query = start_query(spark, cfg, consumed=ConsumedOffsetListener(str(cfg.log_dir), None), bytes_read=acc)
    generations = []
    try:
        for path, stream in ((data[0], "nbbo"), (data[1], "orders")):
            server = IngressServer(cfg).start()
            generations += [p.name for p in (cfg.log_dir / "shards-2").iterdir()]
            try:
                _send(server.ports[stream], path)
            finally:
                server.stop()
        _wait_committed(cfg, query)
    finally:
        stop_query(spark, query)
    ex = check_exact(tmp_path)
    print(f"\nFIGURES across an ingress restart: {acc.value / ex.logged:.1f} bytes read per event")
    assert ex.exact and ex.logged == 80_350, ex
    assert len(generations) == 2 and generations[0] != generations[1]
    assert [p.name for p in (cfg.log_dir / "shards-2").iterdir()] == [generations[1]]

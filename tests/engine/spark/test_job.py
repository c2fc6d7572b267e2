"""The real Spark job, end to end: conformance, reference equality, bad input, SIGKILL."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.spark.checkpoint import recorded_shards
from engine.config import Config
from engine.wire.fixish import decode_payload, iter_frames, read_results
from engine.formats.log import LogWriter, read_consumed, read_head
from marketspread.replay import replay
from engine.formats.batch import read_committed
from tests.batch_files import result_tuples
from engine.rule import reference_results
from engine.tools.generate import generate, wallaroo_scenario
from collector.settings import PROJECT_ROOT

ROOT = PROJECT_ROOT


def _strip_ts(results):
    return [tuple(r[:8]) for r in results]


def _reference_of(*files: Path):
    msgs = [decode_payload(p) for f in files for p in iter_frames(Path(f).read_bytes())]
    return reference_results(msgs)


@pytest.fixture
def cfg(tmp_path) -> Config:
    return Config.from_env(state_dir=tmp_path / "state", max_rows_per_batch=50_000, shards=2)


def test_wallaroo_integration_scenario(spark, cfg, tmp_path):
    """Wallaroo's own test: 10 tight + 10 wide symbols; exactly the wide group's 1000 orders."""
    nbbo, orders, out = tmp_path / "nbbo.msg", tmp_path / "orders.msg", tmp_path / "out.msg"
    expected = wallaroo_scenario(nbbo, orders, seed=3)
    rep = replay([nbbo], [orders], out, cfg, spark=spark)
    got = _strip_ts(read_results(out.read_bytes()))
    assert len(expected) == 1000
    assert rep.results == 1000 and rep.bad == 0
    assert sorted(got) == sorted(expected)


def test_replay_of_wallaroo_fixtures_equals_reference(spark, cfg, fixtures, tmp_path):
    nbbo = [fixtures / "350-symbols_initial-nbbo-fixish.msg", fixtures / "demo-2017/1000nbbo-fixish.msg"]
    orders = [fixtures / "demo-2017/1000trades-fixish.msg"]
    out = tmp_path / "out.msg"
    rep = replay(nbbo, orders, out, cfg, spark=spark)
    want = _reference_of(*nbbo, *orders)
    got = _strip_ts(read_results(out.read_bytes()))
    assert rep.accepted == 350 + 2000
    assert got == want            # same records, in the orders' arrival order
    ts = [r[8] for r in read_results(out.read_bytes())]
    assert all(abs(t - time.time_ns()) < 600e9 for t in ts), "timestamp is ns when emitted"


def test_replay_of_generated_events_equals_reference(spark, cfg, tmp_path):
    nbbo, orders, out = tmp_path / "nbbo.msg", tmp_path / "orders.msg", tmp_path / "out.msg"
    generate(nbbo, orders, symbols=350, nbbo=60_000, orders=60_000, wide_share=0.1, seed=11)
    rep = replay([nbbo], [orders], out, replace(cfg, max_rows_per_batch=20_000), spark=spark)
    want = _reference_of(nbbo, orders)
    got = _strip_ts(read_results(out.read_bytes()))
    assert rep.accepted >= 120_000
    assert len(want) > 1000
    assert got == want
    # The timing breakdown accounts for every record once, over several batches.
    t = rep.timing
    assert t.records == rep.accepted and 0 < t.first_batch_records <= 20_000 and t.steady_batches >= 5
    assert t.total_s >= t.startup_s > 0 and t.first_batch_s > 0


def test_the_timing_breakdown_counts_every_batch_of_a_long_replay(spark, cfg, tmp_path):
    """More batches than Spark keeps progress reports of by default (100): none is missed,
    the first one (capped smaller) included."""
    nbbo, orders, out = tmp_path / "nbbo.msg", tmp_path / "orders.msg", tmp_path / "out.msg"
    generate(nbbo, orders, symbols=50, nbbo=7_000, orders=7_000, seed=5)
    rep = replay([nbbo], [orders], out, replace(cfg, max_rows_per_batch=100, first_batch_rows=40, shards=1),
                 spark=spark)
    t = rep.timing
    assert rep.accepted >= 14_000
    assert t.records == rep.accepted and t.first_batch_records == 40
    assert t.steady_batches == -(-(rep.accepted - 40) // 100) > 100


def test_bad_frames_are_set_aside_and_cost_no_good_message(spark, cfg, fixtures, tmp_path):
    good = (fixtures / "demo-2017/1000trades-fixish.msg").read_bytes()
    frames = list(iter_frames(good))
    junk = [b"\x00\x00\x00\x2a\x07" + b"x" * 41,          # unknown type
            b"\xff\xff\xff\xf0\x01\x02",                    # oversized length
            b"garbage!",                                    # garbage bytes
            (42).to_bytes(4, "big") + (fixtures / "demo-2017/100nbbo-fixish.msg").read_bytes()[4:46]]  # NBBO on orders port
    mixed = bytearray()
    for i, f in enumerate(frames):
        mixed += len(f).to_bytes(4, "big") + f
        if i % 250 == 0:
            mixed += junk[(i // 250) % len(junk)]
    orders = tmp_path / "mixed-orders.msg"
    orders.write_bytes(bytes(mixed) + b"\x00\x00\x00\x35\x01abc")     # truncated tail
    nbbo = [fixtures / "demo-2017/1000nbbo-fixish.msg"]
    out = tmp_path / "out.msg"
    rep = replay(nbbo, [orders], out, cfg, spark=spark)
    assert rep.accepted == 2000
    assert rep.bad == 5
    dead = [json.loads(line) for line in Path(str(out) + ".deadletter.jsonl").read_text().splitlines()]
    assert len(dead) == 5 and all(d["reason"] for d in dead)
    assert _strip_ts(read_results(out.read_bytes())) == _reference_of(nbbo[0], fixtures / "demo-2017/1000trades-fixish.msg")


def _fill_log(log_dir: Path, nbbo: Path, orders: Path) -> list:
    """Write generated messages straight into the ingress log, NBBO first; return them."""
    from engine.wire.fixish import FrameScanner
    writer = LogWriter(log_dir)
    msgs = []
    for path, stream in ((nbbo, "nbbo"), (orders, "orders")):
        data = path.read_bytes()
        res = FrameScanner(stream).scan(data, final=True)
        writer.append(res.payloads, time.time_ns())
        msgs += [decode_payload(p) for p in iter_frames(data)]
    writer.close()
    return msgs


def _start_job(state: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen(
        [sys.executable, "-m", "marketspread", "job", "--state-dir", str(state), "--master", "local[2]",
         "--max-rows-per-batch", "1000"],
        cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=open(state / "job.log", "ab"))


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path):
    """kill -9 the driver, its JVM and workers mid-run, three times; restart; exact results."""
    state = tmp_path / "state"
    cfg = Config.from_env(state_dir=state)
    nbbo, orders = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=60_000, orders=60_000, wide_share=0.1, seed=5)
    msgs = _fill_log(cfg.log_dir, nbbo, orders)
    total = read_head(cfg.log_dir)
    rng = np.random.default_rng(7)
    kills = 0
    while kills < 3:
        before = read_consumed(cfg.log_dir)
        proc = _start_job(state)
        # Let it get going (a batch or more committed), then kill at a random moment.
        deadline = time.monotonic() + 120
        while read_consumed(cfg.log_dir) == before and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, (state / "job.log").read_text()[-3000:]
        time.sleep(float(rng.uniform(0.0, 1.5)))
        _kill_group(proc)
        kills += 1
        assert read_consumed(cfg.log_dir) < total, "the job finished before it was killed"
    proc = _start_job(state)
    deadline = time.monotonic() + 300
    while read_consumed(cfg.log_dir) < total and time.monotonic() < deadline:
        assert proc.poll() is None, (state / "job.log").read_text()[-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert read_consumed(cfg.log_dir) == total
    frames, side = read_committed(cfg.out_dir)
    assert len(np.unique(side[:, 0])) == len(side), "a result was committed twice"
    got = result_tuples(frames[np.argsort(side[:, 0], kind="stable")])
    assert kills == 3
    assert got == reference_results(msgs)
    # The checkpoint keeps its shard count (another one re-partitions it: tests/reliability/test_rescale.py).
    assert recorded_shards(cfg.checkpoint_dir) == cfg.shards


def test_shard_keys_land_each_shard_in_its_own_spark_partition(spark):
    """Spark hash-partitions group keys; each shard's key must own one partition."""
    from engine.formats.records import _spark_hash_int, shard_keys
    rows = spark.sql("SELECT id, hash(CAST(id AS INT)) AS h FROM range(-50, 200)").collect()
    assert all(_spark_hash_int(r.id) == r.h for r in rows)
    for n in range(1, 9):
        keys = shard_keys(n)
        parts = [r.p for r in spark.sql(
            f"SELECT pmod(hash(CAST(k AS INT)), {n}) AS p FROM VALUES {', '.join(f'({k})' for k in keys)} AS t(k)"
        ).collect()]
        assert parts == list(range(n))

"""Runs as Spark defines them, end to end: real queries on the real Spark session, monitored by the real monitor
into a real InfluxDB, read by the store and shown in a real Chromium.

(a) one name, two separate checkpoints: two queries, one run each; (b) a restart from one checkpoint: one
query, two runs; (c) two unnamed queries of one application: two entries. Each run's page counts its own
batches, as many as Spark's own progress reported for that run.
"""
from __future__ import annotations

import time

import pytest

from collector.influx.server import free_port
from collector.query.ranges import TimeRange
from collector.query.run_groups import group_runs, pick_run
from collector.query.store import MetricsStore
from spark_listener import monitor

from .test_pages import TIMEOUT

pytestmark = pytest.mark.slow            # ~25 s of streaming queries on the shared session
APP_RUN = "run-model-app"


def _query(spark, name: str | None, checkpoint) -> object:
    w = spark.readStream.format("rate").option("rowsPerSecond", 50).load().writeStream.format("noop")
    if name:
        w = w.queryName(name)
    return w.option("checkpointLocation", str(checkpoint)).trigger(processingTime="400 milliseconds").start()


def _run(queries, batches: int = 2, timeout: float = 60) -> list[tuple[str, str, int]]:
    """Let each query make `batches` batches with rows, stop it; return (query id, run id, batches reported)."""
    deadline = time.monotonic() + timeout
    while any(len([p for p in q.recentProgress if p.numInputRows]) < batches for q in queries) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    out = []
    for q in queries:
        q.stop()
        out.append((str(q.id), str(q.runId), len({p.batchId for p in q.recentProgress})))
    return out


def test_runs_are_spark_runs_and_each_page_shows_its_own(spark, tmp_path, influx_client, ui_app, dash_duo):
    with monitor(spark, run=APP_RUN, influx=influx_client.config, state_dir=tmp_path / "state",
                 spool_dir=tmp_path / "spool") as mon:
        fresh = _run([_query(spark, "twice", tmp_path / "ck-a")]) + _run([_query(spark, "twice", tmp_path / "ck-b")])
        restarted = _run([_query(spark, "again", tmp_path / "ck-c")]) + _run([_query(spark, "again", tmp_path / "ck-c")])
        unnamed = _run([_query(spark, None, tmp_path / "ck-d"), _query(spark, None, tmp_path / "ck-e")])
        mon.listener.wait_terminated(10)
    store = MetricsStore(influx_client)
    expected = {rid: n for _, rid, n in fresh + restarted + unnamed}
    deadline = time.monotonic() + 30
    while {r.run_id for r in store.runs(time.time_ns())} != set(expected) and time.monotonic() < deadline:
        time.sleep(0.5)
    runs = store.runs(time.time_ns())
    groups = {g.key: [r.run_id for r in g.runs] for g in group_runs(runs)}
    # (a) two queries of one name: two entries, each one run
    assert fresh[0][0] != fresh[1][0] and groups[fresh[0][0]] == [fresh[0][1]] and groups[fresh[1][0]] == [fresh[1][1]]
    # (b) one checkpoint: one query, two runs, newest first
    assert restarted[0][0] == restarted[1][0] and groups[restarted[0][0]] == [restarted[1][1], restarted[0][1]]
    # (c) unnamed: two entries, named by the application's run and their short ids
    names = {g.name for g in group_runs(runs) if g.key in (unnamed[0][0], unnamed[1][0])}
    assert names == {f"{APP_RUN} · {qid[:8]}" for qid, _, _ in unnamed}
    # each run's own batches: as many as Spark reported for it
    for rid, n in expected.items():
        r = pick_run(runs, rid)
        assert store.query_batch_view(r.scope, TimeRange(r.first_ns, time.time_ns()), 10).batches == n, rid

    # the earlier run's page: its own batches, its id, and the later run one click away
    earlier, later = pick_run(runs, restarted[0][1]), pick_run(runs, restarted[1][1])
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/again?run={earlier.run_id}")
    dash_duo.wait_for_text_to_equal("#job-run-id-shown", earlier.run_id, timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-query-batches-summary", f"{expected[earlier.run_id]:,} micro-batches",
                                    timeout=TIMEOUT)
    dash_duo.find_element(f"#job-query-runs a[href='/run/again?run={later.run_id}']").click()
    dash_duo.wait_for_text_to_equal("#job-run-id-shown", later.run_id, timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-query-batches-summary", f"{expected[later.run_id]:,} micro-batches",
                                    timeout=TIMEOUT)
    # compared with the run before it on the compare page: both runs, the earlier as the baseline
    dash_duo.find_element("#job-query-runs-compare").click()
    dash_duo.wait_for_contains_text("#compare-query-runs-table", "baseline", timeout=TIMEOUT)
    cells = [row.text for row in dash_duo.find_elements("#compare-query-runs-table tbody tr")]
    assert [t.split()[0] for t in cells] == [earlier.run_id[:8], later.run_id[:8]], cells
    # the runs page: the restarted query's runs together, the newest first, each linking to its own page
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/")
    dash_duo.wait_for_element(f"#runs-table a[href='/run/again?run={later.run_id}']", timeout=TIMEOUT)
    hrefs = [a.get_attribute("href").split("/", 3)[3] for a in dash_duo.find_elements("#runs-table a[href^='/run/']")]
    mine = [h for h in hrefs if h.startswith("run/again?")]
    assert mine == [f"run/again?run={later.run_id}", f"run/again?run={earlier.run_id}"]
    assert dash_duo.get_logs() == []

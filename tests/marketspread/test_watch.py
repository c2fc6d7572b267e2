"""`marketspread watch -- job.py`: a script that never imports the project gets the no-code figures."""
from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.influx import InfluxClient

from ..cli_inprocess import run_main

ROOT = Path(__file__).resolve().parents[2]
PLAIN_JOB = Path(__file__).parent / "data" / "plain_job.py"
PROJECT = {"collector", "engine", "spark_listener", "alerts", "metrics_ui", "marketspread", "perf"}


def test_the_plain_job_never_imports_the_project():
    tree = ast.parse(PLAIN_JOB.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and not names & PROJECT


def _watch(env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marketspread", "watch", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _env(client: InfluxClient, state: Path) -> dict:
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(client.config.as_env(), MS_STATE_DIR=str(state), PYSPARK_PYTHON=sys.executable, MS_INFLUX_FLUSH_S="0.5")
    return env


def _rows(client: InfluxClient, q: str, **params) -> list[dict]:
    out = []
    for s in client.query(q, params):
        out.extend(dict(zip(s.columns, v), **s.tags) for v in s.values)
    return out


@pytest.mark.slow                  # a Spark application in a child process, ~25 s
def test_watch_gives_an_unmodified_job_the_no_code_figures(influx_client, tmp_path):
    out = tmp_path / "progress.json"
    done = _watch(_env(influx_client, tmp_path / "state"), "--", str(PLAIN_JOB), "--seconds", "9",
                  "--out", str(out), "--checkpoint", str(tmp_path / "ck"))
    assert done.returncode == 0, done.stderr[-3000:]
    spark_own = json.loads(out.read_text())
    progress = spark_own["progress"]
    assert len(progress) >= 5

    runs = _rows(influx_client, 'SELECT * FROM "runs" WHERE "run" = $run', run="plain-rate")
    assert len(runs) == 1
    run = runs[0]
    assert (run["status"], run["query_id"], run["app_id"]) == ("stopped", spark_own["id"], spark_own["app_id"])
    assert run["last_seen_ns"] >= run["start_ns"] and run["end_ns"] > run["start_ns"]
    assert "a poll failed" not in done.stderr          # the executor watch ends quietly with the session
    assert run["trigger_ms"] == 500 and run["batches"] == len(progress)

    # every batch Spark reported, with Spark's own figures
    points = {p["batch_id"]: p for p in _rows(influx_client, 'SELECT * FROM "spark_progress" WHERE "run" = $run',
                                              run="plain-rate")}
    assert sorted(points) == [p["batchId"] for p in progress]
    for p in progress:
        got = points[p["batchId"]]
        assert got["input_rows"] == p["numInputRows"]
        assert got["input_rows_per_s"] == pytest.approx(p["inputRowsPerSecond"], rel=0.01)
        assert got["processed_rows_per_s"] == pytest.approx(p["processedRowsPerSecond"], rel=0.01)
        assert got["trigger_ms"] == 500 and got["overran"] == int(p["batchDuration"] > 500)
    assert any(p.get("watermark_delay_ms") is not None for p in points.values())

    sources = _rows(influx_client, 'SELECT * FROM "spark_source" WHERE "run" = $run', run="plain-rate")
    assert {s["source"] for s in sources} == {"0:RateStreamV2"}
    assert sum(s["input_rows"] for s in sources) == sum(p["numInputRows"] for p in progress)
    state = _rows(influx_client, 'SELECT * FROM "spark_state" WHERE "run" = $run', run="plain-rate")
    assert state and {s["operator"] for s in state} == {"0:stateStoreSave"}
    assert _rows(influx_client, 'SELECT * FROM "backpressure" WHERE "run" = $run AND "step" = \'job\'',
                 run="plain-rate")

    # Spark's own metrics system, relayed: the driver's JVM (local mode runs tasks in it)
    executors = _rows(influx_client, 'SELECT * FROM "spark_executor" WHERE "app" = $app', app=spark_own["app_id"])
    assert executors and max(e.get("heap_used_bytes") or 0 for e in executors) > 0


def test_watch_refuses_a_missing_script_and_a_bad_run_name(tmp_path):
    import os
    env = dict(os.environ, MS_STATE_DIR=str(tmp_path))
    missing = run_main(["watch", "--", tmp_path / "nope.py"], env)      # refused before anything starts
    assert missing.returncode == 2 and "no such script" in missing.stderr
    bad = run_main(["watch", "--run", "../x", "--", PLAIN_JOB], env)
    assert bad.returncode == 2 and "run" in bad.stderr


@pytest.mark.slow                  # a monitored example job in a child process, ~40 s
def test_a_slowed_step_shows_in_its_histogram_its_backpressure_and_an_alert(influx_client, tmp_path):
    """files_enrich under `watch`: each step's histogram counts the rows that passed it, and
    the enrichment slowed past the trigger shows in its percentiles, in the query's
    backpressure and in a latency rule on that step, which fires."""
    from alerts.evaluate import FIRING
    from alerts.evaluator import AlertEvaluator
    from alerts.rules import Rule
    from alerts.store import RuleStore
    from collector.testing import MemoryWriter

    slow_ms = 1500                   # above the example's 1-s trigger
    done = _watch(_env(influx_client, tmp_path / "state"), "--", str(ROOT / "examples" / "files_enrich.py"),
                  "--duration", "12", "--slow-ms", str(slow_ms), "--work-dir", str(tmp_path / "work"))
    assert done.returncode == 0, done.stderr[-3000:]
    run = "files_enrich"
    counts = {r["step"]: r["sum"] for r in _rows(influx_client, 'SELECT sum("count") FROM "latency" WHERE "run" = $run '
                                                 'GROUP BY "step"', run=run)}
    (rows,) = _rows(influx_client, 'SELECT sum("input_rows") FROM "spark_progress" WHERE "run" = $run', run=run)
    assert rows["sum"] > 0 and counts == {"arrival": rows["sum"], "enrich": rows["sum"]}
    (steps,) = _rows(influx_client, 'SELECT "steps" FROM "runs" WHERE "run" = $run', run=run)
    assert json.loads(steps["steps"]) == ["arrival", "enrich"]

    from collector.query.store import MetricsStore
    from collector.query.ranges import TimeRange
    import time
    hist = MetricsStore(influx_client).step_histogram(run, "enrich", TimeRange(time.time_ns() - 600 * 10**9,
                                                                                 time.time_ns()))
    assert hist.total_count == rows["sum"] and hist.value_at_percentile(50) >= slow_ms * 1_000_000

    bp = _rows(influx_client, 'SELECT last("status"), last("overrun_share") FROM "backpressure" WHERE "run" = $run '
               'AND "step" = \'job\'', run=run)
    assert bp[0]["last"] in ("LOW", "HIGH") and bp[0]["last_1"] > 0.1

    store = RuleStore(tmp_path / "rules.json")
    store.put_all([Rule.from_dict({"name": "slow-enrich", "condition": "p99 > 1s", "job": run, "step": "enrich",
                                   "window": "5m"})])
    ev = AlertEvaluator(store, influx_client, MemoryWriter())
    transitions = ev.evaluate_once()
    assert [(r.name, t.state) for r, t in transitions] == [("slow-enrich", FIRING)]


@pytest.mark.slow                  # a Spark application in a child process, ~20 s
def test_influxdb_down_never_fails_the_watched_job(tmp_path):
    """With no InfluxDB at the configured address the job runs to its end and exits 0; the
    monitor's points wait in its bounded spool, and one line says where they went."""
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(MS_INFLUX_URL="http://127.0.0.1:9", MS_STATE_DIR=str(tmp_path / "state"), PYSPARK_PYTHON=sys.executable)
    out = tmp_path / "progress.json"
    done = _watch(env, "--", str(PLAIN_JOB), "--seconds", "8", "--out", str(out), "--checkpoint", str(tmp_path / "ck"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text())["progress"]
    spools = list((tmp_path / "state" / "metrics-spool").glob("monitor-*"))
    assert spools and any(f.is_file() for d in spools for f in d.rglob("*"))      # kept for when it returns


# ---------------------------------------------------------------------------------------------
# every end of a watched job: a signal, the script raising, a second session

LIFECYCLE_JOB = Path(__file__).parent / "data" / "lifecycle_job.py"


def _runs(client: InfluxClient, query: str) -> list[dict]:
    return _rows(client, 'SELECT * FROM "runs" WHERE "query" = $query', query=query)


@pytest.mark.slow                  # a Spark application in a child process, ~25 s
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_reaches_the_script_and_the_monitor_flushes_before_watch_exits(influx_client, tmp_path, sig, code):
    """SIGTERM or SIGINT to `watch`: the script's `finally` runs (its query stopped, its
    progress saved, its session stopped), every batch Spark reported is in InfluxDB, the run
    ended stopped, and the command exits with the signal's conventional code."""
    out = tmp_path / "progress.json"
    proc = subprocess.Popen([sys.executable, "-m", "marketspread", "watch", "--", str(LIFECYCLE_JOB), "--mode",
                             "endless", "--out", str(out), "--checkpoint", str(tmp_path / "ck")],
                            cwd=ROOT, env=_env(influx_client, tmp_path / "state"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(1.0)                # batches after the last flush of the writer
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-3000:]
    (query,) = json.loads(out.read_text())["queries"]
    (run,) = _runs(influx_client, "endless")
    assert run["status"] == "stopped" and run["end_ns"] > run["start_ns"]
    assert (run["query_id"], run["run_id"]) == (query["id"], query["run_id"])
    assert run["batches"] == len(query["progress"])
    points = _rows(influx_client, 'SELECT * FROM "spark_progress" WHERE "query" = $query', query="endless")
    assert sorted(p["batch_id"] for p in points) == [p["batchId"] for p in query["progress"]]
    assert {(p["query_id"], p["run_id"]) for p in points} == {(query["id"], query["run_id"])}
    assert "a poll failed" not in err


@pytest.mark.slow                  # a Spark application in a child process, ~20 s
def test_a_script_that_raises_ends_its_running_query_failed_with_the_scripts_reason(influx_client, tmp_path):
    out = tmp_path / "progress.json"
    done = _watch(_env(influx_client, tmp_path / "state"), "--", str(LIFECYCLE_JOB), "--mode", "raise",
                  "--out", str(out), "--checkpoint", str(tmp_path / "ck"))
    assert done.returncode == 1 and "RuntimeError: the job gave up: quota exceeded" in done.stderr
    (run,) = _runs(influx_client, "abandoned")
    assert run["status"] == "failed" and run["end_ns"] > run["start_ns"]
    assert run["error"] == "RuntimeError: the job gave up: quota exceeded"
    assert run["error_trace"].splitlines()[-1].endswith('raise RuntimeError("the job gave up: quota exceeded")')
    assert "lifecycle_job.py:" in run["error_trace"] and "runpy" not in run["error_trace"]


@pytest.mark.slow                  # two Spark sessions in a child process, ~35 s
def test_a_second_session_is_monitored_and_the_first_monitor_stops_with_its_session(influx_client, tmp_path):
    out = tmp_path / "progress.json"
    done = _watch(_env(influx_client, tmp_path / "state"), "--", str(LIFECYCLE_JOB), "--mode", "two-sessions",
                  "--out", str(out), "--checkpoint", str(tmp_path / "ck"))
    assert done.returncode == 0, done.stderr[-3000:]
    (second,) = json.loads(out.read_text())["queries"][1:]
    (first_run,) = _runs(influx_client, "first-session")
    (second_run,) = _runs(influx_client, "second-session")
    assert first_run["status"] == "stopped" and first_run["end_ns"] > first_run["start_ns"]   # left running
    assert second_run["status"] == "stopped" and second_run["run_id"] == second["run_id"]
    assert first_run["app_id"] != second_run["app_id"]
    points = _rows(influx_client, 'SELECT * FROM "spark_progress" WHERE "query" = $query', query="second-session")
    assert sorted(p["batch_id"] for p in points) == [p["batchId"] for p in second["progress"]]
    executors = _rows(influx_client, 'SELECT * FROM "spark_executor" WHERE "app" = $app', app=second_run["app_id"])
    assert executors                                  # the second session's metrics sink, relayed too
    assert "a poll failed" not in done.stderr

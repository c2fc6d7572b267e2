"""`alerts add` and `alerts load` check a rule's job, query and figures against a real InfluxDB.

The CLI runs in-process (`marketspread.cli.main`, the console script's function): exit 2
and one line for a refusal, exit 0 and `note:` lines on stderr for an accepted rule.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from alerts.job_names import MAX_JOBS_LISTED, NEW_JOB_FLAG
from alerts.store import RuleStore
from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx import InfluxConfig, Point
from collector.points import latency_point
from collector.units import NS
from collector.vocabulary import (BACKPRESSURE, SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE, STEP_E2E, STEP_JOB,
                                  TAG_OPERATOR, TAG_QUERY, TAG_RUN, TAG_SOURCE, TAG_STEP)
from marketspread.cli import main

#: what the database holds, oldest job first: Market Spread's latency, then two Spark queries
STATELESS, STATEFUL, MARKET = "clicks-enrich", "sessions", "ms-run"


def _write_jobs(client, now: int) -> None:
    hist = LatencyHistogram.from_values(np.array([1_000_000, 2_000_000], dtype=np.int64))
    points = [latency_point(IntervalHistogram(MARKET, "orders", STEP_E2E, "host/p0", now - 60 * NS + i * NS, NS, hist))
              for i in range(3)]
    for i in range(3):
        t = now - 30 * NS + i * NS
        for job in (STATELESS, STATEFUL):
            fields = {"batch_id": i, "batch_ms": 200, "input_rows": 10, "trigger_ms": 1000, "overran": 0}
            if job == STATEFUL:
                fields["state_rows"] = 100 * i
                points.append(Point(SPARK_STATE, {TAG_RUN: job, TAG_QUERY: job, TAG_OPERATOR: "0:stateStoreSave"},
                                    {"rows_total": 100 * i, "memory_bytes": 4096, "late_rows": 0}, t + NS // 2))
            points.append(Point(SPARK_PROGRESS, {TAG_RUN: job, TAG_QUERY: job}, fields, t + (NS // 2 if job == STATEFUL
                                                                                            else 0)))
            points.append(Point(SPARK_SOURCE, {TAG_RUN: job, TAG_QUERY: job, TAG_SOURCE: "0:RateStreamV2"},
                                {"input_rows": 10}, t))
            points.append(Point(BACKPRESSURE, {TAG_RUN: job, TAG_STEP: STEP_JOB}, {"backpressured_share": 0.0}, t))
    client.write(points)


@pytest.fixture
def alerts_cli(influx_client, tmp_path, monkeypatch, capsys):
    """Return `cli(*args) -> (exit code, stdout, stderr)` against the test's database and state folder."""
    for k, v in influx_client.config.as_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MS_ALERTS_FILE", raising=False)
    capsys.readouterr()

    def cli(*args: str) -> tuple[int, str, str]:
        code = main(["alerts", "--state-dir", str(tmp_path / "state"), *args])
        out = capsys.readouterr()
        return code, out.out, out.err
    return cli


def _rules(tmp_path) -> list[str]:
    return [r.name for r in RuleStore(tmp_path / "state" / "alerts" / "rules.json").rules()]


def _refused(result: tuple[int, str, str], *parts: str) -> str:
    code, _, err = result
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err
    return err


def test_an_unknown_job_is_refused_with_the_known_jobs_newest_first(influx_client, alerts_cli, tmp_path):
    _write_jobs(influx_client, time.time_ns())
    _refused(alerts_cli("add", "x", "p99 > 5ms", "--job", "no_such_job"),
             "rule 'x': job 'no_such_job' is unknown; known jobs, newest first: "
             f"{STATEFUL}, {STATELESS}, {MARKET} (for a job that has not run yet, add {NEW_JOB_FLAG})")
    _refused(alerts_cli("add", "x", "batch_duration > trigger", "--job", "clicks-enrch"),
             f"did you mean '{STATELESS}'?")
    assert _rules(tmp_path) == []

    code, out, err = alerts_cli("add", "x", "p99 > 5ms", "--job", "no_such_job", NEW_JOB_FLAG)
    assert code == 0 and "added x: job no_such_job · start-to-end: p99 > 5ms" in out
    assert err == ("note: rule 'x': job 'no_such_job' has no data yet; accepted as a job that has not run yet, "
                   "it reads as no data until it runs\n")
    code, _, err = alerts_cli("add", "y", "p99 > 5ms", "--job", MARKET)
    assert (code, err) == (0, "")
    _refused(alerts_cli("add", "z", "p99 > 5ms", "--job", MARKET, "--step", "enrich"),
             f"step 'enrich' is not a step of run {MARKET}; valid: {STEP_E2E}")
    code, _, err = alerts_cli("add", "z", "p99 > 5ms", "--job", "no_such_job", "--step", "enrich", NEW_JOB_FLAG)
    assert code == 0 and "job 'no_such_job' has no data yet" in err
    assert _rules(tmp_path) == ["x", "y", "z"]


def test_figures_the_job_never_reported_are_accepted_with_a_note(influx_client, alerts_cli, tmp_path):
    _write_jobs(influx_client, time.time_ns())
    for args, note in (
            (("p99 > 5ms", "--job", STATELESS),
             f"job {STATELESS} reports no latency steps; p99 has no data until it records some "
             "(record_latency/timed_step)"),
            (("throughput < 1k/s", "--job", STATELESS), f"job {STATELESS} reports no latency steps"),
            # a job's own steps are still to come: taken as given
            (("p99 > 1s", "--job", STATELESS, "--step", "enrich", "--pipeline", STATELESS),
             f"job {STATELESS} reports no latency steps"),
            (("state_rows > 1M", "--job", STATELESS), f"job {STATELESS} has no stateful operator; state_rows stays "
                                                     "empty"),
            (("late_rows > 0", "--job", STATELESS, "--query", STATELESS),
             f"job {STATELESS} query {STATELESS} has no stateful operator; late_rows stays empty"),
            (("rows_behind > 1M", "--job", STATELESS), f"job {STATELESS} has never reported rows_behind"),
            (("files_behind > 10", "--job", STATELESS, "--source", "0:RateStreamV2"),
             f"job {STATELESS} source 0:RateStreamV2 has never reported files_behind"),
            (("backlog > 1M", "--job", MARKET), f"job {MARKET} reports no backpressure yet"),
            (("heap_used > 1GB",), "no executor has reported heap_used yet"),
    ):
        code, out, err = alerts_cli("add", "x", *args, "--replace")
        assert code == 0 and out.startswith(("added x:", "replaced x:")), err
        assert err.startswith(f"note: rule 'x': {note}") and len(err.splitlines()) == 1, (args, err)
    # what the jobs do report: no note
    for args in (("state_rows > 1M", "--job", STATEFUL), ("last(state_rows) > 1", "--operator", "0:stateStoreSave"),
                 ("batch_duration > trigger", "--job", STATELESS), ("backpressure > 50%", "--job", STATEFUL),
                 ("p99 > 5ms", "--job", MARKET), ("p99 > 5ms",)):
        code, _, err = alerts_cli("add", "x", *args, "--replace")
        assert (code, err) == (0, ""), (args, err)


def test_a_query_the_job_never_reported_is_refused_unless_new(influx_client, alerts_cli, tmp_path):
    _write_jobs(influx_client, time.time_ns())
    _refused(alerts_cli("add", "x", "rows_behind > 1M", "--job", STATELESS, "--query", "sesions"),
             f"query 'sesions' is not a query of run {STATELESS}", f"valid: {STATELESS}", NEW_JOB_FLAG)
    _refused(alerts_cli("add", "x", "rows_behind > 1M", "--query", "sesions"),
             "query 'sesions' is not a query of any run; did you mean 'sessions'?")
    _refused(alerts_cli("add", "x", "rows_behind > 1M", "--job", MARKET, "--query", MARKET),
             f"query '{MARKET}' is unknown: run {MARKET} has reported no query yet", NEW_JOB_FLAG)
    assert _rules(tmp_path) == []
    code, _, err = alerts_cli("add", "x", "rows_behind > 1M", "--job", STATELESS, "--query", "later", NEW_JOB_FLAG)
    assert code == 0 and err == (f"note: rule 'x': query 'later' has no data from run {STATELESS} yet; accepted as "
                                 "a query that has not run yet\n")
    code, _, err = alerts_cli("add", "y", "rows_behind > 1M", "--job", "tomorrow", "--query", "q", NEW_JOB_FLAG)
    assert code == 0 and err.count("note: ") == 1 and "job 'tomorrow' has no data yet" in err
    assert _rules(tmp_path) == ["x", "y"]


def test_a_rules_file_is_checked_as_add_checks_one_rule(influx_client, alerts_cli, tmp_path):
    _write_jobs(influx_client, time.time_ns())
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"rules:\n  - name: ok\n    condition: state_rows > 1M\n    job: {STATEFUL}\n"
                     f"  - name: stateless-state\n    condition: state_rows > 1M\n    job: {STATELESS}\n"
                     "  - name: typo\n    condition: batch_duration > trigger\n    job: sesions\n")
    _refused(alerts_cli("load", str(rules)), "rule 'typo': job 'sesions' is unknown; did you mean 'sessions'?")
    assert _rules(tmp_path) == []                   # all or nothing: the good rules wait for the bad one
    code, out, err = alerts_cli("load", str(rules), NEW_JOB_FLAG)
    assert code == 0 and "3 added" in out
    assert err.splitlines() == [f"note: rule 'stateless-state': job {STATELESS} has no stateful operator; state_rows "
                                "stays empty",
                                "note: rule 'typo': job 'sesions' has no data yet; accepted as a job that has not "
                                "run yet, it reads as no data until it runs"]


def test_many_jobs_are_listed_newest_first_and_cut(influx_client, alerts_cli):
    now = time.time_ns()
    jobs = [f"job-{i:02d}" for i in range(MAX_JOBS_LISTED + 5)]          # job-24 is the newest
    influx_client.write([Point(SPARK_PROGRESS, {TAG_RUN: j, TAG_QUERY: j}, {"batch_ms": 5}, now - (100 - i) * NS)
                         for i, j in enumerate(jobs)])
    err = _refused(alerts_cli("add", "x", "batch_duration > 1s", "--job", "nope"))
    listed = err.split("newest first: ")[1]
    newest = ", ".join(reversed(jobs[5:]))
    assert listed.startswith(newest + " and 5 more (for a job"), listed


def test_an_empty_database_refuses_a_job_and_notes_every_figure(alerts_cli, tmp_path):
    _refused(alerts_cli("add", "x", "p99 > 5ms", "--job", "first"),
             "job 'first' is unknown: no job has written metrics to this InfluxDB yet", NEW_JOB_FLAG)
    code, _, err = alerts_cli("add", "x", "state_rows > 1M")
    assert code == 0 and err == "note: rule 'x': no job has a stateful operator yet; state_rows stays empty\n"


HOSTILE = ('x" OR ""="', "a'; DROP DATABASE t; --", "q\" WITH KEY = \"run", "x) OR (1=1", "$job", "* ; SHOW USERS")


def test_hostile_names_are_refused_or_bound_never_spliced(influx_client, alerts_cli, tmp_path):
    _write_jobs(influx_client, time.time_ns())
    for job in ('x"y', "x'y", "x\\y", "x\ny", "x; DROP DATABASE t", "a OR 1=1"):
        _refused(alerts_cli("add", "x", "p99 > 5ms", "--job", job), "job (run)")         # check_name's refusal
    for query in HOSTILE:
        # a query name is free text (Spark's), so it is a bound parameter: unknown, so refused, nothing run
        _refused(alerts_cli("add", "x", "rows_behind > 1M", "--job", STATELESS, "--query", query),
                 f"query {query!r} is not a query of run {STATELESS}")
        _refused(alerts_cli("add", "x", "rows_behind > 1M", "--query", query), f"query {query!r} is not a query")
    for query in ("q\\x", "q\nx"):
        _refused(alerts_cli("add", "x", "rows_behind > 1M", "--query", query), "query")
    # a job's own name from the data, however odd, is listed as it is and matched exactly
    odd = "o'dd\"job"
    influx_client.write([Point(SPARK_PROGRESS, {TAG_RUN: odd, TAG_QUERY: odd}, {"batch_ms": 5}, time.time_ns())])
    err = _refused(alerts_cli("add", "x", "p99 > 5ms", "--job", "nope"))
    assert f"newest first: {odd}, " in err
    assert _rules(tmp_path) == []
    assert influx_client.query(f'SHOW TAG VALUES FROM "{SPARK_PROGRESS}" WITH KEY = "{TAG_RUN}"')  # still there


def test_influxdb_unreachable_accepts_with_a_note(alerts_cli, monkeypatch, tmp_path):
    dead = InfluxConfig(url="http://127.0.0.1:1", timeout=1)
    for k, v in dead.as_env().items():
        monkeypatch.setenv(k, v)
    code, _, err = alerts_cli("add", "x", "p99 > 5ms", "--job", "anything")
    assert code == 0, err
    assert err.startswith("note: rule 'x': job 'anything' not checked (InfluxDB at http://127.0.0.1:1 is "
                          "unreachable)") and len(err.splitlines()) == 1, err
    code, _, err = alerts_cli("add", "y", "state_rows > 1M")
    assert code == 0 and err == "note: rule 'y': its data not checked (InfluxDB at http://127.0.0.1:1 is unreachable)\n"
    _refused(alerts_cli("add", "z", "p99 > 5ms", "--step", "chek_market_data"), "did you mean 'check_market_data'?")
    assert _rules(tmp_path) == ["x", "y"]

"""Alert state per state folder, and scope names checked, against a real run in a real InfluxDB.

One real replay (ingress, Spark, the metrics shipper) writes the metrics; `marketspread
alerts serve` processes of different state folders share its database; `alerts add`,
`list` and `load` run through the command line's `main`, in-process.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from alerts.evaluate import FIRING, OK, RESOLVED
from alerts.history import ALERT_EVENTS, AlertEvent, AlertHistory, event_point
from alerts.namespace import NAMESPACE_FILE, AlertNamespace, load_namespace
from alerts.rules import Rule
from alerts.evaluator import start_evaluator
from alerts.store import RuleStore
from collector.influx import InfluxClient, InfluxConfig, Point
from collector.testing import MemoryWriter
from marketspread.cli import main
from engine.config import Config
from perf.fleet import Fleet, wait_until
from marketspread.replay import replay
from engine.tools.generate import generate

from ..conftest import fresh_database
from .webhook_server import WebhookReceiver
from ..cli_inprocess import run_main
from collector.settings import PROJECT_ROOT

ROOT = PROJECT_ROOT
RUN = "ns-run"


@pytest.fixture(scope="module")
def run_db(influxdb, spark, tmp_path_factory):
    """A database holding one real run's metrics (run `ns-run`), shared by this module's tests."""
    gen = fresh_database(influxdb, "t_alerts_namespaces")
    client = next(gen)
    tmp = tmp_path_factory.mktemp("ns-run")
    nbbo, orders = tmp / "nbbo.msg", tmp / "orders.msg"
    generate(nbbo, orders, symbols=100, nbbo=5_000, orders=5_000, wide_share=0.1, seed=7)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in client.config.as_env().items():
            mp.setenv(key, value)
        rep = replay([nbbo], [orders], tmp / "out.msg", Config.from_env(state_dir=tmp / "run"),
                     run_id=RUN, spark=spark)
    assert rep.accepted == 10_100
    yield client
    next(gen, None)


def _env(client, state: Path, **extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MS_STATE_DIR": str(state), **client.config.as_env(), **extra}
    for name in ("MS_ALERTS_FILE", "MS_WEBHOOK_ALLOW"):
        if name not in extra:
            env.pop(name, None)
    return env


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_main(["alerts", *args], env)


def _one_line_error(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, (out.stdout, out.stderr)
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _cycles_after(state: Path, t_ns: int):
    """Return a predicate: the folder's evaluator has completed a cycle that started after `t_ns`."""
    def done() -> bool:
        try:
            return json.loads((state / "alerts" / "evaluator.json").read_text())["last_cycle_ns"] > t_ns
        except (OSError, ValueError, KeyError):
            return False
    return done


def _listed_state(env: dict, rule: str) -> str:
    out = _cli(env, "list")
    assert out.returncode == 0, out.stderr
    [line] = [ln for ln in out.stdout.splitlines() if ln.split()[:1] == [rule]]
    return line.split()[1]


def test_an_evaluator_never_touches_another_state_folders_rules(run_db, tmp_path):
    """Issue 16: a bench folder's evaluator (no rules, or a rule of the same name) shares the database."""
    main, bench, other = tmp_path / "main", tmp_path / "bench", tmp_path / "other"
    (tmp_path / "logs").mkdir()
    with WebhookReceiver() as hook:
        env = {s: _env(run_db, s, MS_WEBHOOK_ALLOW="127.0.0.1") for s in (main, bench, other)}
        added = _cli(env[main], "add", "main", "p99 > 1us", "--job", RUN, "--window", "1h",
                     "--webhook", hook.url)
        assert added.returncode == 0, added.stderr
        # the bench folder has a rule of the same name that never breaks; the other folder has none
        added = _cli(env[bench], "add", "main", "p99 > 1h", "--window", "1h", "--webhook", hook.url)
        assert added.returncode == 0, added.stderr
        fleet = Fleet(tmp_path / "logs", cwd=ROOT, env={k: v for k, v in env[main].items()
                                                        if k not in ("MS_STATE_DIR",)})
        try:
            serve_main = fleet.spawn("serve-main", ["alerts", "--state-dir", main, "serve", "--interval", "0.5"])
            fired = hook.next(timeout=60)
            assert (fired["rule"], fired["state"], fired["condition"]) == ("main", FIRING, "p99 > 1us")
            wait_until(lambda: _listed_state(env[main], "main") == FIRING, 30, "main's FIRING recorded",
                       [serve_main], interval=1.0)

            started = time.time_ns()
            serve_bench = fleet.spawn("serve-bench", ["alerts", "--state-dir", bench, "serve", "--interval", "0.5"])
            serve_other = fleet.spawn("serve-other", ["alerts", "--state-dir", other, "serve", "--interval", "0.5"])
            for state, proc in ((bench, serve_bench), (other, serve_other)):
                wait_until(_cycles_after(state, started + 2_000_000_000), 60, f"{state.name}'s cycles", [proc])
            fleet.stop(serve_bench)                     # a clean stop flushes what they wrote
            fleet.stop(serve_other)
            assert serve_bench.popen.returncode == 0 and serve_other.popen.returncode == 0

            # the main folder's rule is still FIRING, and nobody else wrote about it
            assert _listed_state(env[main], "main") == FIRING
            assert _listed_state(env[bench], "main") == OK
            rows = [row for s in run_db.query(f'SELECT * FROM "{ALERT_EVENTS}" WHERE "rule" = \'main\'')
                    for row in s.rows()]
            assert [(r["previous"], r["state"]) for r in rows] == [(OK, FIRING)]
            assert rows[0]["namespace"] == load_namespace(main / "alerts" / "rules.json").id
            assert hook.received.empty() and hook.requests == 1     # no RESOLVED from the bench folder

            # the three folders have three namespaces, each kept where its rules are
            ids = {json.loads((s / "alerts" / NAMESPACE_FILE).read_text())["id"] for s in (main, bench, other)}
            assert len(ids) == 3
            assert serve_main.alive()
        finally:
            fleet.stop_all()


def test_untagged_history_belongs_to_the_folder_that_had_rules_before_namespaces(influx_client, tmp_path):
    """Points an older version wrote (no namespace tag) are read by the upgraded folder only."""
    old, new = tmp_path / "old" / "alerts" / "rules.json", tmp_path / "new" / "alerts" / "rules.json"
    old.parent.mkdir(parents=True)
    # a rules file as the older version left it: no namespace file beside it
    old.write_text(json.dumps({"version": 1, "rules": [{"name": "main", "condition": "p99 > 1us"}]}))
    t = time.time_ns() - 60_000_000_000
    influx_client.write([Point(ALERT_EVENTS, {"rule": "main"},
                               {"state": FIRING, "previous": OK, "condition": "p99 > 1us", "scope": ""}, t)])
    legacy = load_namespace(old)
    assert legacy.legacy and load_namespace(old) == legacy          # created once, then kept
    RuleStore(new).put(Rule.from_dict({"name": "main", "condition": "p99 > 1ms"}))
    fresh = load_namespace(new)
    assert not fresh.legacy and fresh.id != legacy.id

    assert AlertHistory(influx_client, legacy).current()["main"].state == FIRING
    assert AlertHistory(influx_client, fresh).current() == {}
    # once the upgraded folder writes, its tagged point is the newest and wins
    influx_client.write([event_point(AlertEvent("main", t + 1_000_000_000, RESOLVED, FIRING, 5.0, "p99 > 1us"),
                                     "any job", legacy)])
    assert AlertHistory(influx_client, legacy).current()["main"].state == RESOLVED
    assert [e.state for e in AlertHistory(influx_client, legacy).events("main")] == [RESOLVED, FIRING]
    assert AlertHistory(influx_client, AlertNamespace("someoneelse")).events("main") == []


def test_a_damaged_namespace_file_is_one_clear_line_and_the_job_runs_on(tmp_path, capsys):
    state = tmp_path / "state"
    rules = state / "alerts" / "rules.json"
    RuleStore(rules).put(Rule.from_dict({"name": "main", "condition": "p99 > 1ms"}))
    (rules.parent / NAMESPACE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=r"namespace\.json is damaged .*remove it"):
        load_namespace(rules)
    assert main(["alerts", "--state-dir", str(state), "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert "namespace.json is damaged" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    # the job's evaluator stays off (logged), and its lock is free for one started once the file is fixed
    assert start_evaluator(state, MemoryWriter(), client=InfluxClient(InfluxConfig(url="http://127.0.0.1:9"))) is None
    (rules.parent / NAMESPACE_FILE).unlink()
    ev = start_evaluator(state, MemoryWriter(), client=InfluxClient(InfluxConfig(url="http://127.0.0.1:9")),
                         interval_s=3600)
    assert ev is not None
    ev.stop()


def test_a_namespace_that_cannot_be_created_is_one_clear_line(tmp_path):
    (tmp_path / "alerts").write_text("a file where the rules folder should be")
    with pytest.raises(ValueError, match=r"cannot read or create the alert namespace .*alerts/namespace\.json: "):
        load_namespace(tmp_path / "alerts" / "rules.json")

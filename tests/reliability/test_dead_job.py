"""A watched job's driver is SIGKILLed while the dashboard and another watched job run: the monitor says so.

Real processes as a user starts them (`marketspread ui`, two `marketspread watch` jobs), a real
InfluxDB, a real Alertmanager and a webhook receiver. Three processes evaluate the rules, and
the lease has one of them do it: every transition is notified exactly once. After the kill
the run reads *lost*, `batch_age` and `status = lost` fire, a rule that was firing while the job
ran stays firing (no data is kept, not resolved), and a silence set in Alertmanager holds its
alert back.
"""
from __future__ import annotations

import os
import signal
import time

from collector.influx.server import free_port
from collector.query.store import MetricsStore
from perf.fleet import signal_session
from tests.alerts.alertmanager_fixture import alertmanager  # noqa: F401 - the fixture
from tests.alerts.webhook_server import WebhookReceiver
from tests.cli_inprocess import run_main
from tests.reliability.harness import ROOT, fleet_for, wait_until

JOB = "rate_windowed"



def _batches(client, job: str) -> int:
    series = client.query('SELECT count("batch_ms") FROM "spark_progress" WHERE "run" = $run', {"run": job})
    return sum(int(v[1]) for s in series for v in s.values)


def test_a_killed_driver_is_lost_and_pages_once_through_the_dashboard(tmp_path, influx_client, alertmanager):  # noqa: F811
    with WebhookReceiver() as hook:
        env = {**influx_client.config.as_env(), "MS_STATE_DIR": str(tmp_path / "state"),
               "MS_WEBHOOK_ALLOW": "127.0.0.1", "MS_ALERTMANAGER_URL": alertmanager.url,
               "MS_ALERTS_INTERVAL_S": "1"}
        fleet = fleet_for(tmp_path / "run", env)
        try:
            ui = fleet.spawn("ui", ["ui", "--port", free_port()])
            job = fleet.spawn("job", ["watch", "--", ROOT / "examples" / "rate_windowed.py", "--duration", "0", "--rate", "200",
                                      "--trigger-ms", "500", "--work-dir", tmp_path / "job"])
            other = fleet.spawn("other", ["watch", "--", ROOT / "examples" / "stream_join.py", "--duration", "0",
                                          "--work-dir", tmp_path / "other"])
            procs = [ui, job, other]
            wait_until(lambda: _batches(influx_client, JOB) >= 3, 240, "the job's batches", procs)
            for name, cond, extra in (("dead", "batch_age > 8s", []), ("lost", "status = lost", []),
                                      ("busy", "max(batch_duration) > 1ms", ["--window", "10s"])):
                added = run_main(["alerts", "add", name, cond, "--job", JOB, "--webhook", hook.url, *extra],
                                 {**os.environ, **env})
                assert added.returncode == 0, added.stderr
            busy = hook.next(timeout=60)
            assert (busy["rule"], busy["state"]) == ("busy", "FIRING")
            silence = alertmanager.api("POST", "/silences", {
                "matchers": [{"name": "alertname", "value": "lost", "isRegex": False}],
                "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60)),
                "endsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600)),
                "createdBy": "test", "comment": "maintenance"})["silenceID"]

            killed = time.monotonic()
            signal_session(job, signal.SIGKILL)                  # the driver and its JVM, no word said
            job.popen.wait(30)
            fired = {}
            while len(fired) < 2 and time.monotonic() - killed < 90:
                n = hook.next(timeout=90)
                assert n["state"] == "FIRING" and n["rule"] in ("dead", "lost"), n     # busy never resolves
                fired[n["rule"]] = time.monotonic() - killed
            assert set(fired) == {"dead", "lost"}

            runs = MetricsStore(influx_client).runs(time.time_ns())
            assert {r.status for r in runs if r.run == JOB} == {"lost"}

            # Alertmanager holds dead and lost (and busy); lost is silenced: its receiver never gets it
            held = wait_until(lambda: (lambda a: a if {"dead", "lost", "busy"} <= set(a) else None)(
                {x["labels"]["alertname"]: x for x in alertmanager.alerts()}), 60, "Alertmanager's alerts", [ui])
            assert held["lost"]["status"]["silencedBy"] == [silence]
            assert held["dead"]["labels"]["job"] == JOB and held["dead"]["labels"]["run_id"]
            wait_until(lambda: {a.get("labels", {}).get("alertname") for m in list(alertmanager.hook.received.queue)
                                for a in m.get("alerts", [])} >= {"dead", "busy"}, 60, "Alertmanager's receiver", [ui])
            notified = {a["labels"]["alertname"] for m in list(alertmanager.hook.received.queue)
                        for a in m.get("alerts", [])}
            assert "lost" not in notified

            time.sleep(8)                                        # several more cycles of three evaluators
            assert hook.received.empty()                         # each transition once; busy still firing
            assert other.alive() and ui.alive()
        finally:
            fleet.stop_all()

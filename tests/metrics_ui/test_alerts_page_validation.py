"""The Alerts page's form checks a rule's job and figures as `alerts add` does, in headless Chromium."""
from __future__ import annotations

import time

from alerts.job_names import NEW_JOB_FLAG
from alerts.store import RuleStore
from collector.influx.server import free_port
from metrics_ui.app import UiConfig, create_app

from tests.alerts.test_job_validation import MARKET, STATEFUL, STATELESS, _write_jobs
from .test_alerts_page import TIMEOUT, _fill


def test_the_form_refuses_an_unknown_job_and_notes_a_figure_the_job_never_reported(dash_duo, influx_client,
                                                                                   tmp_path):
    _write_jobs(influx_client, time.time_ns())
    rules_path = tmp_path / "alerts" / "rules.json"
    app = create_app(UiConfig(influx=influx_client.config, refresh_ms=500, alerts_file=rules_path))
    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_page(dash_duo.server_url + "/alerts")
    dash_duo.wait_for_contains_text("#alerts-table", "no rules yet", timeout=TIMEOUT)

    _fill(dash_duo, {"name": "lag", "condition": "state_rows > 1M", "job": "no_such_job"})
    dash_duo.wait_for_contains_text("#alerts-message", "rule 'lag': job 'no_such_job' is unknown; known jobs, "
                                    f"newest first: {STATEFUL}, {STATELESS}, {MARKET}", timeout=TIMEOUT)
    message = dash_duo.find_element("#alerts-message").text
    assert f"marketspread alerts add NAME CONDITION --job JOB {NEW_JOB_FLAG}" in message
    assert dash_duo.find_elements("#alerts-message .banner-warning")
    assert RuleStore(rules_path).rules() == []

    _fill(dash_duo, {"job": STATELESS})
    dash_duo.wait_for_contains_text("#alerts-message", f"Created lag: job {STATELESS}", timeout=TIMEOUT)
    note = dash_duo.find_element("#alerts-message .alert-note").text
    assert note == f"note: rule 'lag': job {STATELESS} has no stateful operator; state_rows stays empty"
    assert [r.name for r in RuleStore(rules_path).rules()] == ["lag"]

    _fill(dash_duo, {"name": "state", "condition": "state_rows > 1M", "job": STATEFUL})
    dash_duo.wait_for_contains_text("#alerts-message", "Created state", timeout=TIMEOUT)
    assert not dash_duo.find_elements("#alerts-message .alert-note")
    assert dash_duo.get_logs() == []

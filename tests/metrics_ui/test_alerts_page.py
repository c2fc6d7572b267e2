"""The alerts page and the firing banner in headless Chromium, against a real InfluxDB.

Rules are created through the form; states come from the real evaluator run over real
latency points (no event is written by hand).
"""
from __future__ import annotations

import time
import urllib.request
from urllib.parse import urlsplit

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from alerts.evaluator import AlertEvaluator
from alerts.history import AlertHistory, notification_point
from alerts.namespace import load_namespace
from alerts.notify import WebhookNotifier
from alerts.rules import Rule
from alerts.store import RuleStore
from alerts.webhook_target import WebhookPolicy
from collector.influx import InfluxWriter
from collector.testing import MemoryWriter
from engine.config import Config
from perf.fleet import Fleet, wait_until
from marketspread.replay import replay
from engine.tools.generate import generate
from metrics_ui.app import UiConfig, create_app

from .conftest import NS, make_points
from .test_pages import _fits_window
from collector.influx.server import free_port
from collector.settings import PROJECT_ROOT

TIMEOUT = 10
ROOT = PROJECT_ROOT


def _click(dash_duo, selector: str) -> None:
    """Click `selector`, finding it again if a refresh re-rendered it in between (the banner refreshes)."""
    def clicked(_driver) -> bool:
        try:
            dash_duo.find_element(selector).click()
        except StaleElementReferenceException:
            return False
        return True
    dash_duo._wait_for(clicked, timeout=TIMEOUT, msg=f"could not click {selector}")


def _fill(dash_duo, values: dict[str, str]) -> None:
    """Set form fields to exactly `values` and save.

    Each field is focused by WebDriver, not by a mouse click: the evaluator line above the
    form changes its height when the started dashboard's evaluator first reports, and a click
    that lands off the field left its old text in it (`backlog > 1kbacklog > 1k`).
    """
    for key, text in values.items():
        el = dash_duo.find_element(f"#alerts-{key}")
        el.send_keys(Keys.CONTROL, "a")
        el.send_keys(Keys.DELETE)
        if text:
            el.send_keys(text)
        dash_duo._wait_for(lambda _d: el.get_attribute("value") == text, timeout=TIMEOUT,
                           msg=f"the {key} field does not hold {text!r}")
    dash_duo.find_element("#alerts-save").click()


def test_alerts_page_creates_edits_mutes_deletes_and_banner_shows_firing(dash_duo, influx_client, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("MS_WEBHOOK_ALLOW", "127.0.0.1")       # the rule's webhook is a (dead) loopback port
    rules_path = tmp_path / "alerts" / "rules.json"
    app = create_app(UiConfig(influx=influx_client.config, refresh_ms=500, alerts_file=rules_path))
    now = time.time_ns() // NS * NS
    points, _ = make_points("live-a", now - 20 * NS, 20, seed=3)        # start-to-end ~400 ms
    influx_client.write(points)
    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_text_to_equal("h2", "Runs", timeout=TIMEOUT)
    dash_duo.find_element(".top a.nav[href='/alerts']").click()
    dash_duo.wait_for_contains_text("#alerts-table", "no rules yet", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-evaluator", "No evaluator has run yet", timeout=TIMEOUT)

    # bad input: a clear reason above the form, nothing saved
    _fill(dash_duo, {"name": "e2e", "condition": "p99 > 5"})
    dash_duo.wait_for_contains_text("#alerts-message", "needs a unit: ns, us (or µs), ms or s", timeout=TIMEOUT)
    _fill(dash_duo, {"condition": "p99 > 1us", "webhook": "file:///etc/passwd"})
    dash_duo.wait_for_contains_text("#alerts-message", "must start with http:// or https://", timeout=TIMEOUT)
    assert RuleStore(rules_path).rules() == []

    _fill(dash_duo, {"webhook": "http://127.0.0.1:9/hook", "for": "0s", "window": "5m", "pipeline": "orders"})
    dash_duo.wait_for_contains_text("#alerts-message", "Created e2e", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-table", "p99 > 1us", timeout=TIMEOUT)
    assert "any job · orders · start-to-end" in dash_duo.find_element("#alerts-table").text
    [rule] = RuleStore(rules_path).rules()
    assert (rule.name, rule.condition.threshold, rule.pipeline, rule.window_s) == ("e2e", 1000.0, "orders", 300.0)
    assert dash_duo.find_element("#alerts-banner").text == ""

    # the evaluator (not the UI) finds the rule broken: FIRING, banner on every page
    with InfluxWriter(influx_client, tmp_path / "spool").start() as writer:
        ns = load_namespace(rules_path)
        notifier = WebhookNotifier(lambda rec: writer.add(notification_point(rec, ns)), max_attempts=2,
                                   first_backoff_s=0.1, policy=WebhookPolicy.parse("127.0.0.1")).start()
        ev = AlertEvaluator(RuleStore(rules_path), influx_client, writer, interval_s=3600, notifier=notifier)
        [(_, tr)] = ev.evaluate_once()
        assert tr.state == "FIRING" and tr.value > 1e8
        deadline = time.monotonic() + TIMEOUT
        while notifier.failed < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        notifier.stop()
        assert notifier.failed == 1
        assert writer.flush(timeout=10)
    dash_duo.wait_for_contains_text("#alerts-banner", "FIRING: e2e", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-table", "FIRING", timeout=TIMEOUT)
    dash_duo.find_element(".top a.brand").click()
    dash_duo.wait_for_text_to_equal("h2", "Runs", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-banner", "FIRING: e2e", timeout=TIMEOUT)
    # the runs page names the rule on the run's row (a rule without a job covers every run)
    # the rows' text in one script: the table's refresh may replace a row between two WebDriver calls
    rows_js = "return [...document.querySelectorAll('#runs-table tr')].map(tr => tr.innerText)"
    dash_duo._wait_for(lambda d: any("live-a" in text and text.rstrip().endswith("e2e")
                                     for text in d.execute_script(rows_js)),
                       timeout=TIMEOUT, msg="runs page does not show the firing rule")
    _fits_window(dash_duo, "#runs-table")                            # a firing rule's name does not widen it
    _click(dash_duo, "#alerts-banner a")

    # history of the rule: the OK -> FIRING change, and the failed webhook attempt (nothing listens on :9)
    dash_duo.select_dcc_dropdown("#alerts-history-rule", value="e2e")
    dash_duo.wait_for_contains_text("#alerts-history", "FIRING", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-notifications", "failed", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-table", "FIRING failed", timeout=TIMEOUT)

    # edit: the form is filled from the rule; saving under the same name replaces it
    dash_duo.find_element("#alerts-table button.button-edit").click()
    dash_duo._wait_for(lambda d: dash_duo.find_element("#alerts-name").get_attribute("value") == "e2e",
                       timeout=TIMEOUT, msg="form not filled")
    assert dash_duo.find_element("#alerts-condition").get_attribute("value") == "p99 > 1us"
    _fill(dash_duo, {"condition": "p99 > 2us"})
    dash_duo.wait_for_contains_text("#alerts-message", "Saved e2e", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-table", "p99 > 2us", timeout=TIMEOUT)

    # mute: no banner; unmute brings it back; delete removes the rule
    dash_duo.find_element("#alerts-table button.button-mute").click()
    dash_duo.wait_for_contains_text("#alerts-table", "muted", timeout=TIMEOUT)
    dash_duo._wait_for(lambda d: dash_duo.find_element("#alerts-banner").text == "", timeout=TIMEOUT,
                       msg="banner still shown for a muted rule")
    assert RuleStore(rules_path).get("e2e").muted
    dash_duo.find_element("#alerts-table button.button-edit").click()          # an edit keeps it muted
    dash_duo._wait_for(lambda d: dash_duo.find_element("#alerts-name").get_attribute("value") == "e2e",
                       timeout=TIMEOUT, msg="form not filled")
    _fill(dash_duo, {"window": "10m"})
    dash_duo.wait_for_contains_text("#alerts-table", "10m", timeout=TIMEOUT)
    assert RuleStore(rules_path).get("e2e").muted and RuleStore(rules_path).get("e2e").window_s == 600
    dash_duo.find_element("#alerts-table button.button-unmute").click()
    dash_duo.wait_for_contains_text("#alerts-banner", "FIRING: e2e", timeout=TIMEOUT)
    dash_duo.find_element("#alerts-table button.button-delete").click()
    dash_duo.wait_for_contains_text("#alerts-table", "no rules yet", timeout=TIMEOUT)
    assert RuleStore(rules_path).rules() == []
    dash_duo._wait_for(lambda d: not d.find_elements(By.CSS_SELECTOR, "#alerts-banner .banner"), timeout=TIMEOUT,
                       msg="banner still shown for a deleted rule")
    assert dash_duo.get_logs() == []


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def test_the_started_ui_refuses_internal_webhooks_in_the_form(dash_duo, influx_client, tmp_path, monkeypatch):
    """`marketspread ui` as an operator starts it (no MS_WEBHOOK_ALLOW): a hostile user's form gets a reason."""
    for name in ("MS_WEBHOOK_ALLOW", "MS_UI_TOKEN", "MS_UI_USER", "MS_UI_PASSWORD", "MS_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    rules_path = tmp_path / "alerts" / "rules.json"
    (tmp_path / "logs").mkdir()
    fleet = Fleet(tmp_path / "logs", cwd=ROOT, env={
        "PYTHONPATH": str(ROOT), **influx_client.config.as_env(),
        "MS_ALERTS_FILE": str(rules_path), "MS_UI_REFRESH_MS": "500"})
    port, influx_port = free_port(), urlsplit(influx_client.config.url).port
    url = f"http://127.0.0.1:{port}"
    try:
        ui = fleet.spawn("ui", ["ui", "--port", port])
        wait_until(lambda: _answers(url + "/alerts"), 60, "the dashboard to answer", [ui])
        dash_duo.wait_for_page(url + "/alerts")
        dash_duo.wait_for_contains_text("#alerts-table", "no rules yet", timeout=TIMEOUT)
        for webhook, reason in (
                (f"http://127.0.0.1:{influx_port}/query?q=CREATE+DATABASE+x", "resolves to a loopback address"),
                ("http://169.254.169.254/latest/meta-data/", "resolves to a link-local address"),
                ("http://192.168.0.1/admin", "resolves to a private address")):
            _fill(dash_duo, {"name": "x", "condition": "backlog > 1k", "webhook": webhook})
            dash_duo.wait_for_contains_text("#alerts-message", reason, timeout=TIMEOUT)
            assert "MS_WEBHOOK_ALLOW" in dash_duo.find_element("#alerts-message").text
        assert not rules_path.exists()
        # a name that does not resolve now is saved (.example never does): it is checked at each send
        _fill(dash_duo, {"webhook": "https://hooks.example/alert"})
        dash_duo.wait_for_contains_text("#alerts-message", "Created x", timeout=TIMEOUT)
        [rule] = RuleStore(rules_path).rules()
        assert rule.webhook == "https://hooks.example/alert"
        assert dash_duo.get_logs() == []
    finally:
        fleet.stop_all()


def test_the_page_checks_scope_names_and_shows_only_its_folders_states(dash_duo, spark, influx_client, tmp_path,
                                                                        monkeypatch):
    """Issue 16 in the browser, on a real run: a misspelled step is refused with the valid ones listed;
    another state folder's evaluator, sharing the database, changes nothing this folder's page shows."""
    for key, value in influx_client.config.as_env().items():
        monkeypatch.setenv(key, value)
    nbbo, orders = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
    generate(nbbo, orders, symbols=100, nbbo=5_000, orders=5_000, wide_share=0.1, seed=11)
    rep = replay([nbbo], [orders], tmp_path / "out.msg", Config.from_env(state_dir=tmp_path / "run"),
                 run_id="page-run", spark=spark)
    assert rep.accepted == 10_100
    workers = sorted({v[1] for s in influx_client.query('SHOW TAG VALUES FROM "latency" WITH KEY = "worker" '
                                                        'WHERE "run" = \'page-run\' AND "step" = \'sink\'')
                      for v in s.values})
    assert workers

    rules_path = tmp_path / "main" / "alerts" / "rules.json"
    app = create_app(UiConfig(influx=influx_client.config, refresh_ms=500, alerts_file=rules_path))
    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_page(dash_duo.server_url + "/alerts")
    dash_duo.wait_for_contains_text("#alerts-table", "no rules yet", timeout=TIMEOUT)

    _fill(dash_duo, {"name": "cmd", "condition": "p99 > 1us", "step": "chek_market_data"})
    dash_duo.wait_for_contains_text("#alerts-message", "step 'chek_market_data' is not a step of any run; "
                                    "did you mean 'check_market_data'?", timeout=TIMEOUT)
    assert "valid: ingress, source, check_market_data, sink, start-to-end" in \
        dash_duo.find_element("#alerts-message").text
    _fill(dash_duo, {"step": "sink", "job": "page-run", "worker": "nohost/p9"})
    dash_duo.wait_for_contains_text("#alerts-message", "worker 'nohost/p9' is not a worker of run page-run's "
                                    "step sink", timeout=TIMEOUT)
    assert "valid: " + ", ".join(workers) in dash_duo.find_element("#alerts-message").text
    assert RuleStore(rules_path).rules() == []
    _fill(dash_duo, {"step": "check_market_data", "worker": "", "window": "1h"})
    dash_duo.wait_for_contains_text("#alerts-message", "Created cmd", timeout=TIMEOUT)

    # this folder's evaluator fires the rule on the run's latencies
    main = MemoryWriter()
    main_ev = AlertEvaluator(RuleStore(rules_path), influx_client, main, interval_s=3600)
    [(_, tr)] = main_ev.evaluate_once()
    assert tr.state == "FIRING"
    influx_client.write(main.points)
    dash_duo.wait_for_contains_text("#alerts-banner", "FIRING: cmd", timeout=TIMEOUT)

    # a bench folder's evaluators on the same database: no rules, then a rule of the same name that holds
    bench_rules = tmp_path / "bench" / "alerts" / "rules.json"
    bench = MemoryWriter()
    AlertEvaluator(RuleStore(bench_rules), influx_client, bench, interval_s=3600).evaluate_once()
    RuleStore(bench_rules).put(Rule.from_dict({"name": "cmd", "condition": "p99 > 1h", "window": "1h"}))
    AlertEvaluator(RuleStore(bench_rules), influx_client, bench, interval_s=3600).evaluate_once()
    influx_client.write(bench.points)               # what they wrote lands where the page reads (nothing)

    dash_duo.wait_for_page(dash_duo.server_url + "/alerts")       # a fresh render of what is recorded now
    dash_duo.wait_for_contains_text("#alerts-table", "p99 > 1us", timeout=TIMEOUT)
    assert "FIRING" in dash_duo.find_element("#alerts-table").text
    dash_duo.wait_for_contains_text("#alerts-banner", "FIRING: cmd", timeout=TIMEOUT)
    dash_duo.select_dcc_dropdown("#alerts-history-rule", value="cmd")
    dash_duo.wait_for_contains_text("#alerts-history", "FIRING", timeout=TIMEOUT)
    rows = dash_duo.find_elements("#alerts-history tbody tr")
    assert len(rows) == 1 and "rule deleted" not in dash_duo.find_element("#alerts-history").text
    assert AlertHistory(influx_client, main_ev.namespace).current()["cmd"].state == "FIRING"
    assert dash_duo.get_logs() == []
    assert bench.points == []

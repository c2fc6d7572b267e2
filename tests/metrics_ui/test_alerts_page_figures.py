"""The alerts page in headless Chromium with rules on any Spark query's figures, against a real InfluxDB:
bad figure rules show their reason, a good one is saved with its source, and an edit keeps it."""
from __future__ import annotations

import time

from alerts.store import RuleStore
from collector.influx import Point
from collector.influx.server import free_port
from collector.units import NS
from metrics_ui.app import UiConfig, create_app

from .test_alerts_page import TIMEOUT, _fill


def test_alerts_page_explains_bad_figure_rules_and_keeps_a_sources_scope(dash_duo, influx_client, tmp_path):
    rules_path = tmp_path / "alerts" / "rules.json"
    now = time.time_ns()
    influx_client.write([Point("spark_source", {"run": "orders", "query": "orders", "source": "0:KafkaV2"},
                               {"input_rows": 10, "rows_behind": 2_000_000}, now - i * NS) for i in range(5)])
    app = create_app(UiConfig(influx=influx_client.config, refresh_ms=500, alerts_file=rules_path))
    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_text_to_equal("h2", "Runs", timeout=TIMEOUT)
    dash_duo.find_element(".top a.nav[href='/alerts']").click()
    dash_duo.wait_for_contains_text("#alerts-table", "no rules yet", timeout=TIMEOUT)

    for fields, message in (
            ({"name": "lag", "condition": "rows_behind > 5ms"}, "wrong unit: rows_behind is"),
            ({"condition": "rows_behnd > 1M"}, "figure 'rows_behnd' is unknown: use batch_duration"),
            ({"condition": "batch_duration > trigger", "source": "0:KafkaV2"}, "batch_duration has no per-source"),
            ({"condition": "rows_behind > 1M", "job": "orders", "source": "0:Kafka"},
             "source '0:Kafka' is not a source of run orders; did you mean '0:KafkaV2'?")):
        _fill(dash_duo, fields)
        dash_duo.wait_for_contains_text("#alerts-message", message, timeout=TIMEOUT)
    assert not rules_path.exists() or RuleStore(rules_path).rules() == []

    _fill(dash_duo, {"source": "0:KafkaV2"})
    dash_duo.wait_for_contains_text("#alerts-message", "Created lag", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#alerts-table", "job orders · source 0:KafkaV2", timeout=TIMEOUT)
    dash_duo.find_element("#alerts-table button.button-edit").click()
    dash_duo._wait_for(lambda d: dash_duo.find_element("#alerts-source").get_attribute("value") == "0:KafkaV2",
                       timeout=TIMEOUT, msg="the edit form did not show the rule's source")
    _fill(dash_duo, {"condition": "max(rows_behind) > 2M"})
    dash_duo.wait_for_contains_text("#alerts-message", "Saved lag", timeout=TIMEOUT)
    rule = RuleStore(rules_path).get("lag")
    assert (rule.condition.text, rule.job, rule.source, rule.step) == ("max(rows_behind) > 2M", "orders", "0:KafkaV2",
                                                                       None)

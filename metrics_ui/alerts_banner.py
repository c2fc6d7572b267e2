"""Alerts in the dashboard: where the app finds rules and history, and the banner on every page.

The pages never evaluate (the dashboard's process runs an evaluator beside them, under the
lease every evaluator shares, `alerts.lease`, so no webhook is sent twice): they read the
rules file and the `alert_events` history of that
file's namespace (`alerts.namespace`; the rules file is found as the CLI finds it:
`MS_ALERTS_FILE`, else `<MS_STATE_DIR or .state>/alerts/rules.json`). The
banner sits in the shared layout and refreshes on its own interval; it lists every
unmuted rule whose last state change was to FIRING.
"""
from __future__ import annotations

from dataclasses import dataclass

import dash
from dash import Input, Output, dcc, html
from flask import current_app

from alerts.evaluate import FIRING
from alerts.history import AlertHistory
from alerts.namespace import load_namespace
from alerts.rules import Rule
from alerts.store import RuleStore
from collector.influx import InfluxError

EXTENSION = "metrics_ui.alerts"
BANNER = "alerts-banner"
BANNER_INTERVAL = "alerts-banner-interval"


@dataclass(frozen=True)
class AlertsSource:
    """What the UI reads about alerts: the rules file and the InfluxDB history."""
    store: RuleStore
    history: AlertHistory


def source() -> AlertsSource:
    """Return the app's AlertsSource, its history that of the rules folder's namespace only.

    The namespace is read at each call (a small file beside the rules), so a folder whose
    evaluator creates it after the app started is read correctly. If it cannot be read or
    created, the history's queries raise ValueError saying why (the callers show it).
    """
    src = current_app.extensions[EXTENSION]
    try:
        namespace = load_namespace(src.store.path)
    except ValueError as e:
        return AlertsSource(src.store, AlertHistory(src.history.client, None, str(e)))
    return AlertsSource(src.store, src.history.within(namespace))


def firing(rules: list[Rule], hist: AlertHistory) -> list[tuple[Rule, object]]:
    """Return (rule, last event) of every unmuted rule that is FIRING now."""
    current = hist.current()
    return [(r, current[r.name]) for r in rules if not r.muted and r.name in current
            and current[r.name].state == FIRING]


def banner(refresh_ms: int) -> html.Div:
    """Return the banner's place in the shared layout (filled by its callback)."""
    return html.Div([html.Div(id=BANNER), dcc.Interval(id=BANNER_INTERVAL, interval=refresh_ms, n_intervals=0)])


def register(app: dash.Dash) -> None:
    """Register the banner's callback on `app`."""

    @app.callback(Output(BANNER, "children"), Input(BANNER_INTERVAL, "n_intervals"))
    def refresh_banner(_n):
        """Show what fires, on every page."""
        src = source()
        try:
            now = firing(src.store.rules(), src.history)
        except (InfluxError, ValueError):
            return dash.no_update        # the page's own banner reports InfluxDB; the alerts page the file
        if not now:
            return None
        items = []
        for i, (rule, event) in enumerate(now):
            items += [" · " if i else "", html.B(rule.name),
                      f" ({rule.condition.metric} = {rule.condition.format_value(event.value)}, "
                      f"rule {rule.condition.text})"]
        return html.Div([html.Span("FIRING: ", className="firing-label"), *items,
                         " ", dcc.Link("see alerts", href="/alerts")], className="banner banner-firing", role="alert")

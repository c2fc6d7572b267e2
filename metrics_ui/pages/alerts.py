"""Alerts page: the rules with their state, a form to create and edit, mute and delete, history.

Rules are validated by `alerts.rules.Rule.from_dict`, exactly as the CLI's, a webhook
by the same target check (`alerts.webhook_target`) and the job, query, step, pipeline and
worker against what the runs report (`alerts.scope_names`); a bad field shows its reason
above the form, a note (a figure the job never reported) below the saved line. Saving
under an existing name replaces that rule (what "edit" fills the form for). Nothing here
evaluates: states come from the `alert_events` of the rules folder's namespace only, the
evaluator's liveness and query errors from its status file, webhook failures from
`alert_notifications`.
"""
from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone

import dash
from dash import ALL, Input, Output, State, callback, ctx, dcc, html
from dash.exceptions import PreventUpdate
from flask import current_app

from alerts.evaluator import read_status
from alerts.history import NotificationRecord
from alerts.job_names import NEW_JOB_FLAG
from alerts.rules import CONDITION_HELP, DEFAULT_STEP, Rule, format_duration, redact_url
from alerts.scope_names import check_rules
from alerts.webhook_target import check_webhook_target
from collector.influx import InfluxError

from metrics_ui import alerts_banner as ab
from metrics_ui import components as c

dash.register_page(__name__, path="/alerts", title=f"Alerts · {c.PRODUCT}", name="Alerts")

ALERTS_TABLE = "alerts-table"
ALERTS_EVALUATOR = "alerts-evaluator"
ALERTS_BANNER = "alerts-page-banner"
ALERTS_MESSAGE = "alerts-message"
ALERTS_SAVE = "alerts-save"
ALERTS_VERSION = "alerts-version"
ALERTS_DIGEST = "alerts-digest"
ALERTS_INTERVAL = "alerts-interval"
ALERTS_ACTION = "alerts-action"               # pattern-matching id type of the row buttons
ALERTS_HISTORY_RULE = "alerts-history-rule"
ALERTS_HISTORY = "alerts-history"
ALERTS_NOTIFICATIONS = "alerts-notifications"
# form field -> (input id, label, placeholder)
FORM = {
    "name": ("alerts-name", "name", "e2e-p99"),
    "condition": ("alerts-condition", "condition", "p99 > 5ms"),
    "step": ("alerts-step", "step", DEFAULT_STEP),
    "pipeline": ("alerts-pipeline", "pipeline", "all (or nbbo, orders)"),
    "worker": ("alerts-worker", "worker", "all (or host/p0)"),
    "job": ("alerts-job", "job (run)", "any run"),
    "query": ("alerts-query", "query", "any (figures like rows_behind)"),
    "source": ("alerts-source", "source", "all (or 0:KafkaV2)"),
    "operator": ("alerts-operator", "operator", "all (or 0:stateStoreSave)"),
    "app": ("alerts-app", "app", "any (heap_used, gc_time)"),
    "executor": ("alerts-executor", "executor", "all (or driver)"),
    "window": ("alerts-window", "window", "1m"),
    "for": ("alerts-for", "for", "0s"),
    "webhook": ("alerts-webhook", "webhook", "https://hooks.example/alert (optional)"),
}
RULES_HEADER = ("rule", "state", "condition", "scope", "window", "for", "webhook", "last notification", "")
HISTORY_HEADER = ("time (UTC)", "from", "to", "value", "condition then")
NOTIFY_HEADER = ("time (UTC)", "state", "attempt", "result", "url")
STALE_AFTER_S = 30.0
#: how a user of this page adds a rule for a job that has not run yet (the form has no such switch)
NEW_JOB_HINT = f"for a job that has not run yet: marketspread alerts add NAME CONDITION --job JOB {NEW_JOB_FLAG}"


def layout(**_query) -> html.Div:
    """Return the alerts page (data arrives with the first interval tick)."""
    fields = [html.Label([html.Span(label), dcc.Input(id=fid, type="text", placeholder=ph, debounce=False,
                                                      maxLength=2000 if key == "webhook" else 200)],
                         className="form-field")
              for key, (fid, label, ph) in FORM.items()]
    return html.Div([
        html.H2("Alerts"),
        html.P(id=ALERTS_EVALUATOR, className="summary"),
        html.Div(id=ALERTS_BANNER),
        html.Div(c.table(RULES_HEADER, [], empty="loading…"), id=ALERTS_TABLE),
        html.H3("Create or edit a rule"),
        html.P(f"Condition: {CONDITION_HELP}. Saving under an existing name replaces that rule.",
               className="summary"),
        html.Div(id=ALERTS_MESSAGE),
        html.Div(fields + [html.Button("Save rule", id=ALERTS_SAVE, n_clicks=0, className="button")],
                 className="alert-form"),
        html.H3("History"),
        dcc.Dropdown(id=ALERTS_HISTORY_RULE, options=[], placeholder="choose a rule", className="history-pick"),
        html.Div(id=ALERTS_HISTORY),
        html.H4("Webhook attempts"),
        html.Div(id=ALERTS_NOTIFICATIONS),
        dcc.Store(id=ALERTS_VERSION, data=0),
        dcc.Store(id=ALERTS_DIGEST, data=None),
        dcc.Interval(id=ALERTS_INTERVAL, interval=current_app.config["MS_UI"].refresh_ms, n_intervals=0),
    ])


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _button(action: str, rule: str, label: str) -> html.Button:
    return html.Button(label, id={"type": ALERTS_ACTION, "action": action, "rule": rule}, n_clicks=0,
                       className=f"button button-small button-{action}")


def _last_notification(n: NotificationRecord | None):
    if n is None:
        return "—"
    if n.ok:
        return html.Span(f"{n.state} delivered {_utc(n.at_ns)}", className="notify-ok")
    return html.Span(f"{n.state} failed {_utc(n.at_ns)} (attempt {n.attempt}): {n.error}", className="notify-failed")


def _row(rule: Rule, state: str, error: str | None, last: NotificationRecord | None) -> list:
    state_cell = [html.Span(state, className=f"alert-state alert-{state.lower()}")]
    if rule.muted:
        state_cell.append(html.Span(" muted", className="alert-muted"))
    if error:
        state_cell.append(html.Div(error[:200], className="notify-failed"))
    return [html.Span(rule.name, className="rule-name"), html.Span(state_cell), html.Code(rule.condition.text),
            rule.scope_text(), format_duration(rule.window_s), format_duration(rule.for_s),
            redact_url(rule.webhook) or "—", _last_notification(last) if rule.webhook else "—",
            html.Span([_button("edit", rule.name, "edit"),
                       _button("unmute" if rule.muted else "mute", rule.name, "unmute" if rule.muted else "mute"),
                       _button("delete", rule.name, "delete")], className="row-actions")]


def _no_data_text(since_ns) -> str:
    """Say since when a rule's scope has reported nothing (its state is kept, or follows its nodata)."""
    return "no data since " + time.strftime("%H:%M:%S", time.localtime(int(since_ns) / 1e9))


def _evaluator_text(status: dict | None) -> str:
    if status is None:
        return ("No evaluator has run yet: rules are evaluated while the dashboard (`marketspread ui`), a "
                "monitored job or `marketspread alerts serve` runs, by one of them at a time.")
    age = max(0.0, (time.time_ns() - int(status.get("last_cycle_ns", 0))) / 1e9)
    interval = float(status.get("interval_s", 5))
    hooks = status.get("webhooks", {})
    text = (f"Evaluator pid {status.get('pid')} on {status.get('host')}: last cycle {age:.0f} s ago, every "
            f"{interval:g} s; webhooks sent {hooks.get('sent', 0)}, failed {hooks.get('failed', 0)}, "
            f"pending {hooks.get('pending', 0)}.")
    if age > max(STALE_AFTER_S, 3 * interval):
        text = "Evaluator not running (states shown are the last it recorded). " + text
    return text


@callback(Output(ALERTS_TABLE, "children"), Output(ALERTS_EVALUATOR, "children"), Output(ALERTS_BANNER, "children"),
          Output(ALERTS_HISTORY_RULE, "options"), Output(ALERTS_DIGEST, "data"),
          Input(ALERTS_INTERVAL, "n_intervals"), Input(ALERTS_VERSION, "data"), State(ALERTS_DIGEST, "data"))
def refresh_alerts(_n, _version, last_digest):
    """Reload the rules with their current state and last webhook result."""
    src = ab.source()
    try:
        rules = src.store.rules()
    except ValueError as e:
        return dash.no_update, dash.no_update, c.warning_banner(str(e)), dash.no_update, dash.no_update
    status = read_status(src.store.path)
    errors = (status or {}).get("errors", {})
    banner = None
    try:
        current = src.history.current()
        last = {}
        for n in src.history.notifications(limit=500):
            last.setdefault(n.rule, n)
    except InfluxError as e:
        current, last = {}, {}
        banner = c.influx_error_banner(e)
    except ValueError as e:                   # the folder's namespace file, unreadable
        current, last = {}, {}
        banner = c.warning_banner(str(e))
    no_data = (status or {}).get("no_data_since", {})
    shown = [(r, current[r.name].state if r.name in current else "OK",
              errors.get(r.name) or (_no_data_text(no_data[r.name]) if r.name in no_data else None), last.get(r.name))
             for r in rules]
    # Re-render only on change: a table replaced every tick would swallow a click on its buttons.
    digest = hashlib.sha1(json.dumps([(r.to_dict(), st, err, n) for r, st, err, n in shown],
                                     default=str).encode()).hexdigest()
    if digest == last_digest:
        return dash.no_update, _evaluator_text(status), banner, dash.no_update, dash.no_update
    options = [{"label": r.name, "value": r.name} for r in rules]
    table = c.table(RULES_HEADER, [_row(*x) for x in shown], ALERTS_TABLE + "-rules",
                    empty="no rules yet: create one below, or `marketspread alerts add NAME 'p99 > 5ms'`")
    return table, _evaluator_text(status), banner, options, digest


_FORM_OUTPUTS = [Output(fid, "value") for fid, _, _ in FORM.values()]
_FORM_STATES = [State(fid, "value") for fid, _, _ in FORM.values()]


@callback(Output(ALERTS_MESSAGE, "children"), Output(ALERTS_VERSION, "data"), *_FORM_OUTPUTS,
          Input(ALERTS_SAVE, "n_clicks"), Input({"type": ALERTS_ACTION, "action": ALL, "rule": ALL}, "n_clicks"),
          State(ALERTS_VERSION, "data"), *_FORM_STATES, prevent_initial_call=True)
def change_rules(_save, _actions, version, *values):
    """Save the form, or run a row's edit / mute / unmute / delete."""
    trigger = ctx.triggered_id
    if not ctx.triggered or not ctx.triggered[0].get("value"):
        raise PreventUpdate                   # buttons re-rendered by a refresh, not clicked
    store = ab.source().store
    keep = [dash.no_update] * len(FORM)
    try:
        if trigger == ALERTS_SAVE:
            given = {k: v for k, v in zip(FORM, values) if isinstance(v, str) and v.strip()}
            before = store.get(given["name"]) if isinstance(given.get("name"), str) else None
            rule = Rule.from_dict({**given, "muted": before.muted if before is not None else False})
            # the same check as `alerts add`: no internal address unless MS_WEBHOOK_ALLOW allows it
            policy = current_app.config["MS_UI"].alerts.webhook_policy()     # read when the app was made
            notes = [check_webhook_target(rule.webhook, policy)] if rule.webhook else []
            # and as theirs: a job, query, step, pipeline or worker no run reports is refused, the valid ones
            # listed; a figure the job never reported is a note
            notes += check_rules(c.store().client, [rule], hint=NEW_JOB_HINT)
            new = store.put(rule)
            text = f"{'Created' if new else 'Saved'} {rule.name}: {rule.summary()}"
            shown = [html.Div(text, className="banner banner-ok", role="status")]
            shown += [html.Div(f"note: {n}", className="banner banner-warning alert-note") for n in notes if n]
            return html.Div(shown), (version or 0) + 1, *([""] * len(FORM))
        action, name = trigger["action"], trigger["rule"]
        if action == "edit":
            rule = store.get(name)
            if rule is None:
                raise ValueError(f"no rule called {name!r}")
            d = rule.to_dict()
            return (None, dash.no_update, *[str(d.get(k, "")) for k in FORM])
        if action in ("mute", "unmute"):
            store.set_muted(name, action == "mute")
            return html.Div(f"{name} {action}d", className="banner banner-ok", role="status"), (version or 0) + 1, *keep
        if action == "delete":
            store.remove(name)
            return html.Div(f"Deleted {name}", className="banner banner-ok", role="status"), (version or 0) + 1, *keep
    except ValueError as e:
        return c.warning_banner(str(e)), dash.no_update, *keep
    raise PreventUpdate


@callback(Output(ALERTS_HISTORY, "children"), Output(ALERTS_NOTIFICATIONS, "children"),
          Input(ALERTS_HISTORY_RULE, "value"), Input(ALERTS_INTERVAL, "n_intervals"))
def refresh_history(rule, _n):
    """Show the chosen rule's state changes and webhook attempts."""
    if not rule:
        return (c.table(HISTORY_HEADER, [], empty="choose a rule"), c.table(NOTIFY_HEADER, [], empty="choose a rule"))
    src = ab.source()
    try:
        found = src.store.get(rule)
        events = src.history.events(rule)
        notes = src.history.notifications(rule)
    except (InfluxError, ValueError) as e:
        return c.warning_banner(str(e)[:300]), dash.no_update
    fmt = found.condition.format_value if found is not None else (lambda v: "—" if v is None else f"{v:g}")
    rows = [[_utc(e.at_ns), e.previous, html.Span(e.state, className=f"alert-state alert-{e.state.lower()}"),
             fmt(e.value), html.Code(e.condition)] for e in events]
    nrows = [[_utc(n.at_ns), n.state, str(n.attempt),
              html.Span("delivered" if n.ok else f"failed: {n.error}", className="notify-ok" if n.ok else "notify-failed"),
              n.url] for n in notes]
    return (c.table(HISTORY_HEADER, rows, ALERTS_HISTORY + "-table", empty="no state changes recorded yet"),
            c.table(NOTIFY_HEADER, nrows, ALERTS_NOTIFICATIONS + "-table", empty="no webhook attempts yet"))

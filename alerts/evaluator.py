"""The background evaluator: every few seconds, each rule's metric, state and notifications.

It runs with the job's metrics service (`marketspread.runner.run_job` starts it when metrics are
on) or alone (`marketspread alerts serve`), whether or not a browser is open; the UI never
evaluates. One evaluator per rules file: a second one (a second job on the same state
folder, or `serve` beside a job) finds the lock taken and stays idle, so no webhook is sent
twice. Each cycle re-reads the rules file (edits from the CLI or UI apply at the next
cycle; a damaged file keeps the previous rules), queries InfluxDB, advances the pure state
machine (`evaluate.advance`), writes every change to `alert_events` and hands FIRING and
RESOLVED to the webhook notifier. After a restart the states are restored from the last
events, so a rule still firing is not announced twice.

Every point it writes carries the rules folder's namespace (`alerts.namespace`), and it
restores only that namespace's states: evaluators of other state folders writing to the
same database never close, resolve or re-announce each other's rules.

A status file beside the rules (`evaluator.json`: pid, last cycle, per-rule query errors)
lets the CLI and UI tell whether an evaluator is alive.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

from collector.background import lower_thread_priority
from collector.influx import InfluxClient, InfluxConfig, InfluxError

from alerts.evaluate import NOTIFIED, OK, RESOLVED_HOLD_S, STATES, AlertState, Transition, advance
from alerts.history import AlertEvent, AlertHistory, event_point, notification_point
from alerts.namespace import AlertNamespace, load_namespace
from alerts.notify import Notification, WebhookNotifier, build_payload
from alerts.query import MetricReader
from alerts.rules import Rule
from alerts.settings import DEFAULT_INTERVAL_S, AlertSettings
from alerts.store import RuleStore
from alerts.webhook_target import WebhookPolicy

log = logging.getLogger(__name__)

STATUS_FILE = "evaluator.json"


class AlertEvaluator:
    """Evaluate the rules of a `RuleStore` against InfluxDB on a thread.

    `sink` is any writer with `add(points)` (the job's `InfluxWriter`); `evaluate_once`
    is the whole cycle, callable directly. `webhook_policy` says which internal webhook
    targets the default notifier may reach (none unless given). `namespace` defaults to
    the rules folder's own (`load_namespace`); a given `notifier` must record its attempts
    with it (`notification_point(record, evaluator.namespace)`).
    """

    def __init__(self, store: RuleStore, client: InfluxClient, sink, *, interval_s: float = DEFAULT_INTERVAL_S,
                 notifier: WebhookNotifier | None = None, resolved_hold_s: float = RESOLVED_HOLD_S,
                 status_path: Path | None = None, webhook_policy: WebhookPolicy = WebhookPolicy(),
                 namespace: AlertNamespace | None = None):
        self.store = store
        self.sink = sink
        self.interval_s = interval_s
        self.resolved_hold_s = resolved_hold_s
        self.namespace = namespace if namespace is not None else load_namespace(store.path)
        self.reader = MetricReader(client)
        self.history = AlertHistory(client, self.namespace)
        ns = self.namespace
        self.notifier = notifier or WebhookNotifier(on_attempt=lambda r: sink.add(notification_point(r, ns)),
                                                    policy=webhook_policy)
        self.status_path = status_path if status_path is not None else store.path.with_name(STATUS_FILE)
        self.states: dict[str, AlertState] = {}
        self.errors: dict[str, str] = {}
        #: rule name -> labels of the series its last evaluation judged (job, query, run_id), if known
        self.series: dict[str, dict[str, str]] = {}
        self.rules: list[Rule] = []
        self._restored = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alert-evaluator", daemon=True)
        self.on_release = lambda: None

    def start(self) -> "AlertEvaluator":
        self.notifier.start()
        self._thread.start()
        log.info("alerts: evaluating %s (namespace %s) every %.0f s", self.store.path, self.namespace.id,
                 self.interval_s)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop evaluating; queued notifications get a few seconds to go out."""
        self._stop.set()
        self._thread.join(timeout)
        self.notifier.stop(timeout=5.0)
        release, self.on_release = self.on_release, (lambda: None)
        release()

    def _run(self) -> None:
        lower_thread_priority()
        while True:
            try:
                self.evaluate_once()
            except Exception:
                log.exception("alerts: evaluation failed; will retry")
            if self._stop.wait(self.interval_s):
                return

    def _restore(self) -> None:
        for name, e in self.history.current().items():
            if e.state in STATES:
                self.states[name] = AlertState(e.state, e.at_ns, e.value)
        self._restored = True

    def _load_rules(self, now_ns: int) -> list[AlertEvent]:
        """Re-read the rules; return an OK event for each deleted rule that was not OK."""
        try:
            self.rules = self.store.rules()
        except ValueError as e:
            log.error("alerts: %s; keeping the %d rules read before", e, len(self.rules))
        names = {r.name for r in self.rules}
        closed = []
        for gone in [n for n in self.states if n not in names]:
            st = self.states.pop(gone)
            if st.state != OK:        # else its history would say FIRING forever (and a new rule of that name)
                closed.append(AlertEvent(gone, now_ns, OK, st.state, None, "(rule deleted)"))
        return closed

    def evaluate_once(self, now_ns: int | None = None) -> list[tuple[Rule, Transition]]:
        """Run one cycle at `now_ns` (default: now); return the transitions it made."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        changes: list[tuple[Rule, Transition]] = []
        try:
            if not self._restored:
                self._restore()
            closed = self._load_rules(now_ns)
        except InfluxError as e:
            self._load_rules(now_ns)
            self.errors = {r.name: f"InfluxDB: {e}" for r in self.rules}
            self._write_status(now_ns)
            return changes
        errors: dict[str, str] = {}
        for rule in self.rules:
            try:
                value = self.reader.value(rule, now_ns)
            except InfluxError as e:
                errors[rule.name] = f"InfluxDB: {e}"
                continue
            state, tr = advance(self.states.get(rule.name, AlertState()), rule.condition.breached(value), value,
                                now_ns, rule.for_s, self.resolved_hold_s)
            self.states[rule.name] = state
            if tr is not None:
                changes.append((rule, tr))
        points = [event_point(e, "", self.namespace) for e in closed]
        for rule, tr in changes:
            log.info("alert %s: %s -> %s (%s %s)", rule.name, tr.previous, tr.state, rule.condition.metric,
                     rule.condition.format_value(tr.value))
            points.append(event_point(AlertEvent(rule.name, tr.at_ns, tr.state, tr.previous, tr.value,
                                                 rule.condition.text), rule.scope_text(), self.namespace))
            if tr.state in NOTIFIED and rule.webhook and not rule.muted:
                self.notifier.submit(Notification(rule.name, tr.state, rule.webhook, build_payload(rule, tr)))
        if points:
            self.sink.add(points)
        self.errors = errors
        self._write_status(now_ns)
        return changes

    def _write_status(self, now_ns: int) -> None:
        doc = {"pid": os.getpid(), "host": socket.gethostname(), "interval_s": self.interval_s,
               "last_cycle_ns": now_ns, "namespace": self.namespace.id, "rules": len(self.rules),
               "errors": self.errors,
               "webhooks": {"sent": self.notifier.sent, "failed": self.notifier.failed,
                            "dropped": self.notifier.dropped, "pending": self.notifier.pending()}}
        try:
            tmp = self.status_path.with_name(self.status_path.name + ".tmp")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.status_path)
        except OSError as e:
            log.warning("alerts: cannot write %s: %s", self.status_path, e)


def read_status(rules_path: Path) -> dict | None:
    """Return the evaluator's last status beside a rules file, None if there is none."""
    try:
        return json.loads(Path(rules_path).with_name(STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None


def _take_lock(path: Path) -> int | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def start_evaluator(state_dir: Path | None, sink, *, client: InfluxClient | None = None,
                    interval_s: float | None = None, rules_path: Path | None = None,
                    webhook_policy: WebhookPolicy | None = None,
                    settings: AlertSettings | None = None) -> AlertEvaluator | None:
    """Start the evaluator of the state folder's rules, or return None if one runs already.

    Rules file, interval and webhook allow-list come from `settings` (the caller's entry
    point built it) unless given one by one; a library caller giving neither gets them
    from the environment (`AlertSettings.from_env`), as it gets InfluxDB without `client`.
    """
    if settings is None:
        settings = AlertSettings.from_env(state_dir=state_dir)
    path = Path(rules_path) if rules_path is not None else settings.rules_path
    fd = _take_lock(path.with_name("evaluator.lock"))
    if fd is None:
        log.warning("alerts: another evaluator holds %s; this process does not evaluate",
                    path.with_name("evaluator.lock"))
        return None
    if interval_s is None:
        interval_s = settings.interval_s
    if webhook_policy is None:
        webhook_policy = settings.lenient_webhook_policy()
    try:
        ev = AlertEvaluator(RuleStore(path), client or InfluxClient(InfluxConfig.from_env()), sink,
                            interval_s=interval_s, webhook_policy=webhook_policy)
    except ValueError as e:                   # e.g. a damaged namespace file: the job runs on, unevaluated
        log.error("alerts: not evaluating %s: %s", path, e)
        os.close(fd)
        return None
    ev.on_release = lambda: os.close(fd)
    return ev.start()

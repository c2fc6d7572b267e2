"""The background evaluator: every few seconds, each rule's metric, state and notifications.

It runs in every process of the product that may be up when a job goes wrong: the dashboard
(`marketspread ui`), a monitored job (`monitor()`, `marketspread watch`), Market Spread's job
(`marketspread job`), or alone (`marketspread alerts serve`), whether or not a browser is
open. Exactly one of a rules namespace's evaluators evaluates at a time, whatever host it is
on: they share a lease in the metrics backend (`alerts.lease`); the others stand by and the oldest takes
over within three cycles of the leader's death, so no notification is sent twice and none is
missed while any of them runs. Each cycle re-reads the rules file (edits from the CLI or UI apply at the next
cycle; a damaged file keeps the previous rules), reads the metrics, advances the pure state
machine (`evaluate.advance`), writes every change to `alert_events` and hands FIRING and
RESOLVED to the webhook notifier. After a restart the states are restored from the last
events, so a rule still firing is not announced twice.

Every point it writes carries the rules folder's namespace (`alerts.namespace`), and it
restores only that namespace's states: evaluators of other state folders writing to the
same database never close, resolve or re-announce each other's rules.

A status file beside the rules (`evaluator.json`: pid, last cycle, per-rule query errors and
no-data times), written by the leading evaluator, lets the CLI and UI tell whether an
evaluator is alive and which process it is.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

from collector.background import lower_thread_priority
from collector.metrics.backend import MetricsError

from alerts.alertmanager import AlertmanagerSender, sender_from_settings
from alerts.evaluate import NOTIFIED, OK, RESOLVED_HOLD_S, STATES, AlertState, Transition, advance, breach_of
from alerts.history import AlertEvent, AlertHistory, event_point, notification_point
from alerts.lease import Holder, Lease
from alerts.namespace import AlertNamespace, load_namespace
from alerts.notify import Notification, WebhookNotifier, build_payload
from alerts.query import MetricReader
from alerts.rules import Rule
from alerts.settings import DEFAULT_INTERVAL_S, AlertSettings
from alerts.store import RuleStore
from alerts.webhook_target import WebhookPolicy
from alerts.wiring import BackendConfig, reader_of

log = logging.getLogger(__name__)

STATUS_FILE = "evaluator.json"


class AlertEvaluator:
    """Evaluate the rules of a `RuleStore` against the metrics on a thread.

    `client` is the backend's `MetricsReader` (or an `InfluxClient`, read through the InfluxDB reader).
    `sink` is any writer with `add(points)` (the job's `InfluxWriter`); `evaluate_once`
    is the whole cycle, callable directly. `webhook_policy` says which internal webhook
    targets the default notifier may reach (none unless given). `namespace` defaults to
    the rules folder's own (`load_namespace`); a given `notifier` must record its attempts
    with it (`notification_point(record, evaluator.namespace)`).
    """

    def __init__(self, store: RuleStore, client, sink, *, interval_s: float = DEFAULT_INTERVAL_S,
                 notifier: WebhookNotifier | None = None, resolved_hold_s: float = RESOLVED_HOLD_S,
                 status_path: Path | None = None, webhook_policy: WebhookPolicy = WebhookPolicy(),
                 namespace: AlertNamespace | None = None, alertmanager: AlertmanagerSender | None = None,
                 lease: bool = False):
        self.store = store
        self.sink = sink
        self.interval_s = interval_s
        self.resolved_hold_s = resolved_hold_s
        self.namespace = namespace if namespace is not None else load_namespace(store.path)
        backend = reader_of(client)
        self.reader = MetricReader(backend)
        self.history = AlertHistory(backend, self.namespace)
        #: with a lease, only the namespace's leading evaluator evaluates (alerts.lease); None: always
        self.lease = Lease(backend, self.namespace.id, interval_s) if lease else None
        self.leader: Holder | None = None
        self._role: bool | None = None           # leads or stands by, once known (for its log line)
        ns = self.namespace
        self.notifier = notifier or WebhookNotifier(on_attempt=lambda r: sink.add(notification_point(r, ns)),
                                                    policy=webhook_policy)
        self.status_path = status_path if status_path is not None else store.path.with_name(STATUS_FILE)
        self.alertmanager = alertmanager
        self.states: dict[str, AlertState] = {}
        self.errors: dict[str, str] = {}
        #: rule name -> labels of the series its last evaluation judged (job, query, run_id), if known
        self.series: dict[str, dict[str, str]] = {}
        #: rule name -> since when (ns) its scope has reported nothing: a kept state says why
        self.no_data_since: dict[str, int] = {}
        self.rules: list[Rule] = []
        self._restored = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alert-evaluator", daemon=True)

    def start(self) -> "AlertEvaluator":
        self.notifier.start()
        if self.alertmanager is not None:
            self.alertmanager.start()
        self._thread.start()
        log.info("alerts: evaluating %s (namespace %s) every %.0f s", self.store.path, self.namespace.id,
                 self.interval_s)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop evaluating and give the lease up; queued notifications get a few seconds to go out."""
        self._stop.set()
        self._thread.join(timeout)
        if self.lease is not None:                  # a standby too: it is no candidate any more
            try:
                self.lease.release(time.time_ns())
            except MetricsError as e:
                log.warning("alerts: could not release the evaluator lease (%s); a standby takes over in %.0f s",
                            e, self.lease.ttl_ns / 1e9)
        self.notifier.stop(timeout=5.0)
        if self.alertmanager is not None:
            self.alertmanager.stop(timeout=5.0)

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
        if not self._take_turn(now_ns):
            return changes          # standing by: the leader writes the status file
        try:
            if not self._restored:
                self._restore()
            closed = self._load_rules(now_ns)
        except MetricsError as e:
            self._load_rules(now_ns)
            self.errors = {r.name: f"{e.backend}: {e}" for r in self.rules}
            self._write_status(now_ns)
            return changes
        errors: dict[str, str] = {}
        for rule in self.rules:
            try:
                reading = self.reader.read(rule, now_ns)
            except MetricsError as e:
                errors[rule.name] = f"{e.backend}: {e}"
                continue
            value = reading.value
            if value is None:
                self.no_data_since.setdefault(rule.name, now_ns)
            else:
                self.no_data_since.pop(rule.name, None)
                self.series[rule.name] = dict(reading.labels)
            breached = breach_of(rule.condition.breached(value), value is not None, rule.nodata)
            state, tr = advance(self.states.get(rule.name, AlertState()), breached, value,
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
        if self.alertmanager is not None:
            self.alertmanager.observe(self.rules, self.states, changes, self.series, self.namespace.id, now_ns)
        self.errors = errors
        self._write_status(now_ns)
        return changes

    @property
    def leads(self) -> bool:
        """Return whether this evaluator evaluates (it holds the lease, or runs without one)."""
        return self.lease is None or self.lease.leads(self.leader)

    def _take_turn(self, now_ns: int) -> bool:
        """Renew the lease; return whether this evaluator leads this cycle (always, without a lease)."""
        if self.lease is None:
            return True
        was = self.leads if self._role is not None else None
        try:
            self.leader = self.lease.renew(now_ns)
        except MetricsError as e:
            self.leader = None
            self._load_rules(now_ns)                 # the status names the rules left unevaluated
            self.errors = {r.name: f"{e.backend}: {e}" for r in self.rules}
            log.warning("alerts: cannot reach the metrics backend for the evaluator lease (%s); not evaluating", e)
            self._write_status(now_ns)
            return False
        if self.leads and not was:
            # another evaluator may have moved the states on while this one stood by
            self._restored = False
            log.info("alerts: this process evaluates namespace %s", self.namespace.id)
        elif not self.leads and was is not False and self.leader is not None:
            log.info("alerts: %s evaluates namespace %s; this process stands by", self.leader.process,
                     self.namespace.id)
        if self.leader is not None or self._role is not None:
            self._role = self.leads
        return self.leads

    def _write_status(self, now_ns: int) -> None:
        doc = {"pid": os.getpid(), "host": socket.gethostname(), "interval_s": self.interval_s,
               "holder": self.lease.holder if self.lease is not None else None,
               "last_cycle_ns": now_ns, "namespace": self.namespace.id, "rules": len(self.rules),
               "errors": self.errors,
               "no_data_since": {r.name: self.no_data_since[r.name] for r in self.rules if r.name in self.no_data_since},
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


def start_evaluator(state_dir: Path | None, sink, *, client=None,
                    interval_s: float | None = None, rules_path: Path | None = None,
                    webhook_policy: WebhookPolicy | None = None,
                    settings: AlertSettings | None = None) -> AlertEvaluator | None:
    """Start an evaluator of the state folder's rules under the namespace's lease; None if it cannot.

    Every process that calls this runs one; the lease (alerts.lease) has exactly one of a
    namespace's evaluators evaluate at a time, and a standby take over when it stops or dies.

    Rules file, interval and webhook allow-list come from `settings` (the caller's entry
    point built it) unless given one by one; a library caller giving neither gets them
    from the environment (`AlertSettings.from_env`), as it gets the backend without `client`.
    """
    if settings is None:
        settings = AlertSettings.from_env(state_dir=state_dir)
    path = Path(rules_path) if rules_path is not None else settings.rules_path
    if interval_s is None:
        interval_s = settings.interval_s
    if webhook_policy is None:
        webhook_policy = settings.lenient_webhook_policy()
    try:
        ev = AlertEvaluator(RuleStore(path), client or reader_of(BackendConfig.from_env()), sink,
                            interval_s=interval_s, webhook_policy=webhook_policy,
                            alertmanager=sender_from_settings(settings, interval_s), lease=True)
    except ValueError as e:                   # e.g. a damaged namespace file: the job runs on, unevaluated
        log.error("alerts: not evaluating %s: %s", path, e)
        return None
    return ev.start()

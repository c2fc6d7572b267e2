"""Prometheus Alertmanager as a notification target: alerts posted as Prometheus posts them.

Alertmanager groups, silences, inhibits and routes; this module only tells it which
rules fire. `AlertmanagerSender.observe` is called at the end of every evaluation cycle
with the rules, their states and the cycle's transitions; it never blocks:

- a FIRING rule is posted when it fires and again at least every `resend_s` (60 s), with
  `endsAt` = now + 4 × max(evaluation interval, `resend_s`) (Prometheus' `ValidUntil`),
  so an Alertmanager whose evaluator died resolves the alert by itself;
- a rule that goes RESOLVED is posted once more with `endsAt` = the resolve time; one
  that stops firing without a transition (muted, deleted, its labels changed) is closed
  at the cycle's time.

One alert per rule: labels `alertname` and `rule` (the rule's name), `job` (the rule's
scope, else the judged series' run), `query`, `run_id` (the series'), `severity` and
`namespace` (the rules folder's, `alerts.namespace`); empty labels are left out, and a
series label not known in a cycle keeps its last value. Annotations: `summary` (the
webhook payload's), `description` (scope, condition, window), `value`; `generatorURL`
links to the run's page on the dashboard (`MS_UI_URL`).

A thread posts `POST <url>/api/v2/alerts`. What waits to be sent is the newest body per
alert (by labels), at most `max_pending` of them: a failed post is not retried as it
was but with whatever is newest then, after 1, 2, 4 ... 60 s (`alerts.notify.backoff_s`),
so a late retry never re-opens an alert resolved since. A dead Alertmanager is one log
line (and one when it is back); a 4xx answer drops the batch with one line.
"""
from __future__ import annotations

import http.client
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import quote, urlsplit

from collector.query.ranges import format_time
from collector.units import NS

from alerts.evaluate import FIRING, RESOLVED, AlertState, Transition
from alerts.notify import TIMEOUT_S, backoff_s, build_payload, describe_failure, post_json
from alerts.rules import Rule, check_webhook
from alerts.settings import DEFAULT_UI_URL, AlertSettings
from alerts.webhook_target import Resolver, WebhookPolicy, system_resolve

log = logging.getLogger(__name__)

API_PATH = "/api/v2/alerts"
DEFAULT_RESEND_S = 60.0
VALID_CYCLES = 4
MAX_PENDING = 1000
SERIES_LABELS = ("job", "query", "run_id")

Body = Mapping[str, Any]


def where(url: str) -> str:
    """Return a URL for logs: scheme, host and port only (no credentials, no path: it may hold a token)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}" + (f":{parts.port}" if parts.port else "")


def check_base_url(url: str, what: str) -> str:
    """Return an http(s) base URL without query or fragment, trailing `/` removed; raise ValueError."""
    url = check_webhook(url, what).strip()
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"{what} must not have a query or a fragment")
    return url.rstrip("/")


@dataclass(frozen=True)
class RuleAlert:
    """One rule's alert as a cycle left it: FIRING since `at_ns`, or RESOLVED at `at_ns`."""
    rule: Rule
    state: str
    at_ns: int
    value: float | None
    series: Mapping[str, str]


@dataclass(frozen=True)
class SentAlert:
    """The last body posted (queued) for a rule's alert, when, and when the alert started."""
    body: Body
    sent_ns: int
    starts_ns: int


def rule_alerts(rules: Iterable[Rule], states: Mapping[str, AlertState], changes: Iterable[tuple[Rule, Transition]],
                series: Mapping[str, Mapping[str, str]]) -> list[RuleAlert]:
    """Return the unmuted rules FIRING now and those this cycle RESOLVED."""
    out = [RuleAlert(r, FIRING, st.since_ns, st.value, series.get(r.name, {}))
           for r in rules if not r.muted and (st := states.get(r.name)) is not None and st.state == FIRING]
    out += [RuleAlert(r, RESOLVED, tr.at_ns, tr.value, series.get(r.name, {}))
            for r, tr in changes if tr.state == RESOLVED and not r.muted]
    return out


def alert_labels(rule: Rule, series: Mapping[str, str], namespace: str,
                 previous: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return an alert's labels; a series label unknown now keeps its `previous` value."""
    known = {k: str(v) for k, v in series.items() if k in SERIES_LABELS and v}
    for k in SERIES_LABELS:
        if k not in known and previous and previous.get(k):
            known[k] = previous[k]
    labels = {"alertname": rule.name, "rule": rule.name, "job": rule.job or known.get("job"),
              "query": rule.query or known.get("query"), "run_id": known.get("run_id"),
              "severity": rule.severity, "namespace": namespace}
    return {k: v for k, v in labels.items() if v}


def run_page(ui_url: str, labels: Mapping[str, str]) -> str:
    """Return the dashboard page of the alert's run (the Alerts page when no run is known)."""
    job = labels.get("job")
    return f"{ui_url}/run/{quote(job, safe='')}" if job else f"{ui_url}/alerts"


def alert_body(rule: Rule, state: str, value: float | None, labels: Mapping[str, str], starts_ns: int,
               ends_ns: int, ui_url: str) -> dict[str, Any]:
    """Return one alert of Alertmanager's API v2 (`POST /api/v2/alerts` takes a list of them)."""
    cond = rule.condition
    summary = build_payload(rule, Transition("", state, ends_ns, value))["summary"]
    return {"labels": dict(labels),
            "annotations": {"summary": summary, "description": rule.summary(), "value": cond.format_value(value)},
            "startsAt": format_time(min(starts_ns, ends_ns)), "endsAt": format_time(ends_ns),
            "generatorURL": run_page(ui_url, labels)}


def _closed(body: Body, at_ns: int) -> dict[str, Any]:
    return {**body, "endsAt": format_time(at_ns)}


def plan(sent: Mapping[str, SentAlert], alerts: Sequence[RuleAlert], now_ns: int, *, namespace: str,
         ui_url: str = DEFAULT_UI_URL, resend_s: float = DEFAULT_RESEND_S, valid_s: float = VALID_CYCLES * 60.0
         ) -> tuple[list[dict[str, Any]], dict[str, SentAlert]]:
    """Return the bodies to post this cycle and what Alertmanager then holds, per rule (pure).

    `sent` is the previous cycle's result. A FIRING rule is posted when new, when its
    labels changed (the old alert is closed) or `resend_s` after its last post; a
    RESOLVED one, or one posted before and not FIRING now, is closed.
    """
    out: list[dict[str, Any]] = []
    held: dict[str, SentAlert] = {}
    resolved = {a.rule.name: a for a in alerts if a.state == RESOLVED}
    for a in (a for a in alerts if a.state == FIRING and a.rule.name not in resolved):
        prev = sent.get(a.rule.name)
        labels = alert_labels(a.rule, a.series, namespace, prev.body["labels"] if prev else None)
        if prev is not None and prev.body["labels"] != labels:
            out.append(_closed(prev.body, now_ns))
            prev = None
        if prev is not None and now_ns - prev.sent_ns < resend_s * NS:
            held[a.rule.name] = prev
            continue
        starts = a.at_ns if prev is None else prev.starts_ns
        body = alert_body(a.rule, FIRING, a.value, labels, starts, now_ns + int(valid_s * NS), ui_url)
        out.append(body)
        held[a.rule.name] = SentAlert(body, now_ns, starts)
    for name, a in resolved.items():
        prev = sent.get(name)
        labels = prev.body["labels"] if prev else alert_labels(a.rule, a.series, namespace)
        starts = prev.starts_ns if prev else a.at_ns
        out.append(alert_body(a.rule, RESOLVED, a.value, labels, starts, a.at_ns, ui_url))
    out += [_closed(prev.body, now_ns) for name, prev in sent.items() if name not in held and name not in resolved]
    return out, held


def fingerprint(body: Body) -> tuple[tuple[str, str], ...]:
    """Return what tells Alertmanager's alerts apart: the sorted labels."""
    return tuple(sorted(body["labels"].items()))


class AlertmanagerSender:
    """Post the evaluator's alerts to one Alertmanager on a thread; `observe` never blocks.

    >>> am = AlertmanagerSender("http://127.0.0.1:19093", interval_s=5).start()
    >>> am.observe(evaluator.rules, evaluator.states, changes, evaluator.series, "ns1")
    >>> am.stop()
    """

    def __init__(self, url: str, *, interval_s: float, resend_s: float = DEFAULT_RESEND_S,
                 ui_url: str = DEFAULT_UI_URL, timeout_s: float = TIMEOUT_S, first_backoff_s: float = 1.0,
                 max_pending: int = MAX_PENDING, resolve: Resolver = system_resolve,
                 send: Callable[[str, Sequence[Body], float], int] | None = None):
        self.url = check_base_url(url, "MS_ALERTMANAGER_URL")
        self.ui_url = check_base_url(ui_url, "MS_UI_URL")
        self.resend_s = resend_s
        self.valid_s = VALID_CYCLES * max(interval_s, resend_s)
        self.timeout_s = timeout_s
        self.first_backoff_s = first_backoff_s
        self.max_pending = max_pending
        # the operator chose this address (loopback is the usual one): allow exactly its host
        allowed = WebhookPolicy(hosts=frozenset({(urlsplit(self.url).hostname or "").lower().rstrip(".")}))
        self._send = send or (lambda u, body, t: post_json(u, body, t, policy=allowed, resolve=resolve))
        self._sent: dict[str, SentAlert] = {}
        self._pending: dict[tuple[tuple[str, str], ...], Body] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alertmanager", daemon=True)
        self._failures = 0
        self._next_try = 0.0
        self.delivered = self.dropped = 0

    def __repr__(self) -> str:
        return f"AlertmanagerSender({where(self.url)!r})"

    def start(self) -> "AlertmanagerSender":
        self._thread.start()
        log.info("alerts: posting to Alertmanager at %s (re-sent every %.0f s while firing)",
                 where(self.url), self.resend_s)
        return self

    def observe(self, rules: Iterable[Rule], states: Mapping[str, AlertState],
                changes: Iterable[tuple[Rule, Transition]], series: Mapping[str, Mapping[str, str]],
                namespace: str, now_ns: int | None = None) -> int:
        """Queue what this cycle changes in Alertmanager; return how many alerts were queued."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        bodies, self._sent = plan(self._sent, rule_alerts(rules, states, changes, series), now_ns,
                                  namespace=namespace, ui_url=self.ui_url, resend_s=self.resend_s,
                                  valid_s=self.valid_s)
        return self.submit(bodies)

    def submit(self, bodies: Iterable[Body]) -> int:
        """Queue alerts (the newest body per alert wins); return how many were queued."""
        queued = dropped = 0
        with self._lock:
            for body in bodies:
                key = fingerprint(body)
                if key not in self._pending and len(self._pending) >= self.max_pending:
                    dropped += 1
                    continue
                self._pending[key] = body
                queued += 1
        if dropped:
            self.dropped += dropped
            log.error("alerts: %d alerts for Alertmanager dropped: %d already wait to be sent",
                      dropped, self.max_pending)
        if queued:
            self._wake.set()
        return queued

    def pending(self) -> int:
        """Return how many alerts wait to be posted."""
        with self._lock:
            return len(self._pending)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after one last post of what waits (Alertmanager keeps firing alerts until their endsAt)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            with self._lock:
                batch = dict(self._pending)
            if batch and (stopping or time.monotonic() >= self._next_try):
                if self._post(list(batch.values())):
                    with self._lock:
                        for key, body in batch.items():
                            if self._pending.get(key) is body:     # not replaced by a newer one meanwhile
                                del self._pending[key]
            if stopping:
                return
            wait = max(0.05, self._next_try - time.monotonic()) if self._failures and batch else 1.0
            self._wake.wait(wait)
            self._wake.clear()

    def _post(self, bodies: list[Body]) -> bool:
        """Post one batch; return whether it is done with (delivered, or refused for good)."""
        at = where(self.url)
        try:
            status = self._send(self.url + API_PATH, bodies, self.timeout_s)
        except (OSError, ValueError, http.client.HTTPException) as e:
            self._failed(f"{describe_failure(e)} ({type(e).__name__}: {e})", len(bodies))
            return False
        if 200 <= status < 300:
            if self._failures:
                log.info("alerts: Alertmanager at %s reachable again", at)
            self._failures, self._next_try = 0, 0.0
            self.delivered += len(bodies)
            firing = sum(1 for b in bodies if b["endsAt"] > format_time(time.time_ns()))
            log.info("alerts: Alertmanager at %s took %d alerts (%d firing, %d resolved)", at, len(bodies),
                     firing, len(bodies) - firing)
            return True
        if 400 <= status < 500 and status not in (408, 429):
            self.dropped += len(bodies)
            log.error("alerts: Alertmanager at %s refused %d alerts (HTTP %d); dropped", at, len(bodies), status)
            return True
        self._failed(f"HTTP {status}", len(bodies))
        return False

    def _failed(self, why: str, count: int) -> None:
        self._failures += 1
        delay = backoff_s(self._failures, self.first_backoff_s)
        self._next_try = time.monotonic() + delay
        # one line when it goes down; the retries are quiet until it answers again
        (log.warning if self._failures == 1 else log.debug)(
            "alerts: Alertmanager at %s not reached: %s; %d alerts kept, retried with backoff (up to 60 s)",
            where(self.url), why, count)


def sender_from_settings(settings: AlertSettings, interval_s: float) -> AlertmanagerSender | None:
    """Return a sender to `MS_ALERTMANAGER_URL`, None if unset or, said in one line, bad."""
    if not settings.alertmanager_url:
        return None
    try:
        return AlertmanagerSender(settings.alertmanager_url, interval_s=interval_s, ui_url=settings.ui_url)
    except ValueError as e:
        # the job must not die for this: evaluate and notify webhooks without Alertmanager
        log.error("alerts: %s; alerts are not posted to Alertmanager", e)
        return None

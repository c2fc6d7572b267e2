"""Alert history in the metrics backend: every state change and every webhook attempt, as typed records.

- `alert_events` (tags `rule`, `namespace`): one point per state change, at its time. Fields `state`,
  `previous`, `condition` (the rule's text then), `scope`, `value` (float, the metric in
  base units: ns, events/s, events, share) when there was data.
- `alert_notifications` (tags `rule`, `namespace`): one point per webhook attempt. Fields `state`
  (FIRING / RESOLVED), `attempt`, `ok`, `status` (HTTP status, when one came back),
  `error`, `url` (without credentials or query).

`namespace` is the rules folder's id (`alerts.namespace`): an `AlertHistory` reads only
its own namespace (and the untagged points from before namespaces, if they are its own),
so folders sharing a database never see each other's rules. The last event of each rule
is its current state: the UI's banner and the evaluator's restart both read it, through
the backend's reader (`MetricsReader.history_*`).
"""
from __future__ import annotations

from typing import NamedTuple

from collector.metrics.backend import MetricsError, MetricsReader
from collector.metrics.point import Point
from collector.metrics.views import HistoryRow
from collector.vocabulary import ALERT_EVENTS, ALERT_NOTIFICATIONS, TAG_NAMESPACE, TAG_RULE

from alerts.namespace import AlertNamespace
from alerts.wiring import reader_of


class AlertEvent(NamedTuple):
    """One state change of a rule."""
    rule: str
    at_ns: int
    state: str
    previous: str
    value: float | None
    condition: str


class NotificationRecord(NamedTuple):
    """One webhook attempt for a rule's FIRING or RESOLVED."""
    rule: str
    at_ns: int
    state: str
    attempt: int
    ok: bool
    status: int | None
    error: str
    url: str


def event_point(e: AlertEvent, scope: str, namespace: AlertNamespace) -> Point:
    """Return the `alert_events` point of a state change in a namespace."""
    fields: dict = {"state": e.state, "previous": e.previous, "condition": e.condition, "scope": scope}
    if e.value is not None:
        fields["value"] = float(e.value)
    return Point(ALERT_EVENTS, {TAG_RULE: e.rule, TAG_NAMESPACE: namespace.id}, fields, e.at_ns)


def notification_point(n: NotificationRecord, namespace: AlertNamespace) -> Point:
    """Return the `alert_notifications` point of a webhook attempt in a namespace."""
    fields: dict = {"state": n.state, "attempt": int(n.attempt), "ok": bool(n.ok), "error": n.error, "url": n.url}
    if n.status is not None:
        fields["status"] = int(n.status)
    return Point(ALERT_NOTIFICATIONS, {TAG_RULE: n.rule, TAG_NAMESPACE: namespace.id}, fields, n.at_ns)


def _event(row: HistoryRow) -> AlertEvent:
    f = row.fields
    return AlertEvent(row.rule, row.at_ns, f.get("state") or "", f.get("previous") or "", f.get("value"),
                      f.get("condition") or "")


def _notification(row: HistoryRow) -> NotificationRecord:
    f = row.fields
    status = f.get("status")
    return NotificationRecord(row.rule, row.at_ns, f.get("state") or "", int(f.get("attempt") or 0),
                              bool(f.get("ok")), None if status is None else int(status),
                              f.get("error") or "", f.get("url") or "")


def _read(view, *args) -> list[HistoryRow]:
    try:
        return view(*args)
    except MetricsError as e:
        if e.unreachable:                    # the caller says so
            raise
        return []                            # e.g. the database does not exist yet: no history


class AlertHistory:
    """Read one namespace's alert measurements in one database.

    Built without a namespace (as the dashboard's app factory does, before any rules
    folder is read) its queries raise ValueError (`unbound`, the reason) until it is
    bound with `within`.
    """

    def __init__(self, client, namespace: AlertNamespace | None = None,
                 unbound: str = "the alert history has no namespace"):
        self.client = client                 # what it was built on (a reader, or an InfluxClient)
        self.reader: MetricsReader = reader_of(client)
        self.namespace = namespace
        self.unbound = unbound

    def within(self, namespace: AlertNamespace) -> "AlertHistory":
        """Return this database's history of `namespace`."""
        return AlertHistory(self.client, namespace)

    def _mine(self) -> tuple[str, bool]:
        """Return this namespace's id and whether its untagged points (from before namespaces) are its own."""
        if self.namespace is None:
            raise ValueError(self.unbound)
        return self.namespace.id, self.namespace.legacy

    def current(self) -> dict[str, AlertEvent]:
        """Return each rule's last state change."""
        return {row.rule: _event(row) for row in _read(self.reader.history_latest, *self._mine())}

    def events(self, rule: str, limit: int = 100) -> list[AlertEvent]:
        """Return a rule's state changes, newest first."""
        return [_event(row) for row in _read(self.reader.history_events, *self._mine(), rule, limit)]

    def notifications(self, rule: str | None = None, limit: int = 100, failed_only: bool = False
                      ) -> list[NotificationRecord]:
        """Return webhook attempts (of one rule, or all; optionally failures only), newest first."""
        rows = _read(self.reader.history_notifications, *self._mine(), rule, limit, failed_only)
        return [_notification(row) for row in rows]

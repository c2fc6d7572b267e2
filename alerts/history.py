"""Alert history in InfluxDB: every state change and every webhook attempt, as typed records.

- `alert_events` (tags `rule`, `namespace`): one point per state change, at its time. Fields `state`,
  `previous`, `condition` (the rule's text then), `scope`, `value` (float, the metric in
  base units: ns, events/s, events, share) when there was data.
- `alert_notifications` (tags `rule`, `namespace`): one point per webhook attempt. Fields `state`
  (FIRING / RESOLVED), `attempt`, `ok`, `status` (HTTP status, when one came back),
  `error`, `url` (without credentials or query).

`namespace` is the rules folder's id (`alerts.namespace`): an `AlertHistory` reads only
its own namespace (and the untagged points from before namespaces, if they are its own),
so folders sharing a database never see each other's rules. The last event of each rule
is its current state: the UI's banner and the evaluator's restart both read it. Rule
names and the namespace are bound parameters in every query.
"""
from __future__ import annotations

from typing import NamedTuple

from collector.influx import InfluxClient, InfluxError, Point
from collector.vocabulary import ALERT_EVENTS, ALERT_NOTIFICATIONS, TAG_NAMESPACE, TAG_RULE

from alerts.namespace import AlertNamespace


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


def _event(rule: str, row: dict) -> AlertEvent:
    return AlertEvent(rule, int(row["time"]), row.get("state") or "", row.get("previous") or "",
                      row.get("value"), row.get("condition") or "")


def _notification(rule: str, row: dict) -> NotificationRecord:
    status = row.get("status")
    return NotificationRecord(rule, int(row["time"]), row.get("state") or "", int(row.get("attempt") or 0),
                              bool(row.get("ok")), None if status is None else int(status),
                              row.get("error") or "", row.get("url") or "")


def _query(client: InfluxClient, q: str, params: dict | None = None):
    try:
        return client.query(q, params)
    except InfluxError as e:
        if e.status is None:                 # unreachable: the caller says so
            raise
        return []                            # e.g. the database does not exist yet: no history


class AlertHistory:
    """Read one namespace's alert measurements in one database.

    Built without a namespace (as the dashboard's app factory does, before any rules
    folder is read) its queries raise ValueError (`unbound`, the reason) until it is
    bound with `within`.
    """

    def __init__(self, client: InfluxClient, namespace: AlertNamespace | None = None,
                 unbound: str = "the alert history has no namespace"):
        self.client = client
        self.namespace = namespace
        self.unbound = unbound

    def within(self, namespace: AlertNamespace) -> "AlertHistory":
        """Return this database's history of `namespace`."""
        return AlertHistory(self.client, namespace)

    def _mine(self) -> tuple[str, dict]:
        """Return the WHERE clause (and its parameters) selecting this namespace's points."""
        if self.namespace is None:
            raise ValueError(self.unbound)
        if self.namespace.legacy:                  # an absent tag compares equal to ''
            return '("namespace" = $namespace OR "namespace" = \'\')', {"namespace": self.namespace.id}
        return '"namespace" = $namespace', {"namespace": self.namespace.id}

    def current(self) -> dict[str, AlertEvent]:
        """Return each rule's last state change."""
        where, params = self._mine()
        series = _query(self.client, f'SELECT * FROM "{ALERT_EVENTS}" WHERE {where} GROUP BY "rule" '
                                     'ORDER BY time DESC LIMIT 1', params)
        out = {}
        for s in series:
            rule = s.tags.get(TAG_RULE, "")
            rows = s.rows()
            if rows:
                out[rule] = _event(rule, rows[0])
        return out

    def events(self, rule: str, limit: int = 100) -> list[AlertEvent]:
        """Return a rule's state changes, newest first."""
        where, params = self._mine()
        q = (f'SELECT * FROM "{ALERT_EVENTS}" WHERE "rule" = $rule AND {where} '
             f'ORDER BY time DESC LIMIT {int(limit)}')
        return [_event(rule, row) for s in _query(self.client, q, {**params, "rule": rule}) for row in s.rows()]

    def notifications(self, rule: str | None = None, limit: int = 100, failed_only: bool = False
                      ) -> list[NotificationRecord]:
        """Return webhook attempts (of one rule, or all; optionally failures only), newest first."""
        where, params = self._mine()
        clauses = [where]
        if rule is not None:
            clauses.append('"rule" = $rule')
            params["rule"] = rule
        if failed_only:
            clauses.append('"ok" = false')
        where = " AND ".join(clauses)
        q = (f'SELECT * FROM "{ALERT_NOTIFICATIONS}" WHERE {where} GROUP BY "rule" '
             f'ORDER BY time DESC LIMIT {int(limit)}')
        out = [_notification(s.tags.get(TAG_RULE, ""), row) for s in _query(self.client, q, params)
               for row in s.rows()]
        return sorted(out, key=lambda n: n.at_ns, reverse=True)[:limit]

"""The alert state machine of Prometheus and Grafana (pure, no I/O).

    OK ──breach──▶ PENDING ──breach held `for`──▶ FIRING ──no breach──▶ RESOLVED ──hold──▶ OK
     ▲               │ no breach                    (for = 0: OK ──breach──▶ FIRING)      │ breach
     └───────────────┘                                                                    ▼ PENDING

A pending alert that stops breaching goes back to OK without a notification (it never
fired); a firing one goes to RESOLVED, which is notified, and stays RESOLVED for
`resolved_hold_s` before it is OK again. `advance` returns the new state and the
transition, if any.

No data (the scope wrote nothing in the window: the query died, stalled or was stopped) is
decided per rule, as Grafana's "no data" setting does (`NODATA_*`):

- `keep` (the default): the state stays as it is, so a firing alert whose query stops
  reporting stays firing (the evaluator says since when it has had no data); an OK rule
  stays OK and a pending one pending;
- `ok`: no data is no breach (Prometheus' empty result): a firing alert resolves;
- `alerting`: no data is a breach, held for the rule's `for` like any other.
"""
from __future__ import annotations
from collector.units import NS

from dataclasses import dataclass, replace
from typing import Iterable, NamedTuple

OK, PENDING, FIRING, RESOLVED = "OK", "PENDING", "FIRING", "RESOLVED"
STATES = (OK, PENDING, FIRING, RESOLVED)
NOTIFIED = (FIRING, RESOLVED)                 # the transitions sent to a webhook
RESOLVED_HOLD_S = 60.0
NODATA_KEEP, NODATA_OK, NODATA_ALERTING = "keep", "ok", "alerting"
NODATA_POLICIES = (NODATA_KEEP, NODATA_OK, NODATA_ALERTING)


@dataclass(frozen=True)
class AlertState:
    """Where one rule stands: its state, since when (ns), and the last value seen."""
    state: str = OK
    since_ns: int = 0
    value: float | None = None


class Transition(NamedTuple):
    """A change of state at `at_ns`, with the value that caused it."""
    previous: str
    state: str
    at_ns: int
    value: float | None


def breach_of(breached: bool, has_data: bool, nodata: str = NODATA_KEEP) -> bool | None:
    """Return the breach an evaluation counts: the condition's, or for no data the rule's policy (None: keep)."""
    if has_data:
        return breached
    return None if nodata == NODATA_KEEP else nodata == NODATA_ALERTING


def advance(current: AlertState, breached: bool | None, value: float | None, now_ns: int, for_s: float,
            resolved_hold_s: float = RESOLVED_HOLD_S) -> tuple[AlertState, Transition | None]:
    """Return the state after one evaluation at `now_ns`, and the transition if the state changed.

    `breached` None (no data, kept): nothing changes but the last value, which becomes None.
    """
    s = current.state
    if breached is None:
        if s == RESOLVED and now_ns - current.since_ns >= resolved_hold_s * NS:
            return AlertState(OK, now_ns, None), Transition(s, OK, now_ns, None)
        return replace(current, value=None), None
    if breached:
        if s in (OK, RESOLVED):
            nxt = FIRING if for_s <= 0 else PENDING
        elif s == PENDING and now_ns - current.since_ns >= for_s * NS:
            nxt = FIRING
        else:
            nxt = s
    else:
        if s == PENDING:
            nxt = OK
        elif s == FIRING:
            nxt = RESOLVED
        elif s == RESOLVED and now_ns - current.since_ns >= resolved_hold_s * NS:
            nxt = OK
        else:
            nxt = s
    if nxt == s:
        return replace(current, value=value), None
    return AlertState(nxt, now_ns, value), Transition(s, nxt, now_ns, value)


def run_series(samples: Iterable[tuple[int, float | None, bool]], for_s: float,
               start: AlertState = AlertState(), resolved_hold_s: float = RESOLVED_HOLD_S
               ) -> tuple[AlertState, list[Transition]]:
    """Advance over (time ns, value, breached) samples in order; return the end state and transitions."""
    state, out = start, []
    for t, value, breached in samples:
        state, tr = advance(state, breached, value, t, for_s, resolved_hold_s)
        if tr is not None:
            out.append(tr)
    return state, out

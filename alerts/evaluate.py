"""The alert state machine of Prometheus and Grafana (pure, no I/O).

    OK ──breach──▶ PENDING ──breach held `for`──▶ FIRING ──no breach──▶ RESOLVED ──hold──▶ OK
     ▲               │ no breach                    (for = 0: OK ──breach──▶ FIRING)      │ breach
     └───────────────┘                                                                    ▼ PENDING

A pending alert that stops breaching goes back to OK without a notification (it never
fired); a firing one goes to RESOLVED, which is notified, and stays RESOLVED for
`resolved_hold_s` before it is OK again. No data never breaches (as in Prometheus, an
empty result fires nothing). `advance` returns the new state and the transition, if any.
"""
from __future__ import annotations
from collector.units import NS

from dataclasses import dataclass, replace
from typing import Iterable, NamedTuple

OK, PENDING, FIRING, RESOLVED = "OK", "PENDING", "FIRING", "RESOLVED"
STATES = (OK, PENDING, FIRING, RESOLVED)
NOTIFIED = (FIRING, RESOLVED)                 # the transitions sent to a webhook
RESOLVED_HOLD_S = 60.0


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


def advance(current: AlertState, breached: bool, value: float | None, now_ns: int, for_s: float,
            resolved_hold_s: float = RESOLVED_HOLD_S) -> tuple[AlertState, Transition | None]:
    """Return the state after one evaluation at `now_ns`, and the transition if the state changed."""
    s = current.state
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

"""The alerts' settings: one record, built once by an entry point and carried down.

`marketspread alerts`, the job and the dashboard build an `AlertSettings` from the
environment (`collector.settings`) and hand it to the evaluator and the rules store;
nothing below them reads a variable.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from collector.settings import default_state_dir, prefixed_env

from alerts.webhook_target import ENV_ALLOW, WebhookPolicy

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
DEFAULT_UI_URL = "http://127.0.0.1:8050"
MAX_INTERVAL_S = 86400.0


@dataclass(frozen=True)
class AlertSettings:
    """Where the rules are, how often they are evaluated, where notifications may go.

    From `MS_ALERTS_FILE` (else `<state>/alerts/rules.json`), `MS_ALERTS_INTERVAL_S` (5 s)
    and `MS_WEBHOOK_ALLOW`, kept as given: `webhook_policy()` parses it, so a bad list
    fails the command that needs it (one line, exit 2), and `lenient_webhook_policy()`
    lets a running job go on allowing no internal target. `MS_ALERTMANAGER_URL` (none)
    is the Alertmanager alerts are also posted to, `MS_UI_URL` the dashboard its alerts
    link to; both are checked where the sender is built (`alerts.alertmanager`).
    """
    rules_path: Path
    interval_s: float = DEFAULT_INTERVAL_S
    webhook_allow: str | None = None
    alertmanager_url: str | None = None
    ui_url: str = DEFAULT_UI_URL

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, state_dir: Path | None = None) -> "AlertSettings":
        """Build from `MS_ALERTS_*`, `MS_WEBHOOK_ALLOW`, `MS_ALERTMANAGER_URL` and `MS_UI_URL` (None: this process's)."""
        env = prefixed_env("MS_", environ)
        if env.get("MS_ALERTS_FILE"):
            rules = Path(env["MS_ALERTS_FILE"])
        else:
            rules = Path(state_dir if state_dir is not None else default_state_dir(environ)) / "alerts" / "rules.json"
        return cls(rules, _interval(env.get("MS_ALERTS_INTERVAL_S")), env.get(ENV_ALLOW),
                   env.get("MS_ALERTMANAGER_URL") or None, env.get("MS_UI_URL") or DEFAULT_UI_URL)

    def webhook_policy(self) -> WebhookPolicy:
        """Return the webhook allow-list; ValueError names a bad entry of `MS_WEBHOOK_ALLOW`."""
        return WebhookPolicy.parse(self.webhook_allow)

    def lenient_webhook_policy(self) -> WebhookPolicy:
        """Return the webhook allow-list, or, for a bad one, say so and allow no internal target."""
        try:
            return self.webhook_policy()
        except ValueError as e:
            # the job must not die for this; allowing nothing is the safe reading of a bad list
            log.error("alerts: %s; no internal webhook target is allowed", e)
            return WebhookPolicy()


def _interval(raw: str | None) -> float:
    """Return `MS_ALERTS_INTERVAL_S` as seconds, or, unset or bad (said once), the default."""
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
        if 0 < value < MAX_INTERVAL_S:
            return value
    except ValueError:
        pass
    # the job must not die for this: say so and use the default
    log.error("alerts: MS_ALERTS_INTERVAL_S=%r is not a number of seconds in (0, 86400); using %.0f s",
              raw, DEFAULT_INTERVAL_S)
    return DEFAULT_INTERVAL_S

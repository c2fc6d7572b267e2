"""Alert evaluation inside any process of the product: the dashboard, a monitored job, `alerts serve`.

`start_alerts` starts the state folder's evaluator under its namespace's lease
(alerts.lease), with a writer of its own for the alert history unless the caller lends
one (a monitored job's). Every such process runs one, so rules are evaluated while any of
them is up, and exactly one evaluates at a time. Nothing here may fail the host process:
an evaluator that cannot start is one log line and None.

>>> service = start_alerts(InfluxConfig.from_env(), AlertSettings.from_env(), spool_dir)
>>> ...
>>> service.stop()
"""
from __future__ import annotations

import logging
from pathlib import Path


from alerts.evaluator import AlertEvaluator, start_evaluator
from alerts.settings import AlertSettings
from alerts.wiring import open_writer, reader_of

log = logging.getLogger(__name__)


class AlertService:
    """A started evaluator and, when it was given none, the writer of its history."""

    def __init__(self, evaluator: AlertEvaluator, writer=None):
        self.evaluator = evaluator
        self._writer = writer

    def stop(self, timeout: float = 10.0) -> None:
        """Stop evaluating (the lease goes to a standby at its next cycle), then flush the history."""
        self.evaluator.stop(timeout)
        if self._writer is not None:
            self._writer.close(timeout)
            self._writer = None


def start_alerts(influx, settings: AlertSettings, spool_dir: Path, sink=None) -> AlertService | None:
    """Start evaluating the rules of `settings` against the backend `influx` configures; None (said once) if it cannot.

    `sink`: a writer the caller owns and closes (`add(points)`); else one is opened here,
    spooling to `spool_dir` while the backend is away, and closed by `AlertService.stop`.
    """
    writer = None
    try:
        if sink is None:
            writer = sink = open_writer(influx, spool_dir, background=True)
        evaluator = start_evaluator(None, sink, client=reader_of(influx), settings=settings)
    except Exception as e:              # an unwritable spool, a bad setting: the host process goes on
        log.error("alerts: not evaluating %s: %s", settings.rules_path, e)
        evaluator = None
    if evaluator is None:
        if writer is not None:
            writer.close(5.0)
        return None
    return AlertService(evaluator, writer)

"""A real Alertmanager for tests: Debian's `prometheus-alertmanager` on a free loopback port.

Its one receiver is a webhook to a local `WebhookReceiver`, grouped by `alertname` with
a 1 s group wait and interval, so notifications come within seconds. Use it from any
test module with

    from tests.alerts.alertmanager_fixture import alertmanager  # noqa: F401 - the fixture

and `start_alertmanager(folder, hook_url, port)` to start one later (an outage test).
"""
from __future__ import annotations

import json
import os
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from alerts.alertmanager_server import AlertmanagerServer, find_alertmanager

from .webhook_server import WebhookReceiver

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # loopback: never through a proxy


def receiver_config(hook_url: str) -> str:
    """Return an alertmanager.yml that notifies `hook_url` (firing and resolved) within seconds."""
    return f"""\
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {json.dumps(hook_url)}
        send_resolved: true
"""


@dataclass
class RunningAlertmanager:
    """A started Alertmanager, its URL, and the receiver its notifications go to."""
    server: AlertmanagerServer
    hook: WebhookReceiver

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """Call Alertmanager's API v2 (`/api/v2` + path); return the decoded JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/api/v2{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with DIRECT.open(req, timeout=10) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def alerts(self) -> list[dict]:
        """Return the alerts Alertmanager holds now (active, silenced, inhibited; resolved ones are gone)."""
        return self.api("GET", "/alerts")

    def wait_for(self, pred, timeout: float = 60.0, what: str = "Alertmanager"):
        """Poll `pred()` until it returns something true; return it (fail after `timeout` s)."""
        return wait_until(pred, timeout, what)


def wait_until(pred, timeout: float = 30.0, what: str = "condition"):
    """Poll `pred()` until it returns something true; return it (fail after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start_alertmanager(folder: Path, hook: WebhookReceiver, port: int = 0) -> RunningAlertmanager:
    """Start a real Alertmanager in `folder` notifying `hook`; skip (fail in CI) if it is not installed."""
    if find_alertmanager() is None:
        msg = "Alertmanager is not installed (scripts/setup installs Debian's `prometheus-alertmanager`)"
        if os.environ.get("CI"):
            pytest.fail(msg)           # in CI a missing server is a set-up bug, never a skip
        pytest.skip(msg)
    server = AlertmanagerServer(folder, port, config_text=receiver_config(hook.url))
    server.start()
    return RunningAlertmanager(server, hook)


@pytest.fixture
def alertmanager(tmp_path):
    """A real Alertmanager on a free loopback port whose receiver is a local webhook server."""
    with WebhookReceiver() as hook:
        am = start_alertmanager(tmp_path / "alertmanager-state", hook)
        try:
            yield am
        finally:
            am.server.stop()

"""Webhooks cannot reach internal services (issue 14): refused at `alerts add`, at load, and at send
time against the project's real InfluxDB and real local receivers; a name that rebinds between add
and send is refused at send time; redirects are not followed; allowed targets are reached at the
address that was checked, with TLS verified against the URL's host name."""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from alerts.history import AlertHistory
from alerts.namespace import load_namespace
from alerts.notify import Notification, WebhookNotifier, post_json
from alerts.rules import Rule
from alerts.store import RuleStore
from alerts.webhook_target import WebhookPolicy, WebhookRefused, address_class, check_webhook_target, resolve_target
from collector.influx import Point

from .webhook_server import WebhookReceiver, tls_for
from ..cli_inprocess import run_main
from collector.settings import PROJECT_ROOT

ROOT = PROJECT_ROOT
LOOPBACK = WebhookPolicy.parse("127.0.0.1")
PUBLIC = "93.184.216.34"


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_main(["alerts", *args], env)


def _env(tmp_path: Path, influx_client, **extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MS_STATE_DIR": str(tmp_path / "state"),
           **influx_client.config.as_env(), **extra}
    for name in ("MS_ALERTS_FILE", "MS_WEBHOOK_ALLOW"):
        if name not in extra:
            env.pop(name, None)
    return env


def _wait(pred, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    return pred()


def _databases(client) -> set[str]:
    return {v[0] for s in client.query("SHOW DATABASES") for v in s.values}


@pytest.mark.parametrize("address, kind", [
    ("127.0.0.1", "loopback"), ("127.9.9.9", "loopback"), ("::1", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("10.0.0.5", "private"), ("172.16.1.1", "private"), ("192.168.1.1", "private"), ("fc00::1", "private"),
    ("224.0.0.1", "multicast"), ("239.1.2.3", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("100.64.0.1", "reserved"),
    # IPv4 inside IPv6: mapped, NAT64, 6to4
    ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::a9fe:a9fe", "link-local"), ("2002:a00:1::1", "private"),
    (PUBLIC, None), ("2606:4700::1", None),
])
def test_address_classes(address, kind):
    assert address_class(ipaddress.ip_address(address)) == kind


def test_allow_list_parses_cidrs_addresses_and_host_names():
    policy = WebhookPolicy.parse(" 10.1.0.0/16, 127.0.0.1 ,[::1], Hooks.Internal., ")
    assert policy.refusal("x", "10.1.2.3") is None and policy.refusal("x", "10.2.0.1") == "private address"
    assert policy.refusal("x", "::ffff:127.0.0.1") is None                      # the same address, mapped
    assert policy.refusal("hooks.internal", "192.168.0.9") is None             # a host name allows what it resolves to
    assert policy.refusal("other.internal", "192.168.0.9") == "private address"
    assert policy.refusal("x", "169.254.169.254") == "link-local address"
    for bad in ("10.0.0.0/33", "http://x", "a b", "*"):
        with pytest.raises(ValueError, match="MS_WEBHOOK_ALLOW"):
            WebhookPolicy.parse(bad)


def test_one_internal_address_among_public_ones_refuses_the_target():
    with pytest.raises(WebhookRefused, match="refused: loopback address"):
        resolve_target("https://hooks.example/x", WebhookPolicy(), lambda h, p: [PUBLIC, "127.0.0.1"])
    target = resolve_target("https://hooks.example/x", WebhookPolicy(), lambda h, p: [PUBLIC])
    assert (target.host, target.port, target.addresses) == ("hooks.example", 443, (PUBLIC,))


def test_alerts_add_and_load_refuse_internal_targets_unless_allowed(influxdb, influx_client, tmp_path):
    env = _env(tmp_path, influx_client)
    port = urlsplit(influx_client.config.url).port
    rules_file = tmp_path / "state" / "alerts" / "rules.json"
    for url, kind in ((f"http://127.0.0.1:{port}/query?q=CREATE+DATABASE+x", "a loopback address"),
                      (f"http://localhost:{port}/query?q=DROP+DATABASE+x", "a loopback address"),
                      (f"http://2130706433:{port}/query", "a loopback address"),          # 127.0.0.1 as a number
                      (f"http://[::ffff:127.0.0.1]:{port}/query", "a loopback address"),
                      ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
                      ("http://10.0.0.5:8080/hook", "a private address"),
                      ("http://0.0.0.0:22/", "an unspecified address")):
        out = _cli(env, "add", "x", "backlog > 1k", "--webhook", url)
        assert out.returncode == 2, (url, out.stdout)
        assert f"resolves to {kind}: refused" in out.stderr and "MS_WEBHOOK_ALLOW" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
        assert str(port) not in out.stderr.replace(url, "")                      # nothing but what was typed
    assert not rules_file.exists()

    yml = tmp_path / "rules.yaml"
    yml.write_text("rules:\n  - name: ok\n    condition: backlog > 1k\n"
                   "  - name: meta\n    condition: backlog > 1k\n    webhook: http://169.254.169.254/x\n")
    out = _cli(env, "load", str(yml))
    assert out.returncode == 2 and "rule 'meta': webhook host '169.254.169.254' resolves to a link-local" in out.stderr
    assert not rules_file.exists()                                                # all or nothing

    # the operator's opt-in: an allow-list, and only what it names
    allowed = _env(tmp_path, influx_client, MS_WEBHOOK_ALLOW="127.0.0.1/32")
    assert _cli(allowed, "add", "local", "backlog > 1k", "--webhook", "http://127.0.0.1:9/hook").returncode == 0
    assert _cli(allowed, "add", "meta", "backlog > 1k", "--webhook", "http://169.254.169.254/x").returncode == 2
    bad = _cli(_env(tmp_path, influx_client, MS_WEBHOOK_ALLOW="10.0.0.0/33"), "add", "y", "backlog > 1k")
    assert bad.returncode == 2 and "MS_WEBHOOK_ALLOW: '10.0.0.0/33' is neither" in bad.stderr
    assert [r["name"] for r in json.loads(rules_file.read_text())["rules"]] == ["local"]


def test_a_rule_already_in_the_file_cannot_reach_influxdb_or_a_local_service_at_send_time(influxdb, influx_client,
                                                                                         tmp_path):
    """The issue's exploit: a firing rule whose webhook is InfluxDB's /query created a database."""
    port = urlsplit(influx_client.config.url).port
    victim = "ssrf_created_by_webhook"
    influx_client.query(f'DROP DATABASE "{victim}"')
    influx_client.write([Point("backpressure", {"run": "r1", "step": "job"},
                               {"backlog": 5000, "backpressured_share": 0.6, "status": "HIGH"}, time.time_ns())])
    with WebhookReceiver() as local:
        # written to the file directly (an older version's rule, or a hand edit): only the send-time check is left
        store = RuleStore(tmp_path / "state" / "alerts" / "rules.json")
        hooks = {"influx": f"http://127.0.0.1:{port}/query?q=CREATE+DATABASE+{victim}",
                 "metadata": "http://169.254.169.254/latest/meta-data/",
                 "private": "http://10.255.255.1:8080/hook",
                 "local": local.url}
        store.put_all([Rule.from_dict({"name": name, "condition": "backlog > 1k", "webhook": url})
                       for name, url in hooks.items()])
        served = _cli(_env(tmp_path, influx_client), "serve", "--interval", "0.5", "--duration", "3")
        assert served.returncode == 0, served.stderr[-2000:]
        history = AlertHistory(influx_client, load_namespace(store.path))
        attempts = _wait(lambda: (lambda n: n if len(n) >= 4 else None)(history.notifications()))
        assert local.requests == 0
    assert victim not in _databases(influx_client)
    assert {n.rule: (n.state, n.attempt, n.ok, n.status, n.error) for n in attempts} == {
        "influx": ("FIRING", 1, False, None, "refused: loopback address"),          # refused once, not retried
        "metadata": ("FIRING", 1, False, None, "refused: link-local address"),
        "private": ("FIRING", 1, False, None, "refused: private address"),
        "local": ("FIRING", 1, False, None, "refused: loopback address")}
    assert len(attempts) == 4


def test_a_name_that_rebinds_to_loopback_after_the_add_is_refused_at_send_time():
    """Public when the rule is saved, 127.0.0.1 when it fires: the receiver must get nothing."""
    with WebhookReceiver() as hook:
        url = f"http://rebind.test:{hook.port}/hook"
        assert check_webhook_target(url, WebhookPolicy(), resolve=lambda h, p: [PUBLIC]) is None   # saved
        asked, attempts, done = [], [], threading.Event()

        def rebound(host: str, port: int) -> list[str]:
            asked.append((host, port))
            return ["127.0.0.1"]

        n = WebhookNotifier(lambda a: (attempts.append(a), done.set()), first_backoff_s=0.05, max_attempts=3,
                            resolve=rebound).start()
        try:
            n.submit(Notification("r", "FIRING", url, {"rule": "r"}))
            assert done.wait(10)
            time.sleep(0.3)                                       # a retry would come after 0.05 s
        finally:
            n.stop()
        assert hook.requests == 0
    assert [(a.attempt, a.ok, a.status, a.error) for a in attempts] == [(1, False, None, "refused: loopback address")]
    assert asked == [("rebind.test", hook.port)]                  # resolved once per send


def test_an_allowed_target_is_reached_at_the_checked_address_and_redirects_are_not_followed():
    with WebhookReceiver() as hook:
        # no DNS knows hooks.test: delivery proves the connection went to the address that was checked
        status = post_json(f"http://hooks.test:{hook.port}/hook?k=v", {"rule": "r"}, policy=LOOPBACK,
                           resolve=lambda h, p: ["127.0.0.1"])
        assert status == 204 and hook.next(timeout=5)["rule"] == "r"
        assert hook.hosts == [f"hooks.test:{hook.port}"]
        with WebhookReceiver(redirect_to=hook.url) as hop:
            attempts, done = [], threading.Event()
            n = WebhookNotifier(lambda a: (attempts.append(a), done.set()), max_attempts=1, policy=LOOPBACK).start()
            try:
                n.submit(Notification("r", "FIRING", hop.url, {"rule": "r"}))
                assert done.wait(10)
            finally:
                n.stop()
            assert hop.requests == 1
        assert hook.requests == 1                                  # the redirect's target got nothing more
    assert [(a.ok, a.status, a.error) for a in attempts] == [(False, 302, "HTTP 302 (redirects are not followed)")]


def test_https_to_a_checked_address_verifies_the_certificate_against_the_url_host(tmp_path, monkeypatch):
    ctx, ca = tls_for("hooks.test", tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))                   # trust the test CA (read by OpenSSL at connect)
    to_loopback = lambda h, p: ["127.0.0.1"]                      # noqa: E731
    with WebhookReceiver(tls=ctx) as hook:
        assert post_json(f"https://hooks.test:{hook.port}/hook", {"rule": "tls"}, policy=LOOPBACK,
                         resolve=to_loopback) == 204
        assert hook.next(timeout=5)["rule"] == "tls"
        with pytest.raises(OSError) as e:                          # same address, another name: not its certificate
            post_json(f"https://other.test:{hook.port}/hook", {"rule": "x"}, policy=LOOPBACK, resolve=to_loopback)
        from alerts.notify import describe_failure
        assert describe_failure(e.value) == "TLS certificate not accepted"
        assert hook.received.empty()

"""The pure parts of the dashboard's guards: Host names, callback shapes, the login throttle, redirects."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from metrics_ui.auth import AuthConfig, local_path
from metrics_ui.http_guard import allowed_hosts, callback_problem, host_name
from metrics_ui.serve import ServeConfig
from metrics_ui.throttle import LoginThrottle


def test_host_names_are_parsed_strictly():
    assert host_name("127.0.0.1:8050") == "127.0.0.1" and host_name("LocalHost") == "localhost"
    assert host_name("[::1]:8050") == "::1" and host_name("[::1]") == "::1" and host_name("localhost.") == "localhost"
    for bad in (None, "", "a b", "::1", "[::1", "host:port", "host:123456", "user@host", "h/x", "h\r\n"):
        assert host_name(bad) is None, bad


def test_allowed_hosts_are_loopback_the_bound_address_and_extra_names():
    assert allowed_hosts(None) == {"localhost", "127.0.0.1", "::1"}
    assert allowed_hosts("10.0.0.5", ["Metrics.Example", " [fd00::1] "]) == \
        {"localhost", "127.0.0.1", "::1", "10.0.0.5", "metrics.example", "fd00::1"}
    assert socket.gethostname().lower() in allowed_hosts("0.0.0.0")
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0")


CALLBACKS = {"..a.children...b.data..": {"inputs": [{"id": "i", "property": "n"}], "state": []}}


def test_callback_shapes():
    good = {"output": "..a.children...b.data..", "outputs": [{"id": "a", "property": "children"},
                                                             [{"id": {"type": "b", "i": 1}, "property": "data"}]],
            "inputs": [{"id": "i", "property": "n", "value": 1}], "changedPropIds": ["i.n"]}
    assert callback_problem(good, CALLBACKS) is None
    assert callback_problem({**good, "inputs": [[{"id": {"type": "x"}, "property": "n"}]]}, CALLBACKS) is None
    for bad, reason in ((None, "JSON object"), ([], "JSON object"), ({**good, "output": "x"}, "names no callback"),
                        ({**good, "outputs": "a"}, "'outputs'"), ({**good, "outputs": [[[]]]}, "'outputs'"),
                        ({**good, "inputs": {}}, "'inputs' must be a list"),
                        ({**good, "inputs": [{"id": 5, "property": "n"}]}, "'inputs' must be a list"),
                        ({**good, "inputs": []}, "this callback takes 1"),
                        ({**good, "state": [{"id": "s", "property": "v"}]}, "this callback takes 0"),
                        ({**good, "changedPropIds": "i.n"}, "changedPropIds")):
        assert reason in callback_problem(bad, CALLBACKS), bad


def test_login_throttle_counts_failures_per_client_in_a_sliding_window():
    now = [1000.0]
    throttle = LoginThrottle(limit=3, window_s=60, max_clients=2, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("a") == 0
        throttle.failed("a")
        now[0] += 10
    assert throttle.retry_after("a") == pytest.approx(30)        # the first failure ages out at 1060
    assert throttle.retry_after("b") == 0
    now[0] = 1060.0
    assert throttle.retry_after("a") == 0
    throttle.failed("a")
    assert throttle.retry_after("a") == pytest.approx(10)        # failures at 1010, 1020, 1060
    throttle.failed("b")
    throttle.failed("c")                                          # a third client: the stalest ("a") is forgotten
    assert throttle.retry_after("a") == 0 and len(throttle._failures) == 2


def test_redirect_targets_stay_on_this_site():
    assert local_path("/run/r-1") == "/run/r-1"
    assert local_path("\t/evil.example") == "/%09/evil.example"
    assert local_path("//evil.example") == "/evil.example" and local_path("///x") == "/x"
    assert local_path("/\\evil.example") == "/%5Cevil.example"
    assert local_path("/a b%") == "/a%20b%25"


def test_settings_from_the_environment_are_checked():
    auth = AuthConfig.from_env({"MS_UI_ALLOWED_HOSTS": "a.example, b.example", "MS_UI_SECURE_COOKIE": "1",
                                "MS_UI_PROXY_HOPS": "1"})
    assert auth.allowed_hosts == ("a.example", "b.example") and auth.secure_cookie and auth.proxy_hops == 1
    with pytest.raises(ValueError, match="MS_UI_PROXY_HOPS"):
        AuthConfig.from_env({"MS_UI_PROXY_HOPS": "yes"})
    assert ServeConfig.from_env({"MS_UI_THREADS": "2", "MS_UI_TIMEOUT_S": "5"}) == ServeConfig(2, 500, 5.0)
    for env in ({"MS_UI_THREADS": "0"}, {"MS_UI_CONNECTION_LIMIT": "x"}, {"MS_UI_TIMEOUT_S": "-1"}):
        with pytest.raises(ValueError, match="MS_UI_"):
            ServeConfig.from_env(env)


def test_the_ui_command_says_what_is_wrong_in_one_line(monkeypatch, capsys):
    from marketspread.cli import main as cli_main
    for var in ("MS_UI_TOKEN", "MS_UI_USER", "MS_UI_PASSWORD", "MS_UI_THREADS", "MS_UI_PROXY_HOPS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MS_INFLUX_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("MS_UI_THREADS", "lots")
    assert cli_main(["ui", "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == "marketspread ui: MS_UI_THREADS must be a number, got 'lots'"
    monkeypatch.delenv("MS_UI_THREADS")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert cli_main(["ui", "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot listen on 127.0.0.1:" in err[0] and "Address already in use" in err[0]


def test_the_ui_process_says_a_bad_setting_or_a_taken_port_in_one_line(tmp_path):
    """As a real process, whose logging goes to stderr too: one line, no evaluator chatter before it."""
    import os
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(MS_INFLUX_URL="http://127.0.0.1:9", MS_STATE_DIR=str(tmp_path / "state"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        for extra, port in (({"MS_UI_THREADS": "lots"}, "0"), ({}, str(taken.getsockname()[1]))):
            r = subprocess.run([sys.executable, "-m", "marketspread", "ui", "--port", port], cwd=root,
                               env={**env, **extra}, capture_output=True, text=True, timeout=60)
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("marketspread ui: "), r.stderr

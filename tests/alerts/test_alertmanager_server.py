"""`marketspread alertmanager start|stop|status`: a real Alertmanager in the state folder, on loopback."""
from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest

from alerts.alertmanager_server import DEFAULT_CONFIG, AlertmanagerServer
from marketspread.cli import main

from .alertmanager_fixture import DIRECT, RunningAlertmanager, start_alertmanager
from .webhook_server import WebhookReceiver


def test_start_status_stop_keep_everything_in_the_state_folder(tmp_path, capsys):
    state = tmp_path / "state"
    with WebhookReceiver() as hook:
        start_alertmanager(tmp_path / "probe", hook).server.stop()     # skips (fails in CI) without the package

    assert main(["alertmanager", "start", "--port", "0", "--state-dir", str(state)]) == 0
    url = capsys.readouterr().out.splitlines()[0]
    srv = AlertmanagerServer(state)
    try:
        st = srv.status()
        assert st.running and st.url == url and url.startswith("http://127.0.0.1:") and st.version == "0.25.0"
        assert srv.config_path.read_text() == DEFAULT_CONFIG                  # written at the first start
        assert RunningAlertmanager(srv, hook).api("GET", "/status")["cluster"]["status"] == "disabled"
        # everything lives under the secret path: a web page that does not know it gets nothing
        token = (state / "alertmanager" / "token").read_text().strip()
        assert url.endswith(f"/{token}") and len(token) >= 24
        assert (state / "alertmanager" / "token").stat().st_mode & 0o777 == 0o600
        root = url.removesuffix(f"/{token}")
        for path in ("/api/v2/status", "/api/v2/alerts", "/api/v2/silences", "/metrics"):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                DIRECT.open(root + path, timeout=10)
        args = Path(f"/proc/{st.pid}/cmdline").read_bytes().split(b"\0")
        assert f"--storage.path={(state / 'alertmanager' / 'data').resolve()}".encode() in args
        assert b"--data.retention=120h" in args and b"--cluster.listen-address=" in args
        assert main(["alertmanager", "start", "--state-dir", str(state)]) == 0      # finds it running
        assert capsys.readouterr().out.splitlines()[0] == url
        assert main(["alertmanager", "status", "--state-dir", str(state)]) == 0
        assert "running" in capsys.readouterr().out
    finally:
        assert main(["alertmanager", "stop", "--state-dir", str(state)]) == 0
    assert not srv.status().running and not (state / "alertmanager" / "server.json").exists()
    assert main(["alertmanager", "status", "--state-dir", str(state)]) == 3
    assert main(["alertmanager", "start", "--port", "70000", "--state-dir", str(state)]) == 2

    # the operator's own configuration is kept across starts
    srv.config_path.write_text(DEFAULT_CONFIG.replace("repeat_interval: 4h", "repeat_interval: 2h"))
    srv = AlertmanagerServer(state, 0)
    try:
        srv.start()
        assert "repeat_interval: 2h" in srv.config_path.read_text()
        assert json.loads((state / "alertmanager" / "server.json").read_text())["port"] == srv.port
    finally:
        srv.stop()
    assert (state / "logs" / "alertmanager.log").stat().st_size > 0

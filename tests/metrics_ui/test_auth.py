"""Who may use the dashboard: credentials on every route, no cross-site changes, loopback by default."""
from __future__ import annotations

import base64
import logging

import pytest

from marketspread.cli import main as cli_main
from metrics_ui.app import UiConfig, create_app
from metrics_ui.auth import AuthConfig, check_bind

TOKEN = "s3cret-token-for-tests-0123456789"


def _app(influx_client, **auth):
    app = create_app(UiConfig(influx=influx_client.config, auth=AuthConfig(**auth)))
    return app


def _callback(app, client, headers=None):
    """POST the runs page's Dash callback as the browser would; return the response."""
    key = "..runs-table.children...runs-banner.children.."
    body = {"output": key, "outputs": [{"id": "runs-table", "property": "children"},
                                       {"id": "runs-banner", "property": "children"}],
            "inputs": [{"id": "runs-interval", "property": "n_intervals", "value": 0}], "state": [],
            "changedPropIds": ["runs-interval.n_intervals"]}
    return client.post("/_dash-update-component", json=body, headers=headers or {})


ROUTES = ("/", "/run/done-1", "/step/done-1/sink", "/_dash-layout", "/_dash-dependencies",
          "/export/done-1/sink.csv", "/export/done-1/sink.hgrm")


def test_token_is_required_on_pages_callbacks_and_exports(influx_client, ui_data):
    app = _app(influx_client, token=TOKEN)
    client = app.server.test_client()
    for route in ROUTES:
        r = client.get(route)
        assert r.status_code == 401, route
        assert b"authentication required" in r.data and TOKEN.encode() not in r.data
    assert _callback(app, client).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/?token=wrong").status_code == 401

    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for route in ROUTES:
        assert app.server.test_client().get(route, headers=bearer).status_code == 200, route
    r = _callback(app, app.server.test_client(), bearer)
    assert r.status_code == 200 and b"done-1" in r.data


def test_token_in_the_url_once_becomes_a_session_cookie(influx_client, ui_data):
    app = _app(influx_client, token=TOKEN)
    client = app.server.test_client()
    r = client.get(f"/step/done-1/sink?token={TOKEN}&x=1")
    assert r.status_code == 303 and r.headers["Location"] == "/step/done-1/sink?x=1"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and TOKEN not in cookie
    for route in ROUTES:
        assert client.get(route).status_code == 200, route
    r = _callback(app, client)
    assert r.status_code == 200 and b"done-1" in r.data
    csv = client.get("/export/done-1/start-to-end.csv")
    assert csv.status_code == 200 and csv.data.startswith(b"value_from_ns,")
    # a cookie signed for other credentials (or another key) is worthless
    other = _app(influx_client, token=TOKEN + "x", secret_key=app.server.config["SECRET_KEY"]).server.test_client()
    other.set_cookie("ms_ui_session", client.get_cookie("ms_ui_session").value)
    assert other.get("/").status_code == 401


def test_basic_auth(influx_client, ui_data):
    app = _app(influx_client, user="ops", password="pa:ss wörd")
    client = app.server.test_client()
    r = client.get("/export/done-1/sink.csv")
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic realm=")

    def basic(user, password):
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    assert client.get("/", headers=basic("ops", "wrong")).status_code == 401
    assert client.get("/", headers=basic("other", "pa:ss wörd")).status_code == 401
    assert client.get("/", headers={"Authorization": "Basic !!notbase64"}).status_code == 401
    good = basic("ops", "pa:ss wörd")
    for route in ROUTES:
        assert client.get(route, headers=good).status_code == 200, route
    assert _callback(app, client, good).status_code == 200


def test_cross_site_posts_are_refused_with_or_without_credentials(influx_client, ui_data):
    open_app = _app(influx_client)                      # loopback use: no credentials
    client = open_app.server.test_client()
    host = "localhost"                                  # the test client's Host
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Referer": "http://evil.example/page"}, {"Origin": f"http://{host}.evil.example"}):
        r = _callback(open_app, client, headers)
        assert r.status_code == 403 and b"cross-site request refused" in r.data, headers
    assert _callback(open_app, client, {"Origin": f"http://{host}"}).status_code == 200
    assert _callback(open_app, client, {"Referer": f"http://{host}/run/x"}).status_code == 200
    assert _callback(open_app, client).status_code == 200               # not a browser: no Origin

    app = _app(influx_client, token=TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert _callback(app, app.server.test_client(), dict(bearer, Origin="http://evil.example")).status_code == 403
    assert _callback(app, app.server.test_client(), dict(bearer, Origin=f"http://{host}")).status_code == 200
    proxied = _app(influx_client, token=TOKEN, allowed_origins=("https://metrics.example",))
    r = _callback(proxied, proxied.server.test_client(), dict(bearer, Origin="https://metrics.example"))
    assert r.status_code == 200


def test_refuses_to_listen_beyond_loopback_without_credentials(monkeypatch, capsys):
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_bind(host, AuthConfig())
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.org"):
        with pytest.raises(ValueError, match="refusing to listen"):
            check_bind(host, AuthConfig())
        check_bind(host, AuthConfig(token=TOKEN))
        check_bind(host, AuthConfig(user="u", password="p"))
    for var in ("MS_UI_TOKEN", "MS_UI_USER", "MS_UI_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MS_INFLUX_URL", "http://127.0.0.1:9")
    assert cli_main(["ui", "--host", "0.0.0.0", "--port", "0"]) == 2      # returns before binding
    assert "refusing to listen on '0.0.0.0'" in capsys.readouterr().err
    monkeypatch.setenv("MS_UI_USER", "ops")                               # half a credential
    assert cli_main(["ui", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "MS_UI_PASSWORD" in capsys.readouterr().err


def test_secrets_stay_out_of_logs_and_pages(influx_client, ui_data, caplog):
    auth = AuthConfig(token=TOKEN, user="ops", password="hunter2-password")
    assert TOKEN not in repr(auth) and "hunter2" not in repr(auth)
    app = create_app(UiConfig(influx=influx_client.config, auth=auth))
    assert TOKEN not in repr(app.server.config["MS_UI"])
    client = app.server.test_client()
    client.get(f"/?token={TOKEN}")
    for route in ROUTES:
        r = client.get(route)
        assert TOKEN.encode() not in r.data and b"hunter2" not in r.data
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        logging.getLogger("werkzeug").info('127.0.0.1 - - "%s" %s -', f"GET /run/x?a=1&token={TOKEN} HTTP/1.1", 303)
    assert TOKEN not in caplog.text and "token=***" in caplog.text


def test_a_short_token_is_refused_for_a_wide_bind_with_one_clear_error():
    for short in ("x", "a" * 15):
        with pytest.raises(ValueError, match="MS_UI_TOKEN.*16 characters"):
            check_bind("0.0.0.0", AuthConfig(token=short))
        check_bind("127.0.0.1", AuthConfig(token=short))           # loopback: the user's own machine
    check_bind("0.0.0.0", AuthConfig(token="a" * 16))

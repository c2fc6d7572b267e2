"""The dashboard's factory: Flask with the export routes, Dash with one module per page.

    app = create_app(UiConfig(InfluxConfig.from_env(), bind_host="127.0.0.1"))
    serve(app.server, "127.0.0.1", 8050, ServeConfig())     # app.server is the Flask app

CLI: `marketspread ui [--host 127.0.0.1] [--port 8050]` (`add_arguments`, `run`) serves it
with waitress (`serve`); InfluxDB comes from `MS_INFLUX_URL` / `MS_INFLUX_DB` (and
credentials) via `InfluxConfig.from_env`. The settings are read once, into `UiConfig`,
which the Flask app keeps as `app.config["MS_UI"]` for the pages' callbacks (as Flask
keeps `app.config`). Nothing is queried at import or construction time: only callbacks
talk to InfluxDB. Security: docs/SECURITY.md.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import dash
from dash import Dash, dcc, html
from dash import _callback
from flask import Flask, request

from alerts.history import AlertHistory
from alerts.service import start_alerts
from alerts.settings import AlertSettings
from alerts.store import RuleStore

from collector.influx import InfluxClient, InfluxConfig
from collector.settings import default_state_dir, env_values

from metrics_ui import alerts_banner, components, compress, http_guard, plotly_bundle, polyfill, prefetch
from metrics_ui.auth import AuthConfig, check_bind
from metrics_ui.auth import install as install_auth
from metrics_ui.serve import ServeConfig, serve
from collector.query.store import MetricsStore
from metrics_ui.export import EXTENSION as EXPORT_EXTENSION
from metrics_ui.export import bp as export_blueprint

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent
PAGES_DIR = PACKAGE_DIR / "pages"
STATIC_DIR = PACKAGE_DIR.parent / "static"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8050


@dataclass(frozen=True)
class UiSettings:
    """The `ui` command's own variables: `MS_UI_REFRESH_MS`, `MS_UI_HOST`, `MS_UI_PORT`."""
    refresh_ms: int = components.REFRESH_MS
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT

    @classmethod
    def from_env(cls, environ=None) -> "UiSettings":
        """Build from defaults, then `MS_UI_*` variables (None: this process's environment)."""
        return cls(**env_values(cls, environ, prefix="MS_UI_"))


@dataclass(frozen=True)
class UiConfig:
    """The dashboard's settings: where InfluxDB is, how often live pages refresh, who may look.

    Fields not given are read from the environment when the record is made, never later.
    """
    influx: InfluxConfig = field(default_factory=InfluxConfig.from_env)
    refresh_ms: int = components.REFRESH_MS
    title: str = components.PRODUCT
    alerts_file: Path | None = None       # default: alerts.rules_path (<state>/alerts/rules.json)
    auth: AuthConfig = field(default_factory=AuthConfig.from_env)     # MS_UI_TOKEN / MS_UI_USER+PASSWORD
    bind_host: str | None = None          # the address served on: a Host name it answers to
    alerts: AlertSettings = field(default_factory=AlertSettings.from_env)   # rules file, MS_WEBHOOK_ALLOW

    @classmethod
    def from_env(cls, environ=None, **overrides) -> "UiConfig":
        """Build from `MS_INFLUX_*`, `MS_UI_*` and the alerts' variables (None: this process's), then overrides."""
        values = {"influx": InfluxConfig.from_env(environ), "auth": AuthConfig.from_env(environ),
                  "refresh_ms": UiSettings.from_env(environ).refresh_ms, "alerts": AlertSettings.from_env(environ)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def create_app(config: UiConfig | InfluxConfig | None = None) -> Dash:
    """Build the Flask server and mount the Dash pages on it; return the Dash app."""
    if config is None:
        config = UiConfig.from_env()
    elif isinstance(config, InfluxConfig):
        config = UiConfig(influx=config)
    server = Flask(__name__)
    server.config["MS_UI"] = config
    http_guard.install(server, http_guard.allowed_hosts(config.bind_host, config.auth.allowed_hosts))
    install_auth(server, config.auth)
    compress.install(server)
    basic_plotly = plotly_bundle.install(server)
    polyfill.install(server)
    metrics = MetricsStore(InfluxClient(config.influx))
    server.extensions[components.EXTENSION] = metrics
    server.extensions[EXPORT_EXTENSION] = metrics
    server.register_blueprint(export_blueprint)
    server.extensions[alerts_banner.EXTENSION] = alerts_banner.AlertsSource(
        RuleStore(config.alerts_file or config.alerts.rules_path), AlertHistory(metrics.client))

    # Page modules register their callbacks with dash.callback each time an app loads them;
    # drop what an earlier app in this process loaded but never claimed (tests build many).
    _callback.GLOBAL_CALLBACK_LIST.clear()
    _callback.GLOBAL_CALLBACK_MAP.clear()
    app = Dash("metrics_ui", server=server, use_pages=True, pages_folder=str(PAGES_DIR),
               assets_folder=str(STATIC_DIR), title=config.title, update_title=None,
               suppress_callback_exceptions=True)
    if basic_plotly:
        # preloaded with the page's scripts; run once Dash's renderer has started and waits for the layout
        app.index_string = plotly_bundle.with_early_loading(app.index_string)
    app.index_string = prefetch.with_preloads(app.index_string)
    _without_dash_table(app)
    app.layout = html.Div([
        html.Header([dcc.Link(config.title, href="/", className="brand"),
                     dcc.Link("Runs", href="/", className="nav"),
                     dcc.Link("Compare", href="/compare", className="nav"),
                     dcc.Link("Alerts", href="/alerts", className="nav"),
                     html.Span(f"InfluxDB {config.influx.url} · db {config.influx.db}", className="source")],
                    className="top"),
        html.Main([alerts_banner.banner(config.refresh_ms), dash.page_container], className="content"),
    ])
    alerts_banner.register(app)
    prefetch.install(app)
    http_guard.install_callback_check(server, lambda: app.callback_map)
    http_guard.install_callback_errors(server)
    _install_not_found(server)
    return app


_DASH_TABLE_SCRIPT = re.compile(r'<script src="[^"]*/dash/dash_table/[^"]*"></script>\s*')


def _without_dash_table(app: Dash) -> None:
    """Leave out dash_table's script, which Dash puts in every page: no page here has a DataTable
    (tables are `metrics_ui/table.py`'s), and it is 34 KB of script to evaluate on each load."""
    scripts = app._generate_scripts_html

    def generate() -> str:
        return _DASH_TABLE_SCRIPT.sub("", scripts())
    app._generate_scripts_html = generate


def _page_patterns() -> list[re.Pattern]:
    """Return one pattern per registered page (`/run/<run_id>` matches one path segment per field)."""
    out = []
    for page in dash.page_registry.values():
        template = page.get("path_template") or page["path"]
        parts = re.split(r"(<[^>/]+>)", template)
        out.append(re.compile("".join("[^/]+" if p.startswith("<") else re.escape(p) for p in parts) + "/?"))
    return out


def _install_not_found(server: Flask) -> None:
    """Answer a path that is no page with 404 (Dash serves its page shell, showing its own
    "not found", with 200 for any path; a bookmark or a crawler should see the status)."""
    patterns: list[re.Pattern] = []

    @server.after_request
    def _not_found(response):
        if (request.method != "GET" or response.status_code != 200 or response.mimetype != "text/html"
                or request.path.startswith(("/_dash-", "/_favicon", "/assets/", "/export/"))):
            return response
        if not patterns:
            patterns.extend(_page_patterns())
        if not any(p.fullmatch(request.path) for p in patterns):
            response.status_code = 404
        return response


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `ui` command's flags (defaults: `MS_UI_HOST`, `MS_UI_PORT`)."""
    env = UiSettings.from_env()
    parser.add_argument("--host", default=env.host,
                        help="address to listen on (default 127.0.0.1: this machine only; any other address "
                             "needs MS_UI_TOKEN or MS_UI_USER/MS_UI_PASSWORD)")
    parser.add_argument("--port", type=int, default=env.port,
                        help="port (default 8050)")
    parser.add_argument("--no-alerts", dest="evaluate", action="store_false",
                        help="do not evaluate the alert rules in this process (another process of the product, "
                             "or `marketspread alerts serve`, does)")


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted (refuses a non-loopback address without credentials)."""
    try:
        config = UiConfig.from_env(bind_host=args.host)
        check_bind(args.host, config.auth)
        limits = ServeConfig.from_env()
    except ValueError as e:
        print(f"marketspread ui: {e}", file=sys.stderr)          # one line, no traceback
        return 2
    app = create_app(config)
    evaluating = []
    alerts_spool = default_state_dir() / "metrics-spool" / "ui-alerts"

    def ready(host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        log.info("dashboard on http://%s:%d/ reading %r (%s; %d threads, %d connections, %g s timeout)",
                 shown, port, config.influx,
                 "credentials required" if config.auth.enabled else "no credentials: this machine only",
                 limits.threads, limits.connection_limit, limits.timeout_s)
        # rules are evaluated while the dashboard runs (one evaluator per namespace: alerts.lease),
        # from once it listens: a dashboard that cannot start says so in one line and evaluates nothing
        if getattr(args, "evaluate", True) and not evaluating:        # once, whatever the sockets
            evaluating.append(start_alerts(config.influx, config.alerts, alerts_spool))
    try:
        serve(app.server, args.host, args.port, limits, keep_proxy_headers=config.auth.proxy_hops > 0,
              on_ready=ready)
    except OSError as e:                  # the port is taken, the address is not this machine's
        print(f"marketspread ui: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        for service in evaluating:
            service.stop()
    return 0

"""Where and how to reach InfluxDB: one typed config from `MS_INFLUX_*` variables.

Without a URL it is the project's own server of the state folder, with its admin's
credentials; credentials are never logged and are redacted from every repr.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit

from collector.influx.credentials import credentials_path, load_credentials, running_url
from collector.settings import default_state_dir, env_values

DEFAULT_PORT = 18086                     # the project's own server; 8086 is left to a system InfluxDB
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
DEFAULT_DB = "marketspread"
DEFAULT_SPOOL_BYTES = 256 << 20
# A process sends what it gathered once a second (Telegraf's flush_interval, default 10 s).
# Each send is an HTTP round trip and, in InfluxDB, a WAL write with fsync, on cores the
# job's batches share: in eight alternated rounds at 50k events/s, metrics on took p99 to
# 1.18x off sending every 0.2 s, 1.06x every 1.0 s (docs/PERFORMANCE.md, "Design decisions":
# each process sends once a second). Points are 2-3 s old when sent
# (1-s intervals with a 2-s grace), so charts lag by at most a second more.
DEFAULT_FLUSH_S = 1.0
MAX_FLUSH_S = 600.0


@dataclass(frozen=True, repr=False)
class InfluxConfig:
    """Where and how to reach InfluxDB; from `MS_INFLUX_*` variables with single-machine defaults.

    `password` and `token` are redacted from `repr()`/`str()`, so a config can be logged.
    A token is sent as `Authorization: Token ...` (InfluxDB 2.x/3.x); user and password
    as HTTP Basic authentication (1.x, and 2.x's v1 compatibility).
    """
    url: str = DEFAULT_URL
    db: str = DEFAULT_DB
    user: str | None = None
    password: str | None = None
    token: str | None = None
    timeout: float = 10.0
    spool_max_bytes: int = DEFAULT_SPOOL_BYTES
    flush_s: float = DEFAULT_FLUSH_S     # how long a process' writer gathers points before sending
    # The state folder whose own server the credentials were read for (never from the
    # environment): a client sends them only while that server runs (`InfluxClient`).
    owner: str | None = None

    def __post_init__(self):
        if not 0.0 <= self.flush_s <= MAX_FLUSH_S:          # also rejects nan, which would never send
            raise ValueError(f"MS_INFLUX_FLUSH_S={self.flush_s!r}: seconds between sends, 0 to {MAX_FLUSH_S:g}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "InfluxConfig":
        """Build from defaults, then `MS_INFLUX_*` variables, then non-None overrides.

        Without a URL it is the project's own server of the state folder (`MS_STATE_DIR`):
        the port it runs on and, unless credentials are given, its admin's from its 0600 file.
        """
        values = env_values(cls, environ, prefix="MS_INFLUX_", names={"spool_max_bytes": "SPOOL_BYTES"})
        values.pop("owner", None)
        values.update({k: v for k, v in overrides.items() if v is not None})
        config = cls(**values)._without_url_credentials()
        return config._with_project_credentials(environ, url_given="url" in values)

    def _with_project_credentials(self, environ: Mapping[str, str] | None, url_given: bool) -> "InfluxConfig":
        # Without a URL, the project's own server of the state folder is meant: the port it
        # runs on, and (it runs with auth) its admin credentials from its 0600 file unless
        # some were given. They go only to that server while it runs (a live influxd with
        # the folder's config, credentials.running_url): never to a stale port's stranger.
        state_dir = default_state_dir(environ)
        running = running_url(state_dir)
        config = self if url_given or not running else replace(self, url=running)
        if config.user or config.password or config.token or running is None or \
                config.url.rstrip("/") != running:
            return config
        creds = load_credentials(credentials_path(state_dir))
        return config if creds is None else replace(config, user=creds.user, password=creds.password,
                                                    owner=str(state_dir))

    def as_env(self) -> dict[str, str]:
        """Return the `MS_INFLUX_*` variables that make `from_env` rebuild this config (for child processes)."""
        env = {"MS_INFLUX_URL": self.url, "MS_INFLUX_DB": self.db}
        for key, name in (("user", "USER"), ("password", "PASSWORD"), ("token", "TOKEN")):
            if getattr(self, key) is not None:
                env["MS_INFLUX_" + name] = getattr(self, key)
        return env

    def _without_url_credentials(self) -> "InfluxConfig":
        # http://user:pass@host:port moves into user/password so the URL itself can be logged
        parts = urlsplit(self.url)
        if parts.username is None and parts.password is None:
            return self
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc += f":{parts.port}"
        return replace(self, url=parts._replace(netloc=netloc).geturl(),
                       user=self.user or unquote(parts.username or "") or None,
                       password=self.password or unquote(parts.password or "") or None)

    def __repr__(self) -> str:
        secret = lambda v: None if v is None else "***"  # noqa: E731
        return (f"InfluxConfig(url={self.url!r}, db={self.db!r}, user={self.user!r}, "
                f"password={secret(self.password)!r}, token={secret(self.token)!r}, "
                f"timeout={self.timeout!r}, spool_max_bytes={self.spool_max_bytes!r}, flush_s={self.flush_s!r})")

    __str__ = __repr__

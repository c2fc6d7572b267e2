"""Talk to any InfluxDB through its v1 HTTP API: line protocol, queries, a never-blocking writer.

The v1 API (`/write`, `/query` with InfluxQL, `/ping`) is served by InfluxDB 1.x and by
the v1-compatibility layer of 2.x and 3.x, so one small client covers all of them with
the standard library only. Three layers:

- `Point` and `encode_lines()`: pure line-protocol encoding, no I/O.
- `InfluxClient`: one request per call (`write`, `query`, `ping`, `create_database`,
  `create_retention_policy`); raises `InfluxError` with the server's message.
- `InfluxWriter`: what the job uses. `add()` only appends to a bounded in-memory queue
  and returns; a background thread sends batches; while the server does not take them
  the batches go to a bounded on-disk spool, which is backfilled (oldest first) as soon
  as it does again, also by the next run. A missing database or retention policy is
  created when the credentials allow it (as Telegraf does), else one error names it.

Configuration comes from `MS_INFLUX_*` environment variables (`InfluxConfig.from_env`;
without a URL, the project's own server with its admin credentials); credentials are
never logged and are redacted from every repr.
"""
from __future__ import annotations

import base64
import fcntl
import http.client
import json
import logging
import math
import numbers
import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Protocol, Sequence
from urllib.parse import quote, unquote, urlencode, urlsplit

from collector.background import lower_thread_priority
from collector.settings import default_state_dir
from collector.influx.credentials import credentials_path, load_credentials, recorded_url

log = logging.getLogger(__name__)

DEFAULT_PORT = 18086                     # the project's own server; 8086 is left to a system InfluxDB
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
DEFAULT_DB = "marketspread"
DEFAULT_SPOOL_BYTES = 256 << 20
MAX_BATCH = 5000                         # lines per /write request (InfluxDB's recommended batch)

# ---------------------------------------------------------------------------------------------
# configuration


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

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> "InfluxConfig":
        """Build from defaults, then `MS_INFLUX_*` variables, then non-None overrides.

        Without a URL it is the project's own server of the state folder (`MS_STATE_DIR`):
        the port it runs on and, unless credentials are given, its admin's from its 0600 file.
        """
        env = lambda k: environ.get("MS_INFLUX_" + k) or None  # noqa: E731 - empty means unset
        values: dict[str, Any] = {}
        for key, name in (("url", "URL"), ("db", "DB"), ("user", "USER"), ("password", "PASSWORD"),
                          ("token", "TOKEN")):
            if env(name) is not None:
                values[key] = env(name)
        for key, name, typ in (("timeout", "TIMEOUT", float), ("spool_max_bytes", "SPOOL_BYTES", int)):
            if env(name) is not None:
                try:
                    values[key] = typ(env(name))
                except ValueError:
                    raise ValueError(f"MS_INFLUX_{name}={env(name)!r} is not a valid {typ.__name__}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        config = cls(**values)._without_url_credentials()
        return config._with_project_credentials(environ, url_given="url" in values)

    def _with_project_credentials(self, environ: Mapping[str, str], url_given: bool) -> "InfluxConfig":
        # Without a URL, the project's own server of the state folder is meant: the port it
        # runs on, and (it runs with auth) its admin credentials from its 0600 file unless
        # some were given. They go to no other URL than that server's.
        state_dir = default_state_dir(environ)
        running = recorded_url(state_dir)
        config = self if url_given or not running else replace(self, url=running)
        if config.user or config.password or config.token or \
                config.url.rstrip("/") not in (running, DEFAULT_URL):
            return config
        creds = load_credentials(credentials_path(state_dir))
        return config if creds is None else replace(config, user=creds.user, password=creds.password)

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
                f"timeout={self.timeout!r}, spool_max_bytes={self.spool_max_bytes!r})")

    __str__ = __repr__


class InfluxError(RuntimeError):
    """A request to InfluxDB failed; `status` is the HTTP status (None: no answer at all)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def retryable(self) -> bool:
        """Whether sending the same request later may succeed (server down, overloaded, not ready).

        A missing retention policy is not: e.g. a server without `rollup` (no ensure_database)
        rejects the rollups while the 1-s points go on being written.
        """
        if self.policy_missing:
            return False
        return self.status is None or self.status >= 500 or self.status in (401, 403, 404, 408, 429)

    @property
    def database_missing(self) -> bool:
        """Whether the server answered that the database does not exist (1.x: HTTP 404)."""
        return self.status == 404 and "database not found" in str(self)

    @property
    def policy_missing(self) -> bool:
        """Whether the server answered that the retention policy written to does not exist."""
        return "retention policy not found" in str(self)

    @property
    def denied(self) -> bool:
        """Whether the server refused the credentials or their privileges (HTTP 401/403)."""
        return self.status in (401, 403)


# ---------------------------------------------------------------------------------------------
# line protocol (pure)


class Point(NamedTuple):
    """One line-protocol point; `time_ns` is nanoseconds since the epoch.

    `rp` names the retention policy the point belongs to (None: the one the writer is
    given, else the database's default), so one batch can carry 1-s points and rollups.

    >>> encode_lines([Point("cpu", {"host": "a b"}, {"v": 1, "ok": True}, 10)])
    b'cpu,host=a\\\\ b v=1i,ok=true 10\\n'
    """
    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, int | float | str | bool]
    time_ns: int
    rp: str | None = None


def split_by_rp(points: Sequence[Point], rp: str | None) -> dict[str | None, list[Point]]:
    """Group points by retention policy: their own `rp`, else `rp`; order kept within a group."""
    if all(p.rp is None or p.rp == rp for p in points):
        return {rp: list(points)}
    out: dict[str | None, list[Point]] = {}
    for p in points:
        out.setdefault(p.rp or rp, []).append(p)
    return out


_MEASUREMENT_ESC = str.maketrans({",": r"\,", " ": r"\ "})
_KEY_ESC = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ "})
_STR_ESC = str.maketrans({'"': r"\"", "\\": r"\\"})
_NEEDS_ESC = re.compile(r"[, =\\\n\r]")
_BAD_NAME = re.compile(r"[\n\r]|\\$")


def _name(s: str, table: dict, what: str) -> str:
    if not _NEEDS_ESC.search(s):
        if not s:
            raise ValueError(f"empty {what}")
        return s
    # a newline cannot be escaped, and a trailing backslash would escape the separator after it
    if not s or _BAD_NAME.search(s):
        raise ValueError(f"{what} {s!r} cannot be written in line protocol (empty, newline or trailing backslash)")
    return s.translate(table)


def _field_value(v: Any) -> str | None:
    if isinstance(v, str):
        return '"' + v.translate(_STR_ESC) + '"'
    if isinstance(v, bool):                              # before int: bool is an int
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):
        return f"{int(v)}i"
    if isinstance(v, numbers.Real):
        f = float(v)
        return repr(f) if math.isfinite(f) else None     # line protocol has no NaN or infinity
    raise ValueError(f"field value {v!r} of type {type(v).__name__} is not int, float, str or bool")


_HEADS: dict[tuple, str] = {}           # (measurement, tag items) -> escaped "measurement,tags"
_FIELD_KEYS: dict[str, str] = {}
_CACHE_MAX = 100_000                    # metrics repeat a few series; the bound guards odd callers


def _head(measurement: str, tags: Mapping[str, str]) -> str:
    key = (measurement, tuple(tags.items())) if tags else measurement
    head = _HEADS.get(key)
    if head is None:
        if measurement[:1] == "#":
            raise ValueError(f"measurement {measurement!r} would be read as a comment")
        head = _name(measurement, _MEASUREMENT_ESC, "measurement")
        # sorted tag keys: what InfluxDB stores anyway, and the cheapest form for it to parse
        for k, v in sorted(tags.items()):
            v = v if isinstance(v, str) else str(v)
            if v != "":
                head += f",{_name(k, _KEY_ESC, 'tag key')}={_name(v, _KEY_ESC, 'tag value')}"
        if len(_HEADS) >= _CACHE_MAX:
            _HEADS.clear()
        _HEADS[key] = head
    return head


def _field_key(k: str) -> str:
    e = _FIELD_KEYS.get(k)
    if e is None:
        e = _name(k, _KEY_ESC, "field key")
        if len(_FIELD_KEYS) >= _CACHE_MAX:
            _FIELD_KEYS.clear()
        _FIELD_KEYS[k] = e
    return e


def encode_point(p: Point) -> str | None:
    """Return one point as a line (no newline), or None if it has no finite field left."""
    fields = []
    for k, v in p.fields.items():
        t = type(v)
        if t is float:                                    # the common cases first, exact types
            s = repr(v) if v - v == 0 else None           # false for NaN and infinities
        elif t is int:
            s = f"{v}i"
        else:
            s = _field_value(v)
        if s is not None:
            fields.append(f"{_field_key(k)}={s}")
    if not fields:
        return None
    return f"{_head(p.measurement, p.tags)} {','.join(fields)} {int(p.time_ns)}"


def encode_lines(points: Iterable[Point]) -> bytes:
    """Encode points as newline-terminated UTF-8 line protocol.

    Tags with an empty value are left out (InfluxDB reads a missing tag as ""); non-finite
    float fields are left out, and so is a point left without fields. Raises ValueError for
    names line protocol cannot carry (empty, a newline, a trailing backslash).
    """
    lines = [line for line in map(encode_point, points) if line is not None]
    return ("\n".join(lines) + "\n").encode() if lines else b""


def quote_ident(name: str) -> str:
    """Quote an InfluxQL identifier (database, retention policy, measurement)."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


_DURATION = re.compile(r"^(INF|inf|(\d+(ns|u|µ|ms|s|m|h|d|w))+)$")


# ---------------------------------------------------------------------------------------------
# client


class Series(NamedTuple):
    """One series of a query result: rows of `values` in `columns` order, times in ns."""
    name: str
    tags: dict[str, str]
    columns: list[str]
    values: list[list[Any]]

    def rows(self) -> list[dict[str, Any]]:
        """Return the values as one dict per row."""
        return [dict(zip(self.columns, v)) for v in self.values]


class InfluxClient:
    """Blocking client of the InfluxDB v1 HTTP API; one keep-alive connection per thread.

    >>> client = InfluxClient(InfluxConfig.from_env())
    >>> client.write([Point("m", {"k": "v"}, {"x": 1.5}, time.time_ns())])
    >>> client.query("SELECT count(x) FROM m WHERE k = $k", params={"k": "v"})
    """

    def __init__(self, config: InfluxConfig | None = None):
        self.config = config or InfluxConfig.from_env()
        parts = urlsplit(self.config.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"InfluxDB URL {self.config.url!r} is not http(s)://host[:port][/path]")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._base = parts.path.rstrip("/")
        self._headers = {"Accept": "application/json"}
        if self.config.token:
            self._headers["Authorization"] = f"Token {self.config.token}"
        elif self.config.user or self.config.password:
            cred = f"{self.config.user or ''}:{self.config.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(cred).decode()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"InfluxClient({self.config!r})"

    @property
    def url(self) -> str:
        """The server's URL (never with credentials)."""
        return self.config.url

    # -- requests

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._local.conn = cls(self._host, self._port, timeout=self.config.timeout)
        return conn

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _request(self, method: str, path: str, query: Mapping[str, str], body: bytes | None = None,
                 content_type: str | None = None) -> tuple[int, dict[str, str], bytes]:
        target = self._base + path + ("?" + urlencode(query) if query else "")
        headers = dict(self._headers)
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                # a keep-alive connection the server closed while idle: one fresh attempt.
                # Writes are idempotent in InfluxDB (same series and time overwrite), so
                # resending after an ambiguous failure cannot double a point.
                self.close()
                if attempt:
                    raise InfluxError(f"{method} {self.url}{path}: {type(e).__name__}: {e}") from None
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise InfluxError(f"{method} {self.url}{path}: {type(e).__name__}: {e}") from None
        raise AssertionError("unreachable")

    @staticmethod
    def _error(status: int, data: bytes, what: str) -> InfluxError:
        text = data.decode("utf-8", "replace").strip()
        try:
            text = json.loads(text).get("error") or json.loads(text).get("message") or text
        except (ValueError, AttributeError):
            pass
        return InfluxError(f"{what}: HTTP {status}: {text[:500]}", status)

    def ping(self) -> bool:
        """Return whether the server answers `/ping`."""
        try:
            status, _, _ = self._request("GET", "/ping", {})
        except InfluxError:
            return False
        return status == 204 or status == 200

    def version(self) -> str | None:
        """Return the server's version (`X-Influxdb-Version` of `/ping`), None if unreachable."""
        try:
            status, headers, _ = self._request("GET", "/ping", {})
        except InfluxError:
            return None
        return headers.get("x-influxdb-version") if status in (200, 204) else None

    def write_lines(self, body: bytes, rp: str | None = None, db: str | None = None) -> None:
        """POST already encoded line protocol (one request; the caller bounds its size)."""
        if not body:
            return
        q = {"db": db or self.config.db, "precision": "ns"}
        if rp:
            q["rp"] = rp
        status, _, data = self._request("POST", "/write", q, body, "text/plain; charset=utf-8")
        if status not in (200, 204):
            raise self._error(status, data, f"write to {q['db']}")

    def write(self, points: Iterable[Point], rp: str | None = None, db: str | None = None) -> int:
        """Write points in requests of up to 5000 lines; return the number of lines sent."""
        points = list(points)
        groups = split_by_rp(points, rp)
        if len(groups) > 1 or rp not in groups:
            return sum(self.write(g, r, db) for r, g in groups.items())
        n, batch = 0, []
        for p in points:
            batch.append(p)
            if len(batch) >= MAX_BATCH:
                body = encode_lines(batch)
                self.write_lines(body, rp, db)
                n, batch = n + body.count(b"\n"), []
        if batch:
            body = encode_lines(batch)
            self.write_lines(body, rp, db)
            n += body.count(b"\n")
        return n

    def query(self, influxql: str, params: Mapping[str, Any] | None = None, db: str | None = None,
              epoch: str = "ns") -> list[Series]:
        """Run InfluxQL and return every series of every statement.

        `params` binds `$name` placeholders server-side (InfluxDB 1.x `params`), so values
        from users are never spliced into the query text.
        """
        form = {"q": influxql, "db": db or self.config.db, "epoch": epoch}
        if params:
            form["params"] = json.dumps(dict(params))
        status, _, data = self._request("POST", "/query", {}, urlencode(form).encode(),
                                        "application/x-www-form-urlencoded")
        if status != 200:
            raise self._error(status, data, "query")
        try:
            doc = json.loads(data)
        except ValueError:
            raise InfluxError(f"query: not JSON: {data[:200]!r}", status) from None
        if doc.get("error"):
            raise InfluxError(f"query: {doc['error']}", status)
        out = []
        for result in doc.get("results", []):
            if result.get("error"):
                raise InfluxError(f"query: {result['error']}", status)
            for s in result.get("series", []):
                out.append(Series(s.get("name", ""), s.get("tags") or {}, s.get("columns") or [],
                                  s.get("values") or []))
        return out

    def create_database(self, name: str | None = None) -> None:
        """Create a database (no-op if it exists)."""
        self.query(f"CREATE DATABASE {quote_ident(name or self.config.db)}")

    def create_retention_policy(self, name: str, duration: str, *, shard_duration: str | None = None,
                                default: bool = False, replication: int = 1, db: str | None = None,
                                alter: bool = False) -> None:
        """Create (or with `alter=True` change) a retention policy, e.g. ("raw", "7d", default=True)."""
        for d in (duration, shard_duration):
            if d is not None and not _DURATION.match(d):
                raise ValueError(f"{d!r} is not an InfluxQL duration like 7d, 90d, 1h or INF")
        q = (f"{'ALTER' if alter else 'CREATE'} RETENTION POLICY {quote_ident(name)} ON "
             f"{quote_ident(db or self.config.db)} DURATION {duration} REPLICATION {int(replication)}")
        if shard_duration:
            q += f" SHARD DURATION {shard_duration}"
        if default:
            q += " DEFAULT"
        self.query(q)


class RetentionPolicy(NamedTuple):
    """A retention policy of the metrics database."""
    name: str
    duration: str
    shard_duration: str
    default: bool
    holds: str


RP_RAW = "raw"
RP_ROLLUP = "rollup"
RETENTION_POLICIES = (
    RetentionPolicy(RP_RAW, "7d", "1d", True, "1-second points written live (the default policy)"),
    RetentionPolicy(RP_ROLLUP, "90d", "7d", False, "10 s .. 1 h latency rollups (Point.rp='rollup')"),
)


def setup_statements(db: str, policies: Sequence[RetentionPolicy] = RETENTION_POLICIES) -> list[str]:
    """Return the InfluxQL an admin runs to create `db` with the project's retention policies."""
    return [f"CREATE DATABASE {quote_ident(db)}"] + [
        f"CREATE RETENTION POLICY {quote_ident(rp.name)} ON {quote_ident(db)} DURATION {rp.duration} "
        f"REPLICATION 1 SHARD DURATION {rp.shard_duration}{' DEFAULT' if rp.default else ''}"
        for rp in policies]


def describe_policies(policies: Sequence[RetentionPolicy] = RETENTION_POLICIES) -> str:
    """Return e.g. "raw (7d, default), rollup (90d)" for a message to the user."""
    return ", ".join(f"{p.name} ({p.duration}{', default' if p.default else ''})" for p in policies)


def ensure_policy(client: InfluxClient, name: str, default: bool = False) -> bool:
    """Create the project's retention policy `name` if it is one; return whether."""
    for rp in RETENTION_POLICIES:
        if rp.name == name:
            client.create_retention_policy(rp.name, rp.duration, shard_duration=rp.shard_duration, default=default)
            return True
    return False


def ensure_database(client: InfluxClient, policies: Sequence[RetentionPolicy] = RETENTION_POLICIES) -> None:
    """Create the client's database and its retention policies, or bring them to `policies` (InfluxDB 1.x)."""
    client.create_database()
    for rp in policies:
        kw = dict(shard_duration=rp.shard_duration, default=rp.default)
        try:
            client.create_retention_policy(rp.name, rp.duration, **kw)
        except InfluxError as e:
            if "already exists" not in str(e):
                raise
            client.create_retention_policy(rp.name, rp.duration, alter=True, **kw)


def describe_failure(e: InfluxError, config: InfluxConfig) -> str:
    """Say in one line why a request failed: no answer at all, refused credentials, or the server's reason."""
    if e.status is None:
        return f"InfluxDB at {config.url} is unreachable ({e})"
    if e.denied:
        who = "the token (MS_INFLUX_TOKEN)" if config.token else (
            f"user {config.user!r} (MS_INFLUX_USER/MS_INFLUX_PASSWORD)" if config.user else "no credentials")
        return (f"InfluxDB at {config.url} refused {who} ({e}); it needs a user allowed to write to "
                f"database {config.db!r}")
    return f"InfluxDB at {config.url} answered but did not take the batch ({e})"


# ---------------------------------------------------------------------------------------------
# spool: bounded on-disk store of encoded batches the server did not take yet


class _SpoolFile(NamedTuple):
    path: Path
    seq: int
    points: int
    nbytes: int
    rp: str | None


_SPOOL_NAME = re.compile(r"^(\d{16})\.(\d+)\.([^.]*)\.lp$")
_DEFAULT_RP = "@"


class _Spool:
    """Folder of line-protocol files named `<seq>.<points>.<rp>.lp`, oldest = lowest seq.

    Bounded in bytes: past `max_bytes` the oldest files are deleted and their points
    counted as dropped. Files are written to a temporary name and renamed, so a crash
    leaves whole files only. One writer per folder (an exclusive lock file).
    """

    def __init__(self, path: Path, max_bytes: int):
        self.path = Path(path)
        self.max_bytes = max(0, int(max_bytes))
        self.chunk_bytes = max(1, min(4 << 20, self.max_bytes // 16))
        self._files: deque[_SpoolFile] = deque()
        self._inflight: _SpoolFile | None = None
        self._lock = threading.Lock()
        self._lockfd: int | None = None
        self._seq = 0
        self.nbytes = 0
        self.npoints = 0

    def open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"metrics spool {self.path} is in use by another writer") from None
        self._lockfd = fd
        found = []
        for f in self.path.iterdir():
            m = _SPOOL_NAME.match(f.name)
            if m:
                rp = unquote(m[3])
                found.append(_SpoolFile(f, int(m[1]), int(m[2]), f.stat().st_size,
                                        None if rp == _DEFAULT_RP else rp))
            elif f.name.endswith(".tmp"):
                f.unlink(missing_ok=True)                # a write cut short by a crash
        found.sort(key=lambda s: s.seq)
        with self._lock:
            self._files.extend(found)
            self._seq = found[-1].seq + 1 if found else 0
            self.nbytes = sum(s.nbytes for s in found)
            self.npoints = sum(s.points for s in found)

    def close(self) -> None:
        if self._lockfd is not None:
            os.close(self._lockfd)
            self._lockfd = None

    def __len__(self) -> int:
        return len(self._files)

    def append(self, body: bytes, rp: str | None) -> tuple[int, int]:
        """Store encoded lines; return (points stored, points dropped to stay in bounds)."""
        stored = dropped = 0
        pos = 0
        while pos < len(body):
            end = pos + self.chunk_bytes
            if end >= len(body):
                end = len(body)
            else:
                nl = body.rfind(b"\n", pos, end)
                end = (nl if nl >= pos else body.index(b"\n", end)) + 1
            chunk = body[pos:end]
            pos = end
            n = chunk.count(b"\n")
            with self._lock:
                seq = self._seq
                self._seq += 1
                name = f"{seq:016d}.{n}.{quote(rp or _DEFAULT_RP, safe='')}.lp"
                tmp = self.path / (name + ".tmp")
                tmp.write_bytes(chunk)
                os.replace(tmp, self.path / name)
                self._files.append(_SpoolFile(self.path / name, seq, n, len(chunk), rp))
                self.nbytes += len(chunk)
                self.npoints += n
                stored += n
                dropped += self._evict()
        return stored, dropped

    def _evict(self) -> int:
        dropped = 0
        while self.nbytes > self.max_bytes and self._files:
            idx = 1 if self._files[0] is self._inflight else 0
            if idx >= len(self._files):
                break
            f = self._files[idx]
            del self._files[idx]
            f.path.unlink(missing_ok=True)
            self.nbytes -= f.nbytes
            self.npoints -= f.points
            dropped += f.points
        return dropped

    def claim_oldest(self) -> tuple[_SpoolFile, bytes] | None:
        """Return the oldest file and its bytes, kept from eviction until `release`."""
        with self._lock:
            if not self._files:
                return None
            f = self._inflight = self._files[0]
        try:
            return f, f.path.read_bytes()
        except OSError as e:                              # deleted by hand: forget it
            log.warning("metrics spool file %s unreadable (%s); skipped", f.path, e)
            self.release(f, done=True)
            return None

    def release(self, f: _SpoolFile, done: bool) -> None:
        """End a claim; `done` deletes the file (its points reached the server)."""
        with self._lock:
            self._inflight = None
            if done:
                try:
                    self._files.remove(f)
                except ValueError:
                    return
                f.path.unlink(missing_ok=True)
                self.nbytes -= f.nbytes
                self.npoints -= f.points


# ---------------------------------------------------------------------------------------------
# writer


class WriterStats(NamedTuple):
    """Counters of an `InfluxWriter` since it was created.

    Every point added ends up in exactly one of: written (directly), spooled (on disk;
    later backfilled, dropped past the bound, or still there = `spool_points`), dropped
    before reaching the disk, rejected by the server (HTTP 400: malformed, type conflict),
    or still in the queue.
    """
    points_added: int
    points_written: int
    points_spooled: int
    points_backfilled: int
    points_dropped: int
    points_rejected: int
    write_errors: int
    last_error: str | None
    spool_bytes: int
    spool_points: int
    queue_len: int
    server_up: bool


class PointSink(Protocol):
    """What a metrics producer needs from a writer (`InfluxWriter`, `collector.testing.MemoryWriter`)."""

    def add(self, points: Point | Iterable[Point], rp: str | None = None) -> int: ...

    def delivered(self) -> int: ...

    def flush(self, timeout: float = 10.0) -> bool: ...

    def close(self, timeout: float = 10.0) -> bool: ...

    def stats(self) -> WriterStats: ...


class InfluxWriter:
    """Never-blocking batched writer with a bounded disk spool for outages.

    `add()` appends to an in-memory queue bounded at `max_queue` points and returns; when
    the queue is full its oldest points are encoded to the spool instead (memory keeps
    the newest), and past the spool's bound the oldest points are dropped and counted.
    A background thread
    sends a batch when `batch_size` points are queued or `interval` seconds after the
    first one. A batch the server does not take (unreachable, 5xx) goes to the spool;
    further batches are spooled without trying until the retry time (exponential
    backoff), then the oldest spool file is sent first. The spool is backfilled oldest
    first, one file per round between live batches, so fresh points stay fresh.
    `close()` flushes; what cannot be sent stays in the spool and is backfilled by the
    next writer on the same folder.

    >>> w = InfluxWriter(InfluxClient(), state_dir / "metrics-spool").start()
    >>> w.add([Point("step", {"run": "r1"}, {"ms": 12.5}, time.time_ns())])
    >>> w.close()
    """

    def __init__(self, client: InfluxClient, spool_dir: Path | str, *,
                 max_spool_bytes: int | None = None, max_queue: int = 100_000,
                 batch_size: int = MAX_BATCH, interval: float = 0.2,
                 backoff: tuple[float, float] = (0.25, 5.0), background: bool = False):
        self.client = client
        self.background = background      # send at a lower CPU priority (collector/background.py)
        self.spool_dir = Path(spool_dir)
        self._spool = _Spool(self.spool_dir, client.config.spool_max_bytes if max_spool_bytes is None
                             else max_spool_bytes)
        self.max_queue = max(1, int(max_queue))
        self.batch_size = max(1, min(int(batch_size), MAX_BATCH))
        self.interval = float(interval)
        self._backoff_min, self._backoff_max = backoff
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # each entry: (retention policy, points, ticket of its first point)
        self._queue: deque[tuple[str | None, list[Point], int]] = deque()
        self._queued = 0
        self._busy = 0
        self._busy_first = 0                    # ticket of the oldest point being sent
        self._spilling = 0
        self._spill_firsts: list[int] = []      # tickets of the oldest point of each spill under way
        self._first_at = 0.0
        self._flushers = 0
        self._stop = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._up = True
        self._retry_at = 0.0
        self._backoff = self._backoff_min
        self._drop_warned = False
        self._c = dict(added=0, written=0, spooled=0, backfilled=0, dropped=0, rejected=0, errors=0)
        self._last_error: str | None = None

    def __repr__(self) -> str:
        return f"InfluxWriter({self.client.url!r}, db={self.client.config.db!r}, spool={str(self.spool_dir)!r})"

    # -- lifecycle

    def start(self) -> "InfluxWriter":
        """Open the spool (backfilling what a previous run left) and start the sender thread."""
        if self._thread is not None:
            return self
        self._spool.open()
        if len(self._spool):
            log.info("metrics spool %s holds %d points (%d bytes) from before; backfilling",
                     self.spool_dir, self._spool.npoints, self._spool.nbytes)
        self._thread = threading.Thread(target=self._run, name="influx-writer", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> "InfluxWriter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, points: Point | Iterable[Point], rp: str | None = None) -> int:
        """Queue points for writing (to retention policy `rp`); never blocks on the network.

        Returns the ticket of the last point: once `delivered()` reaches it, every point
        added so far is in InfluxDB or the disk spool (or was rejected or dropped, counted).
        Points are encoded later, on the sender thread: do not change their dicts afterwards.
        """
        pts = [points] if isinstance(points, Point) else list(points)
        if not pts:
            with self._lock:
                return self._c["added"]
        groups = split_by_rp(pts, rp)
        if len(groups) > 1 or rp not in groups:
            ticket = 0
            for r, g in groups.items():
                ticket = self.add(g, r)
            return ticket
        spill: list[tuple[str | None, list[Point], int]] = []      # oldest first
        with self._lock:
            first = self._c["added"] + 1
            self._c["added"] += len(pts)
            ticket = self._c["added"]
            if self._closed:
                spill.append((rp, pts, first))
            else:
                newest_spill = None
                if len(pts) > self.max_queue:
                    cut = len(pts) - self.max_queue
                    newest_spill, pts, first = (rp, pts[:cut], first), pts[cut:], first + cut
                # full queue (sender behind, or server slow): the oldest queued points go to
                # disk, so memory keeps the newest and the spool stays roughly in time order
                excess = self._queued + len(pts) - self.max_queue
                while excess > 0:
                    qrp, qpts, qfirst = self._queue[0]
                    if len(qpts) > excess:
                        self._queue[0] = (qrp, qpts[excess:], qfirst + excess)
                        qpts = qpts[:excess]
                    else:
                        self._queue.popleft()
                    spill.append((qrp, qpts, qfirst))
                    self._queued -= len(qpts)
                    excess -= len(qpts)
                if newest_spill:
                    spill.append(newest_spill)
                if not self._queued:
                    self._first_at = time.monotonic()
                self._queue.append((rp, pts, first))
                self._queued += len(pts)
                if self._queued >= self.batch_size or self._queued == len(pts):
                    self._cond.notify()
            if not spill:
                return ticket
            spill_first = min(f for _, _, f in spill)
            self._spilling += 1                           # flush() waits for it
            self._spill_firsts.append(spill_first)
        try:
            for srp, spts, _ in spill:
                for i in range(0, len(spts), self.batch_size):
                    self._to_spool(spts[i:i + self.batch_size], srp, encoded=None)
        finally:
            with self._cond:
                self._spilling -= 1
                self._spill_firsts.remove(spill_first)
                self._cond.notify_all()
        return ticket

    def delivered(self) -> int:
        """Return the newest ticket up to which every added point has left memory.

        Such points are in InfluxDB or in the disk spool (which outlives a crash of this
        process), or were rejected or dropped and counted. What a caller must not lose on
        a crash it keeps until this reaches the ticket `add()` gave it.
        """
        with self._lock:
            oldest = [self._queue[0][2]] if self._queue else []
            if self._busy:
                oldest.append(self._busy_first)
            oldest += self._spill_firsts
            return min(oldest) - 1 if oldest else self._c["added"]

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything queued and backfill the spool; return False if time ran out first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._thread is None or self._stop:
                return self._queued == 0 and not len(self._spool)
            self._flushers += 1
            self._retry_at = 0.0                          # a flush retries a down server now
            errors = self._c["errors"]
            self._cond.notify_all()
            try:
                while self._queued or self._busy or self._spilling or len(self._spool):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    if (self._c["errors"] > errors + 1 and not self._queued and not self._busy
                            and not self._spilling):
                        return False                      # server down: all is spooled, no use waiting
                    self._cond.wait(min(left, 0.05))
                return True
            finally:
                self._flushers -= 1

    def close(self, timeout: float = 10.0) -> bool:
        """Flush for up to `timeout` s, stop the thread, spool what is left; True if nothing is left."""
        if self._closed:
            return not len(self._spool)
        ok = self.flush(timeout) if self._thread is not None else False
        if self._thread is None and self._queued:
            self._spool.open()                            # never started: keep the points for the next run
        with self._cond:
            self._stop = True
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(1.0, timeout))
            if self._thread.is_alive():
                log.warning("metrics writer: sender still busy after %.1f s (slow server?); leaving it", timeout)
        with self._lock:
            left = list(self._queue)
            self._queue.clear()
            self._queued = 0
        for rp, pts, _ in left:
            for i in range(0, len(pts), self.batch_size):
                self._to_spool(pts[i:i + self.batch_size], rp, encoded=None)
        if len(self._spool):
            log.warning("metrics writer closed with %d points (%d bytes) in %s; the next run backfills them",
                        self._spool.npoints, self._spool.nbytes, self.spool_dir)
        self._spool.close()
        self.client.close()
        return ok and not len(self._spool)

    def stats(self) -> WriterStats:
        """Return the counters (cheap: safe to call every second)."""
        with self._lock:
            c = self._c
            return WriterStats(c["added"], c["written"], c["spooled"], c["backfilled"], c["dropped"],
                               c["rejected"], c["errors"], self._last_error, self._spool.nbytes,
                               self._spool.npoints, self._queued, self._up)

    # -- sender thread

    def _take(self) -> list[tuple[str | None, list[Point]]]:
        # called with the lock held: up to batch_size points, split per retention policy
        out: dict[str | None, list[Point]] = {}
        n = 0
        if self._queue:
            self._busy_first = self._queue[0][2]
        while self._queue and n < self.batch_size:
            rp, pts, first = self._queue[0]
            k = self.batch_size - n
            if len(pts) > k:
                self._queue[0] = (rp, pts[k:], first + k)
                pts = pts[:k]
            else:
                self._queue.popleft()
            out.setdefault(rp, []).extend(pts)
            n += len(pts)
        self._queued -= n
        self._busy = n
        if self._queued:
            self._first_at = time.monotonic()
        return list(out.items())

    def _run(self) -> None:
        if self.background:
            lower_thread_priority()
        while True:
            try:
                with self._cond:
                    batch = self._wait_for_work()
                if batch is None:
                    self.client.close()                   # this thread's connection
                    return
                for rp, pts in batch:
                    self._send_live(rp, pts)
                if len(self._spool) and self._may_try():
                    self._backfill_one()
            except Exception:                             # never let the sender die silently
                log.exception("metrics writer: unexpected error; continuing")
                time.sleep(0.1)
            finally:
                with self._cond:
                    self._busy = 0
                    self._cond.notify_all()

    def _wait_for_work(self) -> list | None:
        while True:
            if self._stop:
                return None
            now = time.monotonic()
            due = self._queued >= self.batch_size or (
                self._queued and (self._flushers or now >= self._first_at + self.interval))
            spool_due = len(self._spool) and now >= self._retry_at
            if due or spool_due:
                return self._take() if due else []
            waits = []
            if self._queued:
                waits.append(self._first_at + self.interval - now)
            if len(self._spool):
                waits.append(self._retry_at - now)
            self._cond.wait(max(0.001, min(waits)) if waits else None)

    def _may_try(self) -> bool:
        return self._up or time.monotonic() >= self._retry_at

    def _encode(self, pts: list[Point]) -> tuple[bytes, int]:
        """Encode a batch; points line protocol cannot carry are counted as rejected."""
        try:
            body = encode_lines(pts)
            return body, len(pts)
        except (ValueError, TypeError, AttributeError):
            lines, bad, err = [], 0, ""
            for p in pts:
                try:
                    line = encode_point(p)
                except (ValueError, TypeError, AttributeError) as e:
                    bad, err = bad + 1, str(e)
                    continue
                if line is not None:
                    lines.append(line)
            with self._lock:
                self._c["rejected"] += bad
                self._last_error = f"unencodable point: {err}"
            log.warning("metrics writer: %d points cannot be encoded (%s); rejected", bad, err)
            return ("\n".join(lines) + "\n").encode() if lines else b"", len(pts) - bad

    def _write(self, body: bytes, rp: str | None) -> None:
        """Send one batch; if its database or retention policy is missing, create it (when allowed) and resend."""
        try:
            self.client.write_lines(body, rp)
        except InfluxError as e:
            if not (e.database_missing or e.policy_missing):
                raise
            self._set_up(e, rp)
            self.client.write_lines(body, rp)

    def _set_up(self, e: InfluxError, rp: str | None) -> None:
        # Telegraf's way: a missing database is created with the project's policies. Raise
        # one clear error naming what to create when the credentials may not do it.
        db, url = self.client.config.db, self.client.url
        try:
            if e.database_missing:
                ensure_database(self.client)
                what = f"database {db!r} with retention policies {describe_policies()}"
            # without `rp` the database has no default policy at all (a server with
            # retention-autocreate off): ours becomes it; a user's own default is never changed
            elif ensure_policy(self.client, rp or RP_RAW, default=not rp):
                what = f"retention policy {rp or RP_RAW!r} on database {db!r}"
            else:
                raise e
        except InfluxError as err:
            if err is e:
                raise
            todo = setup_statements(db) if e.database_missing else [
                s for s in setup_statements(db) if f"POLICY {quote_ident(rp or RP_RAW)} " in s]
            raise InfluxError(
                f"{e}; these credentials cannot create it ({err}): an InfluxDB admin runs "
                f"`marketspread influxdb init` with MS_INFLUX_URL={url} MS_INFLUX_DB={db}, or: "
                + "; ".join(todo), e.status) from None
        log.warning("metrics writer: created %s on %s", what, url)

    def _send_live(self, rp: str | None, pts: list[Point]) -> None:
        body, n = self._encode(pts)
        skipped = n - body.count(b"\n")                   # points without a finite field
        if skipped:
            with self._lock:
                self._c["rejected"] += skipped
        if not body:
            return
        if not self._may_try():
            self._to_spool(None, rp, encoded=body)
            return
        t0 = time.perf_counter()
        try:
            self._write(body, rp)
        except InfluxError as e:
            if e.retryable:
                self._went_down(e)
                self._to_spool(None, rp, encoded=body)
            else:
                self._rejected(e, body.count(b"\n"))
            return
        self._went_up()
        n = body.count(b"\n")
        with self._lock:
            self._c["written"] += n
        log.debug("metrics writer: wrote %d points (rp=%s, %d bytes) in %.1f ms",
                  n, rp or "default", len(body), (time.perf_counter() - t0) * 1e3)

    def _backfill_one(self) -> None:
        claim = self._spool.claim_oldest()
        if claim is None:
            return
        f, body = claim
        try:
            self._write(body, f.rp)
        except InfluxError as e:
            if e.retryable:
                self._spool.release(f, done=False)
                self._went_down(e)
            else:
                self._spool.release(f, done=True)
                self._rejected(e, f.points)
            return
        self._spool.release(f, done=True)
        self._went_up()
        with self._lock:
            self._c["backfilled"] += f.points
        log.debug("metrics writer: backfilled %d points (rp=%s) from %s; %d points left in spool",
                  f.points, f.rp or "default", f.path.name, self._spool.npoints)

    def _to_spool(self, pts: list[Point] | None, rp: str | None, encoded: bytes | None) -> None:
        if encoded is None:
            encoded, _ = self._encode(pts or [])
        if not encoded:
            return
        try:
            stored, dropped = self._spool.append(encoded, rp)
        except OSError as e:
            n = encoded.count(b"\n")
            with self._lock:
                self._c["dropped"] += n
                self._last_error = f"spool write failed: {e}"
            log.warning("metrics writer: cannot write spool %s (%s); %d points dropped", self.spool_dir, e, n)
            return
        with self._lock:
            self._c["spooled"] += stored
            self._c["dropped"] += dropped
            warn = dropped and not self._drop_warned
            if warn:
                self._drop_warned = True
        if warn:
            log.warning("metrics writer: spool %s is full (%d bytes); dropping the oldest points",
                        self.spool_dir, self._spool.max_bytes)

    def _went_down(self, e: InfluxError) -> None:
        with self._lock:
            self._c["errors"] += 1
            self._last_error = str(e)
            was_up, self._up = self._up, False
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, self._backoff_max)
        if was_up:
            log.warning("metrics writer: %s; spooling to %s and retrying", describe_failure(e, self.client.config),
                        self.spool_dir)

    def _went_up(self) -> None:
        if self._up:
            return
        with self._lock:
            self._up = True
            self._backoff = self._backoff_min
            self._drop_warned = False
        log.warning("metrics writer: InfluxDB at %s takes writes again; backfilling %d spooled points",
                    self.client.url, self._spool.npoints)

    def _rejected(self, e: InfluxError, n: int) -> None:
        with self._lock:
            self._c["errors"] += 1
            self._c["rejected"] += n
            again, self._last_error = self._last_error == str(e), str(e)
        if not again:                     # one line per new reason, not one per batch
            log.warning("metrics writer: server rejected a batch of %d points: %s", n, e)

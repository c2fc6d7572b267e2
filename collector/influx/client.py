"""Blocking client of the InfluxDB v1 HTTP API (`/write`, `/query`, `/ping`), standard library only.

The v1 API is served by InfluxDB 1.x and by the v1-compatibility layer of 2.x and 3.x,
so one small client covers all of them. Every call is one request; a failure raises
`InfluxError` with the server's message.
"""
from __future__ import annotations

import base64
import http.client
import json
import re
import threading
from typing import Any, Iterable, Mapping, NamedTuple
from urllib.parse import urlencode, urlsplit

from collector.influx.config import InfluxConfig
from collector.influx.credentials import running_url
from collector.influx.lineproto import Point, encode_lines, split_by_rp
from collector.metrics.backend import MetricsError

MAX_BATCH = 5000                         # lines per /write request (InfluxDB's recommended batch)


class InfluxError(MetricsError):
    """A request to InfluxDB failed; `status` is the HTTP status (None: no answer at all)."""

    backend = "InfluxDB"

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



def quote_ident(name: str) -> str:
    """Quote an InfluxQL identifier (database, retention policy, measurement)."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


_DURATION = re.compile(r"^(INF|inf|(\d+(ns|u|µ|ms|s|m|h|d|w))+)$")




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

    def __init__(self, config: InfluxConfig):
        self.config = config
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
            self._check_owner()
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._local.conn = cls(self._host, self._port, timeout=self.config.timeout)
        return conn

    def _check_owner(self) -> None:
        """Refuse a new connection for the state folder's credentials unless its own server runs there now.

        Checked at each new connection, not only at the process' start: a dashboard left
        running while its server is stopped must not hand the password to whatever takes
        the port next. A kept-alive connection is to the server it was opened to.
        """
        owner = self.config.owner
        if owner is not None and running_url(owner) != self.config.url.rstrip("/"):
            raise InfluxError(f"the InfluxDB of {owner} is not running at {self.url}: its credentials are "
                              "kept back (marketspread influxdb start)")

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

"""gzip for the dashboard's responses: a first visit is ~6.5 MB of JavaScript uncompressed.

Dash serves its component bundles (plotly.min.js alone is 4.8 MB) from memory with
fingerprinted URLs and long cache lifetimes, but uncompressed; callback answers are JSON.
Both compress 3-6x. A static bundle is compressed once and kept (`STATIC_CACHE` entries,
keyed by URL and body size); a callback answer is compressed on the fly at a fast level.
Only `gzip` is offered: every browser accepts it, and it needs nothing beyond the stdlib.
"""
from __future__ import annotations

import gzip
import threading
from collections import OrderedDict

from flask import Flask, Response, request

MIN_BYTES = 1024
STATIC_PREFIXES = ("/_dash-component-suites/", "/assets/")
STATIC_CACHE = 64              # compressed bundles kept (a dashboard serves ~20)
DYNAMIC_LEVEL = 5              # callback JSON: ~3x smaller at a few ms per 100 KB
STATIC_LEVEL = 9               # once per bundle and process
_TYPES = ("text/", "application/json", "application/javascript", "application/x-javascript",
          "image/svg+xml")


def accepts_gzip(header: str | None) -> bool:
    """True if an Accept-Encoding header admits gzip (a q=0 refuses it)."""
    for part in (header or "").lower().split(","):
        name, _, params = part.strip().partition(";")
        if name.strip() in ("gzip", "*"):
            q = params.strip()
            return not (q.startswith("q=") and float(q[2:] or 0) == 0)
    return False


def compressible(response: Response) -> bool:
    """True for a whole 200 response of a text-like type, big enough and not encoded yet."""
    return (response.status_code == 200 and not response.direct_passthrough and not response.is_streamed
            and "Content-Encoding" not in response.headers
            and response.mimetype is not None and response.mimetype.startswith(_TYPES)
            and (response.content_length or 0) >= MIN_BYTES)


class _StaticCache:
    """Compressed static bodies, least recently used dropped first."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int], body: bytes) -> bytes:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        packed = gzip.compress(body, STATIC_LEVEL, mtime=0)
        with self._lock:
            self._items[key] = packed
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return packed


def install(server: Flask) -> None:
    """Compress every eligible response of `server` for clients that accept gzip."""
    cache = _StaticCache(STATIC_CACHE)

    @server.after_request
    def _gzip(response: Response) -> Response:
        response.vary.add("Accept-Encoding")
        if not accepts_gzip(request.headers.get("Accept-Encoding")) or not compressible(response):
            return response
        body = response.get_data()
        if request.path.startswith(STATIC_PREFIXES):
            packed = cache.get((request.full_path, len(body)), body)
        else:
            packed = gzip.compress(body, DYNAMIC_LEVEL, mtime=0)
        if len(packed) >= len(body):
            return response
        response.set_data(packed)
        response.headers["Content-Encoding"] = "gzip"
        return response

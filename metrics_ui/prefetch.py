"""A page's layout computed as its address is served, ready when the browser asks for it.

A Dash page arrives in two steps: the page shell (HTML and scripts), then, once the browser has
evaluated Dash's scripts (0.2-1 s), the router's callback asking for the page's layout, which a
job page computes in 60-300 ms (its InfluxDB queries and figures). The server knows the page
from the shell's own request, so it starts that layout then, on a thread, while the browser
is still busy with the scripts; the router's callback takes the result if it is for the same
page, address and query and at most `MAX_AGE_S` old, and computes it as before otherwise (and
when the prefetch failed). A result is used once. At most `MAX_PENDING` are kept: a client
that fetches pages and never runs them cannot make the server hold more.

Before that callback the renderer fetches the app's layout and callback list
(`/_dash-layout`, `/_dash-dependencies`) once it has started; the page's head preloads both
(`preload_links`), so they arrive with the scripts instead of one round trip after them.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable

from dash import Dash
from dash import _pages
from flask import Flask, request

log = logging.getLogger(__name__)

MAX_AGE_S = 10.0
MAX_PENDING = 8
WORKERS = 2
EXTENSION = "ms_prefetch"             # server.extensions key of the app's Prefetch


#: What Dash's renderer fetches first, before any callback.
STARTUP_PATHS = ("/_dash-layout", "/_dash-dependencies")


def preload_links(prefix: str = "/") -> str:
    """Return the `<link>`s that fetch the renderer's first requests with the page's scripts."""
    return "\n".join(f'<link rel="preload" href="{prefix.rstrip("/")}{path}" as="fetch" crossorigin="anonymous">'
                     for path in STARTUP_PATHS)


def with_preloads(index_string: str, prefix: str = "/") -> str:
    """Return a Dash `index_string` with `preload_links` after its CSS."""
    return index_string.replace("{%css%}", "{%css%}\n" + preload_links(prefix), 1)


def _key(module: str, kwargs: dict) -> str:
    return module + "\0" + json.dumps(kwargs, sort_keys=True, default=str)


class Prefetch:
    """Layouts started from a page's shell request, taken once by the router's callback."""

    def __init__(self, workers: int = WORKERS, max_pending: int = MAX_PENDING, max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic):
        self.max_pending, self.max_age_s, self._clock = max_pending, max_age_s, clock
        # Each layout on a short-lived thread of its own, at most `workers` computing at once and
        # `max_pending + workers` threads alive: no pool whose threads outlive the app (tests build many
        # apps in one process) or die with a stopped server's thread and leave later pages waiting.
        self._running = threading.BoundedSemaphore(workers)
        self._threads, self._max_threads = 0, max_pending + workers
        self._pending: OrderedDict[str, tuple[float, Future]] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, server: Flask, module: str, layout: Callable, kwargs: dict) -> None:
        """Compute `layout(**kwargs)` on a thread of its own, in an app context of `server`."""
        key = _key(module, kwargs)
        with self._lock:
            if key in self._pending or self._threads >= self._max_threads:
                return                        # started already, or busy: the router computes it itself
            while len(self._pending) >= self.max_pending:
                self._pending.popitem(last=False)
            future: Future = Future()
            future.set_running_or_notify_cancel()
            self._pending[key] = (self._clock(), future)
            self._threads += 1

        def run():
            try:
                with self._running, server.app_context():
                    future.set_result(layout(**kwargs))
            except BaseException as e:        # a failed prefetch: the router computes the page as before
                future.set_exception(e)
            finally:
                with self._lock:
                    self._threads -= 1
        threading.Thread(target=run, name="page-prefetch", daemon=True).start()

    def take(self, module: str, kwargs: dict) -> Future | None:
        """Return the prefetched layout's future for this page and arguments, if one is fresh; forget it."""
        with self._lock:
            entry = self._pending.pop(_key(module, kwargs), None)
        if entry is None or self._clock() - entry[0] > self.max_age_s:
            return None
        return entry[1]


def _prefetched(prefetch: Prefetch, module: str, layout: Callable) -> Callable:
    def page_layout(**kwargs):
        future = prefetch.take(module, kwargs)
        if future is not None:
            try:
                return future.result(timeout=MAX_AGE_S)
            except Exception:            # the prefetch failed or was dropped: compute it here, as before
                log.debug("prefetched layout of %s not used", module, exc_info=True)
        return layout(**kwargs)
    page_layout.__wrapped__ = layout
    return page_layout


def install(app: Dash, prefetch: Prefetch | None = None) -> Prefetch:
    """Start each page's layout when its shell is served; the router's callback then takes it."""
    prefetch = prefetch or Prefetch()
    originals: dict[str, Callable] = {}
    for module, page in _pages.PAGE_REGISTRY.items():
        layout = page.get("layout")
        if callable(layout):              # an earlier app of this process may have wrapped it: wrap the page's own
            originals[module] = getattr(layout, "__wrapped__", layout)
            page["layout"] = _prefetched(prefetch, module, originals[module])
    server = app.server
    server.extensions[EXTENSION] = prefetch

    @server.after_request
    def _prefetch(response):
        if (request.method != "GET" or response.status_code != 200 or response.mimetype != "text/html"
                or request.path.startswith(("/_dash-", "/assets/", "/export/"))):
            return response
        page, path_vars = _pages._path_to_page(app.strip_relative_path(request.path) or "")
        module = page.get("module") if page else None
        if module in originals:
            query = request.query_string.decode("utf-8", "replace")
            kwargs = {**(path_vars or {}), **_pages._parse_query_string("?" + query if query else "")}
            prefetch.start(server, module, originals[module], kwargs)
        return response
    return prefetch

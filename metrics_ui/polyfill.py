"""Dash's @babel/polyfill answered with the one part of it the dashboard's browsers need: regenerator-runtime.

Every Dash page loads `@babel/polyfill` 7.12 (core-js 2 and regenerator-runtime) before
React: polyfills of the whole of ES2015-2017 for browsers that lack it, which a current
browser spends ~125 ms evaluating on each cold load, and whose replacements of some
built-ins then run in place of the browser's own. Dash's bundles (its renderer, dcc,
dash_table) need only the global `regeneratorRuntime` their async functions were compiled
against. This module answers the polyfill's address with `regenerator-runtime` 0.13.11
(MIT, the version @babel/polyfill 7.12 ships with; kept gzipped in `vendor/`). The
dashboard supports the browsers Dash and React 18 support, which have all of ES2017.
When Dash loads another polyfill than this one, its own is served as before.
"""
from __future__ import annotations

import logging
from pathlib import Path

from dash import _dash_renderer
from flask import Flask

from metrics_ui import vendored

log = logging.getLogger(__name__)

RUNTIME = Path(__file__).resolve().parent / "vendor" / "regenerator-runtime-0.13.11.js.gz"
#: Dash's address of the polyfill, around the fingerprint it adds (`polyfill@7.v4_4_1m1796148670.12.1.min.js`).
DIR = "/_dash-component-suites/dash/deps/"
HEAD, TAIL = "polyfill@7.", ".12.1.min.js"
DASH_PATH = "deps/polyfill@7.12.1.min.js"


def dash_polyfill() -> bool:
    """True if Dash's pages load @babel/polyfill 7.12.1, the polyfill this module stands in for."""
    return any(DASH_PATH in dep.get("relative_package_path", {}).get("prod", ())
               for dep in _dash_renderer._js_dist_dependencies)


def matches(path: str, prefix: str = "/") -> bool:
    """True if `path` is Dash's address of the polyfill, fingerprinted or not."""
    name = path.removeprefix(prefix.rstrip("/") + DIR)
    return name != path and name.startswith(HEAD) and name.endswith(TAIL) and "/" not in name


def install(server: Flask, prefix: str = "/") -> bool:
    """Serve regenerator-runtime at the polyfill's address; return False (Dash's polyfill stays) if unusable."""
    if not (RUNTIME.is_file() and dash_polyfill()):
        log.warning("Dash's polyfill is not @babel/polyfill 7.12.1 or %s is missing: pages load Dash's", RUNTIME)
        return False
    vendored.serve(server, lambda p: matches(p, prefix), RUNTIME.read_bytes())
    return True

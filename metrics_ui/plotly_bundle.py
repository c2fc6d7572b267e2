"""plotly.js for the dashboard: the official "basic" bundle (scatter, bar, pie), fetched as the page starts.

Every chart here is a scatter or a bar trace. Dash's dcc.Graph loads plotly.js from one fixed
address (`PLOTLY_PATH`) when the first graph mounts, unless `window.Plotly` exists, and Dash
serves there plotly.py's whole bundle: 4.8 MB with every trace type, which a browser spends
0.3-0.8 s evaluating on each page load, before any chart is drawn. This module answers that
address with plotly.js's partial "basic" bundle (`plotly.js-basic-dist-min`, MIT, the same
plotly.js version plotly.py ships: 1.2 MB, kept gzipped in `vendor/`), and the page's head
preloads it and dcc's graph chunks, so they download while the page's layout is computed
instead of after it.
When plotly.py's plotly.js is another version than the vendored one, Dash's own bundle is
served as before (a newer plotly.py may write figures the older bundle cannot draw).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
from pathlib import Path

from flask import Flask, Response, request
from plotly.offline import get_plotlyjs_version

from metrics_ui.compress import accepts_gzip

log = logging.getLogger(__name__)

VERSION = "4.1.1"
BUNDLE = Path(__file__).resolve().parent / "vendor" / f"plotly-basic-{VERSION}.min.js.gz"
PLOTLY_PATH = "/_dash-component-suites/plotly/package_data/plotly.min.js"    # where dcc.Graph looks
MAX_AGE_S = 3600           # the address has no fingerprint: revalidated (ETag) after an hour


def usable() -> bool:
    """True if the vendored bundle is there and of plotly.py's plotly.js version."""
    return BUNDLE.is_file() and get_plotlyjs_version() == VERSION


#: What a chart needs that Dash loads only once a graph mounts: dcc's graph and date picker chunks.
CHART_CHUNKS = ("/_dash-component-suites/dash/dcc/async-graph.js", "/_dash-component-suites/dash/dcc/async-datepicker.js")


def preload_links(prefix: str = "/") -> str:
    """Return the `<link>`s that start plotly.js's and the chart chunks' downloads with the page's own scripts."""
    return "\n".join(f'<link rel="preload" href="{prefix.rstrip("/")}{path}" as="script">'
                     for path in (PLOTLY_PATH, *CHART_CHUNKS))


#: The pages that draw charts as they load: the job, step and compare pages.
CHART_PAGES = ("run/", "step/", "compare")


def early_script(prefix: str = "/") -> str:
    """Return the `<script>` that runs plotly.js on a chart page as soon as it has downloaded.

    dcc.Graph runs plotly.js only when the first graph mounts, after the page's layout
    came back: ~150 ms of script on the critical path of every load. Run as an async
    script, it fills the wait for the page's scripts and layout instead, and dcc.Graph finds
    `window.Plotly` already there. The other pages never run it.
    """
    pages = json.dumps([prefix.rstrip("/") + "/" + page for page in CHART_PAGES])
    return ("<script>(function () { var p = window.location.pathname;"
            " if (!%s.some(function (page) { return p.indexOf(page) === 0; })) return;"
            " var s = document.createElement('script'); s.src = %s; s.async = true;"
            " document.head.appendChild(s); })();</script>") % (pages, json.dumps(prefix.rstrip("/") + PLOTLY_PATH))


def install(server: Flask, prefix: str = "/") -> bool:
    """Serve the basic bundle at dcc.Graph's plotly.js address; return False (Dash's bundle stays) if unusable."""
    if not usable():
        log.warning("plotly.js %s bundle not usable (%s): charts load Dash's whole plotly.js", VERSION, BUNDLE)
        return False
    packed = BUNDLE.read_bytes()
    etag = hashlib.blake2b(packed, digest_size=12).hexdigest()
    path = prefix.rstrip("/") + PLOTLY_PATH
    plain: list[bytes] = []           # unpacked on first use by a client that refuses gzip

    @server.before_request
    def _plotly():
        if request.path != path or request.method not in ("GET", "HEAD"):
            return None
        headers = {"Cache-Control": f"public, max-age={MAX_AGE_S}", "ETag": f'"{etag}"', "Vary": "Accept-Encoding"}
        if request.if_none_match.contains(etag):
            return Response(status=304, headers=headers)
        if accepts_gzip(request.headers.get("Accept-Encoding")):
            body, headers["Content-Encoding"] = packed, "gzip"
        else:
            if not plain:
                plain.append(gzip.decompress(packed))
            body = plain[0]
        return Response(body, mimetype="application/javascript", headers=headers)

    return True

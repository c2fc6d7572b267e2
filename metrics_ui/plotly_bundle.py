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

import json
import logging
from pathlib import Path

from flask import Flask
from plotly.offline import get_plotlyjs_version

from metrics_ui import vendored

log = logging.getLogger(__name__)

VERSION = "4.1.1"
BUNDLE = Path(__file__).resolve().parent / "vendor" / f"plotly-basic-{VERSION}.min.js.gz"
PLOTLY_PATH = "/_dash-component-suites/plotly/package_data/plotly.min.js"    # where dcc.Graph looks


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
    """Return the `<script>` that runs plotly.js on a chart page while the server computes the page.

    dcc.Graph runs plotly.js (~200 ms of script in a cold browser) only when the first graph
    mounts, after the page's layout came back. Started as the renderer sends the page's
    callback (Dash's router, `_pages_content`), it runs while the server computes the page,
    and dcc.Graph finds `window.Plotly` already there; run as soon as it has downloaded, it
    would run before Dash's renderer starts, and the main thread would then sit idle while
    the server works. The other pages never run it.
    """
    pages = json.dumps([prefix.rstrip("/") + "/" + page for page in CHART_PAGES])
    return ("<script>(function () { var p = window.location.pathname;"
            " if (!%s.some(function (page) { return p.indexOf(page) === 0; })) return;"
            " var fetch = window.fetch;"
            " window.fetch = function (url, init) { var sent = fetch.apply(this, arguments);"
            " if (String(url).indexOf('_dash-update-component') >= 0 && init && typeof init.body === 'string'"
            " && init.body.indexOf('_pages_content') >= 0) { window.fetch = fetch;"
            " var s = document.createElement('script'); s.src = %s; s.async = true; document.head.appendChild(s); }"
            " return sent; }; })();</script>") % (pages, json.dumps(prefix.rstrip("/") + PLOTLY_PATH))


def with_early_loading(index_string: str, prefix: str = "/") -> str:
    """Return a Dash `index_string` with `preload_links` after its CSS and `early_script` after its renderer."""
    return index_string.replace("{%css%}", "{%css%}\n" + preload_links(prefix), 1).replace(
        "{%renderer%}", "{%renderer%}\n" + early_script(prefix), 1)


def install(server: Flask, prefix: str = "/") -> bool:
    """Serve the basic bundle at dcc.Graph's plotly.js address; return False (Dash's bundle stays) if unusable."""
    if not usable():
        log.warning("plotly.js %s bundle not usable (%s): charts load Dash's whole plotly.js", VERSION, BUNDLE)
        return False
    path = prefix.rstrip("/") + PLOTLY_PATH
    vendored.serve(server, lambda p: p == path, BUNDLE.read_bytes())
    return True

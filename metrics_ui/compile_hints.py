"""V8's explicit compile hint on the scripts a page runs nearly all of: compiled while they download.

A browser that has never run these scripts (a first visit, a new browser) compiled each
function of plotly.js, React and Dash's renderer on its main thread when the function was
first called: on a cold load of a chart page, plotly.js alone took ~0.2 s of main thread
before the page's layout was even asked for. With `//# allFunctionsCalledOnLoad` as a
script's first line, V8 (Chrome 136 and later) compiles the whole file on a background
thread as it streams in; other browsers read a comment.

The hint goes only on scripts a page runs most of: plotly.js, React and Dash's renderer
(`LIBRARIES`), the vendored polyfill and the dashboard's own assets. Component libraries
(dcc, html, dash_table) hold many components a page never uses, and compiling all of them
made the runs page, which draws no chart, slower.
"""
from __future__ import annotations

import functools
import gzip
from pathlib import Path

from flask import Flask, Response, request

HINT = b"//# allFunctionsCalledOnLoad\n"
#: Dash's addresses of React (and prop-types, its polyfill) and of its renderer.
LIBRARIES = ("/_dash-component-suites/dash/deps/", "/_dash-component-suites/dash/dash-renderer/")


def hinted(script: bytes) -> bytes:
    """`script` with the hint as its first line (once)."""
    return script if script.startswith(HINT) else HINT + script


@functools.lru_cache(maxsize=8)
def hinted_gzip(path: Path) -> bytes:
    """A vendored gzipped script, hinted and gzipped again: once per file and process (~45 ms for plotly.js)."""
    return gzip.compress(hinted(gzip.decompress(path.read_bytes())), 6, mtime=0)


def install(server: Flask) -> None:
    """Hint React and Dash's renderer; register after `compress.install`, whose hook must run after this one."""

    @server.after_request
    def _hint(response: Response) -> Response:
        if (response.status_code == 200 and request.path.startswith(LIBRARIES) and request.path.endswith(".js")
                and "Content-Encoding" not in response.headers and not response.direct_passthrough
                and not response.is_streamed):
            response.set_data(hinted(response.get_data()))
        return response

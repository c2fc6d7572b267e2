"""Serve a vendored script, kept gzipped, at an address Dash's pages already load.

The browser caches it for an hour and then revalidates it by its ETag (the addresses carry
no fingerprint of the vendored content); a client that refuses gzip gets it unpacked.
"""
from __future__ import annotations

import hashlib
import gzip
from typing import Callable

from flask import Flask, Response, request

from metrics_ui.compress import accepts_gzip

MAX_AGE_S = 3600


def serve(server: Flask, matches: Callable[[str], bool], packed: bytes) -> None:
    """Answer every GET or HEAD whose path `matches` with the gzipped script `packed`."""
    etag = hashlib.blake2b(packed, digest_size=12).hexdigest()
    plain: list[bytes] = []           # unpacked on first use by a client that refuses gzip

    @server.before_request
    def _vendored():
        if request.method not in ("GET", "HEAD") or not matches(request.path):
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

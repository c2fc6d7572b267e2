"""Whether a connection's first bytes are another protocol's: an HTTP request, a TLS handshake.

A web page can make the browser send an HTTP request to 127.0.0.1:7002 (a no-cors
`fetch` POST); the body is the page's to choose, and may carry well-formed fixish
frames. The ingress closes such a connection before it reads a frame of it. No fixish
frame can start like one: a frame starts with its u32 big-endian length, 42 or 53, so
its first byte is 0, and each start below read as a length is over 10^8. Pure, no I/O.

    foreign_protocol(b"POST / HTTP/1.1")   # "an HTTP request"
    foreign_protocol(b"PO")                # UNDECIDED: wait for more bytes
    foreign_protocol(b"\\x00\\x00\\x00\\x35") # None: fixish
"""
from __future__ import annotations

_HTTP = tuple(m + b" " for m in (b"GET", b"POST", b"PUT", b"HEAD", b"OPTIONS", b"DELETE", b"PATCH",
                                 b"CONNECT", b"TRACE", b"PRI"))     # PRI: HTTP/2's preface
STARTS: tuple[tuple[bytes, str], ...] = tuple((m, "an HTTP request") for m in _HTTP) + (
    (b"\x16\x03", "a TLS handshake"),       # a TLS record (content type 22, version 3.x)
)
LONGEST = max(len(s) for s, _ in STARTS)    # bytes that always decide
UNDECIDED = "undecided"


def foreign_protocol(head: bytes) -> str | None:
    """Return what `head` (a connection's first bytes) starts like, UNDECIDED if it may yet, or None."""
    maybe = False
    for start, what in STARTS:
        if head.startswith(start):
            return what
        if start.startswith(head):
            maybe = True
    return UNDECIDED if maybe else None

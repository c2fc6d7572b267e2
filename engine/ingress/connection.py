"""One sender connection of the ingress: its socket, scanner, unscanned tail and counters.

The server (server.py) owns every such record; admission.py reads some of its fields
(`admission.Connection`).
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

from engine.wire.fixish import FrameScanner


@dataclass(eq=False)
class SenderConnection:
    """One sender connection and the bytes it sent that are not decided yet."""
    sock: socket.socket
    stream: str
    peer: str
    scanner: FrameScanner
    pending: bytes = b""
    registered: bool = False
    closed: bool = False
    accepted: int = 0
    uncommitted: int = 0             # records appended since the last commit
    bytes_in: int = 0
    bad: int = 0
    last_active: float = 0.0         # monotonic time it last sent bytes or was unmuted
    opened: float = 0.0              # ... it was accepted or unmuted (the first-frame deadline)
    client: str = ""                 # its address, or IPv6 /64 (admission.client_key)
    polled: bool = False             # its socket was checked for bytes since accepted or unmuted
    sniffed: bool = False            # its first bytes are not another protocol's (foreign.py)

"""A real local HTTP server that receives webhook POSTs (for the alert tests)."""
from __future__ import annotations

import datetime
import json
import queue
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class WebhookReceiver:
    """Serve on a free loopback port; each JSON POST lands in `received`.

    `fail_first` answers that many requests with HTTP 500 first (to exercise retries);
    `redirect_to` answers every request with a 302 to that URL instead. `hosts` keeps
    the Host header of every request; `tls` serves HTTPS with that server context.
    """

    def __init__(self, fail_first: int = 0, redirect_to: str | None = None, tls: ssl.SSLContext | None = None):
        self.received: queue.Queue[dict] = queue.Queue()
        self.requests = 0
        self.hosts: list[str] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests += 1
                receiver.hosts.append(self.headers.get("Host") or "")
                if redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.end_headers()
                    return
                if receiver.requests <= receiver.fail_first:
                    self.send_response(500)
                    self.end_headers()
                    return
                receiver.received.put({"content_type": self.headers.get("Content-Type"), **json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next(self, timeout: float = 60.0) -> dict:
        """Return the next payload received (raise queue.Empty after `timeout`)."""
        return self.received.get(timeout=timeout)


def tls_for(host: str, folder: Path) -> tuple[ssl.SSLContext, Path]:
    """Return a server context with a certificate for `host` signed by a new CA, and the CA's PEM file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject: str, key, issuer: str, issuer_key, ca: bool):
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), True)
        else:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("test CA", ca_key, "test CA", ca_key, True)
    leaf = cert(host, leaf_key, "test CA", ca_key, False)
    pem = serialization.Encoding.PEM
    ca_path, cert_path, key_path = folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path.write_bytes(leaf.public_bytes(pem))
    key_path.write_bytes(leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_path, key_path)
    return ctx, ca_path

"""Where audit alerts are mailed on the local stack, and a catcher that receives them. Nothing
listens on the port unless a test opens `catcher()` (tests/integration/test_continuous_audits.py)."""

from __future__ import annotations

import os
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from devstack.ports import HOST

SMTP_PORT = int(os.environ.get("SEMANTICS_SMTP_PORT", "8025"))


def connections() -> dict[str, dict]:
    return {
        "smtp_alerts": {
            "conn_type": "smtp",
            "host": HOST,
            "port": SMTP_PORT,
            "extra": {"from_email": "semantics@localhost", "disable_ssl": True, "disable_tls": True},
        }
    }


class _Smtp(socketserver.StreamRequestHandler):
    def handle(self):
        say = lambda line: self.wfile.write(line.encode() + b"\r\n")
        say("220 catcher")
        while line := self.rfile.readline():
            verb = line.decode(errors="replace").strip().split(" ")[0].upper()
            if verb == "DATA":
                say("354 go on")
                body = []
                while (part := self.rfile.readline()) not in (b".\r\n", b""):
                    body.append(part.decode(errors="replace"))
                self.server.mails.append("".join(body))
                say("250 queued")
            elif verb == "QUIT":
                say("221 bye")
                return
            elif verb == "EHLO":
                say("250 catcher")
            else:
                say("250 ok")


@contextmanager
def catcher() -> Iterator[list[str]]:
    """An SMTP server on SMTP_PORT while the block runs; yields the mails' texts as they arrive."""
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((HOST, SMTP_PORT), _Smtp) as server:
        server.mails = []
        t = threading.Thread(target=server.serve_forever, daemon=True)
        t.start()
        try:
            yield server.mails
        finally:
            server.shutdown()

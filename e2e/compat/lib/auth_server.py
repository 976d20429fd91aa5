#!/usr/bin/env python3
"""A small nsqd-style auth server for the compatibility matrix (stdlib only).

nsqd (and rustqueued) call `GET /auth?remote_ip=&tls=&secret=&common_name=`. A request is
allowed only when the secret is `compat-secret`, the connection is TLS and the client
certificate's CN is `rustqueue-compat-client`; it then gets a 1 s TTL and publish+subscribe
on topics matching `^compat-`. Anything else is refused with 403. `GET /requests` reports
how many /auth requests were answered, so tests can see a TTL refresh happen.

Usage: auth_server.py PORT_FILE LOG_FILE   (binds 127.0.0.1 on a free port, writes it to PORT_FILE)
"""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SECRET = "compat-secret"
COMMON_NAME = "rustqueue-compat-client"
GRANT = {
    "ttl": 1,
    "identity": "compat-client",
    "identity_url": "https://example.invalid/compat-client",
    "authorizations": [
        {"topic": "^compat-", "channels": [".*"], "permissions": ["subscribe", "publish"]}
    ],
}

lock = threading.Lock()
counts = {"requests": 0, "allowed": 0, "denied": 0}


class Handler(BaseHTTPRequestHandler):
    def _send(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/ping":
            return self._send(200, "OK")
        if url.path == "/requests":
            with lock:
                return self._send(200, dict(counts))
        if url.path != "/auth":
            return self._send(404, {"message": "NOT_FOUND"})
        q = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        ok = (q.get("secret") == SECRET and q.get("tls") == "true"
              and q.get("common_name") == COMMON_NAME)
        with lock:
            counts["requests"] += 1
            counts["allowed" if ok else "denied"] += 1
        self.log_message("auth %s query=%s", "allow" if ok else "deny", json.dumps(q))
        if ok:
            return self._send(200, GRANT)
        return self._send(403, {"message": "NOT_AUTHORIZED"})

    def log_message(self, fmt, *args):
        with open(LOG, "a") as f:
            f.write("%s %s\n" % (self.log_date_time_string(), fmt % args))


if __name__ == "__main__":
    port_file, LOG = sys.argv[1], sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()

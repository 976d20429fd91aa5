"""Shared plumbing of the pynsq suite: the server environment, recording clients, the inbox
and polling helpers. compat.py holds the scenarios and main; secure.py the secure-only ones.
"""
import json
import os
import random
import socket
import ssl
import struct
import time
import urllib.parse
import urllib.request

import asyncio

import nsq

class Failure(Exception):
    pass


class Env:
    def __init__(self, args):
        self.a = args
        self.name = ""
        ctx = None
        if args.tls_dir:
            ctx = ssl.create_default_context(cafile=self.tls("ca.pem"))
            ctx.load_cert_chain(self.tls("client.pem"), self.tls("client-key.pem"))
        self.http_ctx = ctx

    def tls(self, name):
        return os.path.join(self.a.tls_dir, name)

    def topic(self):
        return "compat-py-%s-%s-%06d" % (self.a.mode, self.name, random.randrange(1000000))

    def tls_options(self, cert="client"):
        opts = {"ca_certs": self.tls("ca.pem")}
        if cert:
            opts.update(certfile=self.tls(cert + ".pem"), keyfile=self.tls(cert + "-key.pem"))
        return opts

    def kwargs(self, **over):
        """Connection settings of the original matrix: heartbeat 1 s, always Deflate; the
        secure mode adds TLS with the client certificate and the AUTH secret."""
        kw = dict(heartbeat_interval=1, deflate=True, output_buffer_timeout=100)
        if self.a.mode == "secure":
            kw.update(tls_v1=True, tls_options=self.tls_options(), auth_secret=self.a.secret)
        kw.update(over)
        return {k: v for k, v in kw.items() if v is not None}

    # -- HTTP ---------------------------------------------------------------------------
    def url(self, addr, path):
        base = addr if "://" in addr else "http://" + addr
        return base + path

    def get_json(self, addr, path):
        with urllib.request.urlopen(self.url(addr, path), timeout=5, context=self.http_ctx) as r:
            return json.loads(r.read())

    def post(self, path):
        req = urllib.request.Request(self.url(self.a.http, path), data=b"", method="POST")
        urllib.request.urlopen(req, timeout=5, context=self.http_ctx).read()

    def topic_stats(self, topic):
        doc = self.get_json(self.a.http, "/stats?format=json&topic=" + urllib.parse.quote(topic))
        for t in doc.get("topics") or []:
            if t.get("topic_name") == topic:
                return t
        return None

    def channel_stats(self, topic, channel):
        for c in (self.topic_stats(topic) or {}).get("channels") or []:
            if c.get("channel_name") == channel:
                return c
        return None

    # -- clients ------------------------------------------------------------------------
    async def writer(self, **kw):
        w = RecordingWriter([self.a.tcp], reconnect_interval=60.0, **self.kwargs(**kw))
        await until(lambda: w.conns or w.errors, 5, "writer never connected")
        return w

    async def reader(self, topic, channel, handler=None, box=None, **kw):
        max_in_flight = kw.pop("max_in_flight", 4)
        wait = kw.pop("wait", True)
        if handler is None:
            def handler(m):
                box.add(m)
                return True
        r = RecordingReader(topic=topic, channel=channel, message_handler=handler,
                       nsqd_tcp_addresses=kw.pop("nsqd", [self.a.tcp]),
                       lookupd_http_addresses=kw.pop("lookupd", None) or [],
                       lookupd_poll_interval=1, max_in_flight=max_in_flight,
                       **self.kwargs(**kw))
        if wait:
            await self.wait_subscribed(topic, channel)
        return r

    async def wait_subscribed(self, topic, channel):
        """pynsq sends SUB without waiting for it; publish only once /stats lists the client."""
        def seen():
            c = self.channel_stats(topic, channel)
            return c is not None and len(c.get("clients") or []) > 0
        try:
            await until(seen, 5, "subscription not visible")
        except Failure:
            pass  # the scenario's own assertion reports what went wrong

    async def auth_requests(self):
        return self.get_json(self.a.auth_http, "/requests")["requests"]


class _RecordsErrors:
    """Mixin for pynsq clients: remembers connection errors (auth/TLS refusals) in `errors`
    and registers the client in CLIENTS so the harness closes it after the scenario."""

    def __init__(self, *a, **kw):
        self.errors = []
        super().__init__(*a, **kw)
        CLIENTS.append(self)

    def _on_connection_error(self, conn, error, **kwargs):
        self.errors.append(str(error))
        super()._on_connection_error(conn, error, **kwargs)


class RecordingReader(_RecordsErrors, nsq.Reader):
    """A Reader that also counts closes (a refused SUB) and, once closed, does not reconnect:
    pynsq schedules a reconnect 15 s after any close of a direct nsqd connection, which would
    otherwise land in a later scenario."""

    def __init__(self, *a, **kw):
        self.closes = 0
        self.closing = False
        super().__init__(*a, **kw)

    def _on_connection_close(self, conn, **kwargs):
        self.closes += 1
        super()._on_connection_close(conn, **kwargs)

    def connect_to_nsqd(self, host, port):
        if not self.closing:
            return super().connect_to_nsqd(host, port)

    def close(self):
        self.closing = True
        super().close()


class RecordingWriter(_RecordsErrors, nsq.Writer):
    """A Writer whose closed connections fail their pending callbacks at once."""

    def _on_connection_close(self, conn, **kwargs):
        self.errors.append("connection closed")
        if conn.id in self.conns:
            del self.conns[conn.id]
        for cb in conn.callback_queue:
            cb(conn, nsq.protocol.ConnectionClosedError())
        conn.callback_queue = []

    def close(self):
        for conn in list(self.conns.values()):
            conn.close()

    async def send(self, cmd, topic, *args):
        fut = asyncio.get_running_loop().create_future()

        def done(conn, data):
            if not fut.done():
                fut.set_result(data)
        getattr(self, cmd)(topic, *args, callback=done)
        res = await asyncio.wait_for(fut, 10)
        if isinstance(res, nsq.Error):
            raise Failure("%s failed: %s" % (cmd, res))
        return res


CLIENTS = []


def close_clients():
    while CLIENTS:
        c = CLIENTS.pop()
        try:
            c.close()
        except Exception:
            pass


class Inbox:
    def __init__(self):
        self.got = []

    def add(self, m):
        self.got.append((m.body.decode(errors="replace"), m.attempts, time.monotonic(), m))

    def count(self, body):
        return sum(1 for g in self.got if g[0] == body)

    def describe(self):
        return "%d deliveries %s" % (len(self.got), [(b if len(b) < 24 else "<%d bytes>" % len(b), a)
                                                     for b, a, _, _ in self.got])

    async def wait(self, *bodies, timeout=5):
        await until(lambda: all(self.count(b) for b in bodies), timeout,
                    lambda: "want %s, got %s" % (list(bodies), self.describe()))


async def until(cond, timeout, why):
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            raise Failure("timed out after %ss: %s" % (timeout, why() if callable(why) else why))
        await asyncio.sleep(0.02)



def recv_exactly(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise Failure("connection closed after %d of %d reply bytes" % (len(buf), n))
        buf += chunk
    return buf


def raw_oversized_pub(addr, topic, size):
    """Sends a PUB whose size header is `size` without any body over a plain socket and returns
    the error frame's text: the header alone must make the broker refuse it (as in go's suite)."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"  V2PUB " + topic.encode() + b"\n" + struct.pack(">I", size))
        n, kind = struct.unpack(">Ii", recv_exactly(s, 8))
        if kind != nsq.protocol.FRAME_TYPE_ERROR or not 4 <= n <= 1024:
            raise Failure("reply frame type %d size %d, want an error frame" % (kind, n))
        return recv_exactly(s, n - 4).decode(errors="replace")


async def round_trip(e, **kw):
    """Publishes one body on a fresh topic and waits for it on channel "c" (attempts 1)."""
    topic, box = e.topic(), Inbox()
    await e.reader(topic, "c", box=box, **kw)
    w = await e.writer(**kw)
    await w.send("pub", topic, b"hello from pynsq")
    await box.wait("hello from pynsq")
    if box.got[0][1] != 1:
        raise Failure("first delivery has attempts=%d" % box.got[0][1])
    return topic

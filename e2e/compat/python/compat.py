"""pynsq half of the official-client compatibility matrix (issue 4).

e2e/compat/run.sh runs this with the pinned pynsq/tornado venv once per broker mode, `plain`
(TLS optional) and `secure` (TLS required, mTLS, external AUTH). Every scenario prints
`PASS <mode>/<name> <ms>` or `FAIL <mode>/<name> <ms>: <why>`; the exit code is 1 if any failed.
Flags match the go-nsq suite (see ../go/main.go).
"""
import argparse
import json
import logging
import os
import random
import re
import ssl
import sys
import time
import traceback
import urllib.request

import asyncio

import nsq
from tornado.ioloop import IOLoop

SCENARIO_TIMEOUT = 45


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

    def channel_stats(self, topic, channel):
        doc = self.get_json(self.a.http, "/stats?format=json&topic=" + topic)
        for t in doc.get("topics") or []:
            if t.get("topic_name") == topic:
                for c in t.get("channels") or []:
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
        if handler is None:
            def handler(m):
                box.add(m)
                return True
        r = nsq.Reader(topic=topic, channel=channel, message_handler=handler,
                       nsqd_tcp_addresses=kw.pop("nsqd", [self.a.tcp]),
                       lookupd_http_addresses=kw.pop("lookupd", None) or [],
                       lookupd_poll_interval=1, max_in_flight=max_in_flight,
                       **self.kwargs(**kw))
        CLIENTS.append(r)
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


class RecordingWriter(nsq.Writer):
    """A Writer that remembers connection errors (auth/TLS refusals) for assertions."""

    def __init__(self, *a, **kw):
        self.errors = []
        super().__init__(*a, **kw)
        CLIENTS.append(self)

    def _on_connection_error(self, conn, error, **kwargs):
        self.errors.append(str(error))
        super()._on_connection_error(conn, error, **kwargs)

    def _on_connection_close(self, conn, **kwargs):
        self.errors.append("connection closed")
        if conn.id in self.conns:
            del self.conns[conn.id]
        for cb in conn.callback_queue:
            cb(conn, nsq.protocol.ConnectionClosedError())
        conn.callback_queue = []

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
            if isinstance(c, nsq.Reader):
                c.close()
            else:
                for conn in list(c.conns.values()):
                    conn.close()
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


# -- scenarios ---------------------------------------------------------------------------
async def round_trip(e, **kw):
    topic, box = e.topic(), Inbox()
    await e.reader(topic, "c", box=box, **kw)
    w = await e.writer(**kw)
    await w.send("pub", topic, b"hello from pynsq")
    await box.wait("hello from pynsq")
    if box.got[0][1] != 1:
        raise Failure("first delivery has attempts=%d" % box.got[0][1])
    return topic


async def pubsub(e):
    await round_trip(e, deflate=False)


def compressed(kind):
    async def run(e):
        kw = dict(deflate=kind == "deflate", snappy=kind == "snappy")
        topic, box = e.topic(), Inbox()
        await e.reader(topic, "c", box=box, **kw)
        c = e.channel_stats(topic, "c")
        if not c or not c["clients"] or not c["clients"][0].get(kind):
            raise Failure("/stats does not show %s on the consumer: %s" % (kind, c))
        w = await e.writer(**kw)
        big = ("compress me %s " % kind) * 2000
        await w.send("pub", topic, b"small")
        await w.send("pub", topic, big.encode())
        await box.wait("small", big)
    return run


async def mpub(e):
    topic, box = e.topic(), Inbox()
    await e.reader(topic, "c", box=box)
    w = await e.writer()
    await w.send("mpub", topic, [b"one", b"two", b"three"])
    await box.wait("one", "two", "three")
    await asyncio.sleep(0.3)
    if len(box.got) != 3:
        raise Failure("want exactly 3 deliveries, got " + box.describe())


async def dpub(e):
    topic, box = e.topic(), Inbox()
    await e.reader(topic, "c", box=box)
    w = await e.writer()
    start = time.monotonic()
    await w.send("dpub", topic, 300, b"later")
    await w.send("pub", topic, b"now")
    await box.wait("now", "later", timeout=12)  # nsqd: up to its 5 s queue-scan refresh
    later = [g for g in box.got if g[0] == "later"][0]
    if later[2] - start < 0.25:
        raise Failure("deferred message arrived after %.3fs, want >= 0.25s" % (later[2] - start))
    if box.got[0][0] != "now":
        raise Failure("deferred message overtook the immediate one: " + box.describe())


async def req(e):
    topic, box = e.topic(), Inbox()

    def handler(m):
        box.add(m)
        if m.attempts == 1:
            m.enable_async()
            m.requeue(time_ms=150, backoff=False)
        return True
    await e.reader(topic, "c", handler=handler, max_in_flight=1)
    w = await e.writer()
    await w.send("pub", topic, b"requeue me")
    await until(lambda: len(box.got) >= 2, 12, box.describe)
    (_, a1, t1, _), (_, a2, t2, _) = box.got[:2]
    if (a1, a2) != (1, 2):
        raise Failure("want attempts 1 then 2, got " + box.describe())
    if t2 - t1 < 0.1:
        raise Failure("requeued message came back after %.3fs, want >= 0.1s" % (t2 - t1))


async def touch(e):
    topic, box = e.topic(), Inbox()
    loop = IOLoop.current()

    def handler(m):
        box.add(m)
        m.enable_async()
        if m.attempts > 1:
            m.finish()
        else:
            loop.call_later(0.7, m.touch)
            loop.call_later(1.4, m.finish)
    await e.reader(topic, "c", handler=handler, msg_timeout=1)
    w = await e.writer()
    await w.send("pub", topic, b"touch me")
    await until(lambda: box.got, 5, box.describe)
    await asyncio.sleep(1.4 + 1.2)
    if len(box.got) != 1:
        raise Failure("TOUCH did not extend the timeout: " + box.describe())


async def rdy(e):
    topic, box = e.topic(), Inbox()
    state = {"cur": 0, "peak": 0, "done": 0}
    loop = IOLoop.current()

    def handler(m):
        m.enable_async()
        state["cur"] += 1
        state["peak"] = max(state["peak"], state["cur"])

        def fin():
            state["cur"] -= 1
            state["done"] += 1
            m.finish()
        loop.call_later(0.15, fin)
    await e.reader(topic, "c", handler=handler, max_in_flight=2)
    w = await e.writer()
    await w.send("mpub", topic, [b"rdy-%d" % i for i in range(8)])
    await until(lambda: state["done"] >= 8, 10, lambda: "handled %d of 8" % state["done"])
    if state["peak"] != 2:
        raise Failure("peak concurrency %d, want exactly 2 (max_in_flight 2)" % state["peak"])


async def fanout(e):
    topic = e.topic()
    boxes = {"workers": Inbox(), "audit": Inbox()}
    for ch, box in boxes.items():
        await e.reader(topic, ch, box=box)
    w = await e.writer()
    await w.send("mpub", topic, [b"alpha", b"beta"])
    for ch, box in boxes.items():
        await box.wait("alpha", "beta")
    await asyncio.sleep(0.2)
    for ch, box in boxes.items():
        if len(box.got) != 2:
            raise Failure("channel %s got %s" % (ch, box.describe()))


async def sample(e):
    """Exactly 50 of 100 on rustqueued (deterministic); nsqd samples at random (20..80)."""
    topic, box = e.topic(), Inbox()
    await e.reader(topic, "c", box=box, sample_rate=50)
    w = await e.writer()
    await w.send("mpub", topic, [b"sample-%d" % i for i in range(100)])

    def drained():
        c = e.channel_stats(topic, "c")
        return c and c["message_count"] >= 100 and c["depth"] == 0 and c["in_flight_count"] == 0
    await until(drained, 10, lambda: "channel never drained: %s" % e.channel_stats(topic, "c"))
    first = len(box.got)
    await asyncio.sleep(0.5)
    n = len(box.got)
    if n != first:
        raise Failure("sampled-out messages arrived later: %d then %d" % (first, n))
    if e.a.server == "nsqd":
        if not 20 <= n <= 80:
            raise Failure("nsqd delivered %d of 100 at sample_rate 50, want 20..80" % n)
        print("INFO %s/sample nsqd delivered %d of 100 (random sampling)" % (e.a.mode, n))
    elif n != 50:
        raise Failure("delivered %d of 100 at sample_rate 50, want exactly 50" % n)


async def ephemeral_channel(e):
    topic, ch, box = e.topic(), "temporary#ephemeral", Inbox()
    e.post("/topic/create?topic=" + topic)
    e.post("/channel/create?topic=%s&channel=keeper" % topic)
    r = await e.reader(topic, ch, box=box)
    w = await e.writer()
    await w.send("pub", topic, b"first")
    await box.wait("first")
    r.close()
    await until(lambda: e.channel_stats(topic, ch) is None, 5, "ephemeral channel still listed")
    await w.send("pub", topic, b"stale")
    again = Inbox()
    await e.reader(topic, ch, box=again)
    await w.send("pub", topic, b"fresh")
    await again.wait("fresh")
    await asyncio.sleep(0.3)
    if again.count("stale"):
        raise Failure("re-created ephemeral channel received the stale message: " + again.describe())


async def tls_optional(e):
    topic = await round_trip(e, tls_v1=True, tls_options=e.tls_options(cert=None))
    c = e.channel_stats(topic, "c")
    if not c or not c["clients"] or not c["clients"][0].get("tls"):
        raise Failure("/stats does not show TLS on the consumer: %s" % c)


async def lookup(e):
    topic, box = e.topic(), Inbox()
    e.post("/topic/create?topic=" + topic)
    await until(lambda: e.get_json(e.a.lookup_http, "/lookup?topic=" + topic).get("producers"), 10,
                "topic never listed in /lookup")
    await e.reader(topic, "c", box=box, nsqd=[], lookupd=[e.a.lookup_http])
    w = await e.writer()
    await w.send("pub", topic, b"found via lookup")
    await box.wait("found via lookup")


async def tls_auth_pubsub(e):
    topic = await round_trip(e)
    c = e.channel_stats(topic, "c")
    cl = (c or {}).get("clients") or [{}]
    if not (cl[0].get("tls") and cl[0].get("deflate") and cl[0].get("authed")):
        raise Failure("/stats does not show tls+deflate+authed: %s" % c)


def refused(codes=(), **kw):
    async def run(e):
        w = await e.writer(**kw)
        ok = False
        if w.conns:
            try:
                await w.send("pub", e.topic(), b"must be refused")
                ok = True
            except Failure as err:
                w.errors.append(str(err))
        if ok:
            raise Failure("publish succeeded, want it refused")
        text = " ".join(w.errors)
        if codes and not any(c in text for c in codes):
            raise Failure("refused with %r, want one of %s" % (text, list(codes)))
    return run


async def auth_ttl_refresh(e):
    before = await e.auth_requests()
    topic, w = e.topic(), await e.writer()
    await w.send("pub", topic, b"before expiry")
    await asyncio.sleep(1.2)
    await w.send("pub", topic, b"after expiry")
    n = await e.auth_requests() - before
    if n < 2:
        raise Failure("auth server saw %d requests, want >= 2 (AUTH + refresh)" % n)


PLAIN = [("pubsub", pubsub), ("deflate", compressed("deflate")), ("snappy", compressed("snappy")),
         ("mpub", mpub), ("dpub", dpub), ("req", req), ("touch", touch), ("rdy", rdy),
         ("fanout", fanout), ("sample", sample), ("ephemeral_channel", ephemeral_channel),
         ("tls", tls_optional), ("lookup", lookup)]
def secure_scenarios(e):
    return [("tls_auth_pubsub", tls_auth_pubsub),
            ("tls_required", refused(("E_TLS_REQUIRED", "TLS required"), tls_v1=None,
                                     tls_options=None, auth_secret=None)),
            # trusts the CA but presents no client certificate
            ("mtls_no_client_cert", refused(tls_options=e.tls_options(cert=None))),
            ("auth_ttl_refresh", auth_ttl_refresh),
            ("auth_denied", refused(("E_AUTH_FAILED", "E_UNAUTHORIZED"), auth_secret="wrong-secret")),
            ("mpub", mpub), ("dpub", dpub), ("req", req), ("touch", touch), ("fanout", fanout),
            ("ephemeral_channel", ephemeral_channel)]


def main():
    p = argparse.ArgumentParser()
    for f in ("server", "mode", "tcp", "http", "lookup-http", "auth-http", "tls-dir", "run"):
        p.add_argument("--" + f, default="")
    p.add_argument("--secret", default="compat-secret")
    p.add_argument("--max-msg-size", type=int, default=1048576)
    args = p.parse_args()
    logging.basicConfig(level=os.environ.get("COMPAT_PY_LOG", "CRITICAL"))
    e = Env(args)
    failed = 0
    for name, fn in PLAIN if args.mode == "plain" else secure_scenarios(e):
        if not re.search(args.run, name):
            continue
        e.name = name
        start = time.monotonic()
        try:
            IOLoop.current().run_sync(lambda: fn(e), timeout=SCENARIO_TIMEOUT)
            err = None
        except Failure as f:
            err = str(f)
        except Exception:
            err = " | ".join(traceback.format_exc().strip().splitlines()[-4:])
        finally:
            close_clients()
            IOLoop.current().run_sync(lambda: asyncio.sleep(0.05))
        ms = int((time.monotonic() - start) * 1000)
        if err is None:
            print("PASS %s/%s %dms" % (args.mode, name, ms), flush=True)
        else:
            failed += 1
            print("FAIL %s/%s %dms: %s" % (args.mode, name, ms, err), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

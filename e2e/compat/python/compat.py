"""pynsq half of the official-client compatibility matrix.

e2e/compat/run.sh runs this with the pinned pynsq/tornado venv once per broker mode, `plain`
(TLS optional) and `secure` (TLS required, mTLS, external AUTH). Every scenario prints
`PASS <mode>/<name> <ms>` or `FAIL <mode>/<name> <ms>: <why>`; the exit code is 1 if any failed.
Flags match the go-nsq suite (see ../go/main.go). Plumbing lives in harness.py, the
secure-only scenarios in secure.py.
"""
import argparse
import hashlib
import logging
import os
import re
import sys
import time
import traceback
import urllib.error

import asyncio

from tornado.ioloop import IOLoop

from harness import Env, Failure, Inbox, close_clients, raw_oversized_pub, round_trip, until
import secure

SCENARIO_TIMEOUT = 45


# -- scenarios ---------------------------------------------------------------------------
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
    await w.send("dpub", topic, 1000, b"later")
    await w.send("pub", topic, b"now")
    now_acked = time.monotonic() - start
    await box.wait("now", "later", timeout=12)  # nsqd: up to its 5 s queue-scan refresh
    later = [g for g in box.got if g[0] == "later"][0]
    if later[2] - start < 0.95:
        raise Failure("deferred message arrived after %.3fs, want >= 0.95s" % (later[2] - start))
    # A PUB whose ack took most of the deferral (a stalled disk) may rightly lose the race.
    if now_acked < 0.8 and box.got[0][0] != "now":
        raise Failure("deferred message overtook the immediate one (acked after %.3fs): %s"
                      % (now_acked, box.describe()))


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


async def ephemeral_topic(e):
    """A `#ephemeral` topic vanishes once its only (ephemeral) channel loses its consumer."""
    topic, box = e.topic() + "#ephemeral", Inbox()
    r = await e.reader(topic, "c#ephemeral", box=box)
    w = await e.writer()
    await w.send("pub", topic, b"short-lived")
    w.close()
    await box.wait("short-lived")
    r.close()
    await until(lambda: e.topic_stats(topic) is None, 5, "ephemeral topic still listed")


async def large_message(e):
    """Exactly the broker's limit round-trips intact; limit+1 is refused with E_BAD_MESSAGE."""
    limit = e.a.max_msg_size
    topic, box = e.topic(), Inbox()
    await e.reader(topic, "c", box=box)
    body = bytearray((b"0123456789abcdef" * (limit // 16 + 1))[:limit])
    body[0], body[-1] = ord("A"), ord("Z")
    body = bytes(body)
    w = await e.writer()
    await w.send("pub", topic, body)
    await until(lambda: box.got, 10, box.describe)
    back = box.got[0][3].body
    if hashlib.sha256(back).digest() != hashlib.sha256(body).digest():
        raise Failure("large body changed in transit (%d bytes back)" % len(back))
    # The size header alone decides: both brokers must refuse limit+1 before any body byte.
    want = "E_BAD_MESSAGE PUB message too big %d > %d" % (limit + 1, limit)
    got = raw_oversized_pub(e.a.tcp, topic, limit + 1)
    if got != want:
        raise Failure("raw PUB header of %d bytes: want %r, got %r" % (limit + 1, want, got))
    # Through pynsq, which writes the whole body before reading: rustqueued drains what the
    # client still sends after the error so the client reads it; nsqd closes at once, so
    # pynsq usually sees the connection close before the error frame.
    w = await e.writer()
    try:
        await w.send("pub", topic, body + b"!")
    except Failure as err:
        text = " ".join([str(err)] + w.errors)
    else:
        raise Failure("publish of %d bytes (limit+1) was accepted" % (limit + 1))
    if "E_BAD_MESSAGE" not in text:
        if e.a.server != "nsqd":
            raise Failure("publish of %d bytes (limit+1): want E_BAD_MESSAGE, got %r" % (limit + 1, text))
        print("INFO %s/large_message nsqd closed the connection before pynsq read the error: %s"
              % (e.a.mode, text))


def tls_optional(snappy):
    """TLS without a client certificate on the broker whose TLS is optional (Deflate, or Snappy)."""
    async def run(e):
        kw = dict(tls_v1=True, tls_options=e.tls_options(cert=None))
        if snappy:
            kw.update(deflate=False, snappy=True)
        topic = await round_trip(e, **kw)
        c = e.channel_stats(topic, "c")
        cl = (c or {}).get("clients") or [{}]
        if not cl[0].get("tls") or bool(cl[0].get("snappy")) != snappy:
            raise Failure("/stats does not show tls (snappy=%s) on the consumer: %s" % (snappy, c))
    return run


async def lookup(e):
    topic, box = e.topic(), Inbox()
    e.post("/topic/create?topic=" + topic)

    # nsqd tells the lookup service about a new topic asynchronously: until it has, /lookup
    # answers 404 TOPIC_NOT_FOUND, which is "not yet", not a failure (as in the node suite).
    def listed():
        try:
            return e.get_json(e.a.lookup_http, "/lookup?topic=" + topic).get("producers")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    await until(listed, 10, "topic never listed in /lookup")
    await e.reader(topic, "c", box=box, nsqd=[], lookupd=[e.a.lookup_http])
    w = await e.writer()
    await w.send("pub", topic, b"found via lookup")
    await box.wait("found via lookup")



PLAIN = [("pubsub", pubsub), ("deflate", compressed("deflate")), ("snappy", compressed("snappy")),
         ("mpub", mpub), ("dpub", dpub), ("req", req), ("touch", touch), ("rdy", rdy),
         ("fanout", fanout), ("sample", sample), ("ephemeral_channel", ephemeral_channel),
         ("ephemeral_topic", ephemeral_topic), ("large_message", large_message),
         ("tls", tls_optional(False)), ("tls_snappy", tls_optional(True)), ("lookup", lookup)]


def secure_scenarios(e):
    return secure.scenarios(e) + [
        ("snappy", compressed("snappy")), ("mpub", mpub), ("dpub", dpub), ("req", req),
        ("touch", touch), ("fanout", fanout), ("ephemeral_channel", ephemeral_channel)]


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

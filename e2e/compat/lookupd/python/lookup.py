"""The lookup parity scenarios with pynsq's Reader(lookupd_http_addresses=...) against a lookup
service (official nsqlookupd with nsqd registering, or rustqueue-discovery with rustqueued) and
two brokers. e2e/compat/lookupd/run.sh starts them; the go-nsq twin is ../go/main.go.

Every scenario prints `PASS <name> <ms>` or `FAIL <name> <ms>: <why>` and one ledger line
`ledger <name>: published N received M missing K`; the exit status is 1 if any failed.
"""
import argparse
import asyncio
import json
import logging
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.request

import nsq
from tornado.ioloop import IOLoop

SCENARIO_TIMEOUT = 60
# How soon /lookup must stop listing a broker that stopped (seconds).
LEAVE_BOUND = 5


class Failure(Exception):
    pass


class Ledger:
    def __init__(self):
        self.published = set()
        self.received = {}

    def handler(self, m):
        body = m.body.decode(errors="replace")
        self.received[body] = self.received.get(body, 0) + 1
        return True

    def missing(self):
        return sum(1 for b in self.published if b not in self.received)

    def line(self, name):
        got = sum(1 for b in self.received if b in self.published)
        return "ledger %s: published %d received %d missing %d" % (
            name, len(self.published), got, self.missing())

    def publish(self, web, topic, tag, n):
        for i in range(n):
            body = "%s-%s-%d" % (topic, tag, i)
            req = urllib.request.Request("http://%s/pub?topic=%s" % (web, topic),
                                         data=body.encode(), method="POST")
            with urllib.request.urlopen(req, timeout=5) as r:
                r.read()
            self.published.add(body)

    async def wait_all(self, limit):
        await until(lambda: self.missing() == 0, limit, "consumer still misses messages")


async def until(ok, limit, why):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if ok():
            return
        await asyncio.sleep(0.05)
    raise Failure("after %ss: %s" % (limit, why() if callable(why) else why))


class Env:
    def __init__(self, a):
        self.a = a
        self.readers = []
        self.writers = []

    def producers(self, topic):
        req = urllib.request.Request("http://%s/lookup?topic=%s" % (self.a.lookup, topic),
                                     headers={"Accept": "application/vnd.nsq; version=1.0"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        return sorted("%s:%d" % (p["broadcast_address"], p["tcp_port"]) for p in doc["producers"])

    async def wait_producers(self, topic, want, limit):
        start = time.monotonic()
        seen = []

        def ok():
            seen[:] = [self.producers(topic)]
            return seen[0] == sorted(want)
        await until(ok, limit, lambda: "/lookup lists %s, want %s" % (seen[0], sorted(want)))
        return time.monotonic() - start

    def reader(self, topic, ledger):
        r = nsq.Reader(topic=topic, channel="c", message_handler=ledger.handler,
                       lookupd_http_addresses=["http://" + self.a.lookup],
                       lookupd_poll_interval=1, lookupd_poll_jitter=0.1, max_in_flight=20)
        self.readers.append(r)
        return r

    def close(self):
        while self.readers:
            self.readers.pop().close()
        while self.writers:
            w = self.writers.pop()
            w.reconnect_interval = 3600
            for conn in list(w.conns.values()):
                conn.close()


def topic_name(s):
    return "lk-py-%s-%06d" % (s, random.randrange(1000000))


async def discover(e, l):
    """A topic exists on one broker; a Reader given only the lookup address finds it."""
    t = topic_name("discover")
    l.publish(e.a.b1_http, t, "a", 40)
    await e.wait_producers(t, [e.a.b1_tcp], 10)
    e.reader(t, l)
    await l.wait_all(15)


async def new_topic(e, l):
    """The Reader starts before the topic exists (lookup 404); it then appears on both brokers."""
    t = topic_name("new")
    if e.producers(t) is not None:
        raise Failure("topic listed before it exists")
    e.reader(t, l)
    await asyncio.sleep(1)
    l.publish(e.a.b1_http, t, "a", 20)
    l.publish(e.a.b2_http, t, "b", 20)
    await l.wait_all(20)


def message_count(web, topic):
    """topic's message_count in a broker's /stats (0 when absent)."""
    with urllib.request.urlopen("http://%s/stats?format=json&topic=%s" % (web, topic),
                                timeout=5) as r:
        doc = json.loads(r.read())
    return sum(t["message_count"] for t in doc["topics"] if t["topic_name"] == topic)


async def writer_pub(w, topic, msgs):
    """PUB (one body) or MPUB (a list) through a pynsq Writer; raises unless the answer is OK."""
    fut = asyncio.get_event_loop().create_future()

    def done(conn, data):
        if not fut.done():
            fut.set_result(data)
    if isinstance(msgs, list):
        w.mpub(topic, msgs, callback=done)
    else:
        w.pub(topic, msgs, callback=done)
    data = await asyncio.wait_for(fut, 10)
    if data != b"OK":
        raise Failure("publish through the gateway answered %r" % (data,))


async def gateway_publish(e, l):
    """Two pynsq Writers (one connection each) publish through the gateway (PUB, MPUB), plus HTTP
    /pub through it; the messages land on both brokers; a Reader via lookup receives all."""
    t = topic_name("gateway")
    writers = [nsq.Writer([e.a.gateway_tcp]) for _ in range(2)]
    e.writers.extend(writers)
    await until(lambda: all(w.conns for w in writers), 10,
                "the Writers did not connect through the gateway")
    for i, w in enumerate(writers):
        for j in range(20):
            body = "%s-tcp-%d-%d" % (t, i, j)
            await writer_pub(w, t, body.encode())
            l.published.add(body)
        batch = ["%s-mpub-%d-%d" % (t, i, j) for j in range(5)]
        await writer_pub(w, t, [b.encode() for b in batch])
        l.published.update(batch)
    l.publish(e.a.gateway_http, t, "http", 10)
    n1, n2 = message_count(e.a.b1_http, t), message_count(e.a.b2_http, t)
    print("gateway spread: broker 1 holds %d, broker 2 holds %d of %d" % (n1, n2, len(l.published)))
    if n1 == 0 or n2 == 0 or n1 + n2 != len(l.published):
        raise Failure("brokers hold %d and %d of %d acknowledged" % (n1, n2, len(l.published)))
    await e.wait_producers(t, [e.a.b1_tcp, e.a.b2_tcp], 10)
    e.reader(t, l)
    await l.wait_all(15)


async def broker_leaves(e, l):
    """The topic lives on both brokers; broker 2 stops; /lookup drops it within LEAVE_BOUND and the
    Reader keeps receiving from broker 1."""
    t = topic_name("leave")
    l.publish(e.a.b1_http, t, "a", 20)
    l.publish(e.a.b2_http, t, "b", 20)
    await e.wait_producers(t, [e.a.b1_tcp, e.a.b2_tcp], 10)
    e.reader(t, l)
    await l.wait_all(15)
    os.kill(e.a.leave_pid, signal.SIGTERM)
    took = await e.wait_producers(t, [e.a.b1_tcp], LEAVE_BOUND)
    print("lookup dropped the stopped broker after %d ms" % (took * 1000))
    l.publish(e.a.b1_http, t, "c", 20)
    await l.wait_all(15)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lookup", required=True)
    p.add_argument("--b1-tcp", required=True)
    p.add_argument("--b1-http", required=True)
    p.add_argument("--b2-tcp", required=True)
    p.add_argument("--b2-http", required=True)
    p.add_argument("--leave-pid", type=int, required=True)
    p.add_argument("--gateway-tcp", help="rustqueue-gateway TCP address (adds gateway-publish)")
    p.add_argument("--gateway-http")
    a = p.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    e = Env(a)
    failed = False
    scenarios = [("discover", discover), ("new-topic", new_topic)]
    if a.gateway_tcp:
        # Before broker-leaves, which stops broker 2.
        scenarios.append(("gateway-publish", gateway_publish))
    scenarios.append(("broker-leaves", broker_leaves))
    for name, fn in scenarios:
        l = Ledger()
        start = time.monotonic()
        err = None
        try:
            IOLoop.current().run_sync(lambda: fn(e, l), timeout=SCENARIO_TIMEOUT)
        except Exception as ex:  # a scenario failure of any kind is reported, not raised
            err = "%s: %s" % (type(ex).__name__, ex)
        finally:
            e.close()
            IOLoop.current().run_sync(lambda: asyncio.sleep(0.1))
        if err is None and l.missing():
            err = "ledger: %d missing" % l.missing()
        if err is None and not l.published:
            err = "nothing was published"
        ms = int((time.monotonic() - start) * 1000)
        if err:
            failed = True
            print("FAIL %s %d: %s" % (name, ms, err.replace("\n", " ")))
        else:
            print("PASS %s %d" % (name, ms))
        print(l.line(name))
        sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""rustqueued joining an existing NSQ fleet: official nsqlookupd v1.3.0, official nsqd v1.3.0
and official nsqadmin v1.3.0, with rustqueued registering to the same nsqlookupd
(`RUSTQUEUE_LOOKUPD_TCP_ADDRESSES`, nsqd's `--lookupd-tcp-address`).

What a user moving a node over relies on, each a scenario printing `PASS <name> <ms>` or
`FAIL <name> <ms>: <why>`:
  registers      both daemons appear in nsqlookupd's /nodes and /lookup as topics appear
  consume        a pynsq Reader given only lookupd_http_addresses drains the topic from both
                 daemons (ledger: published N received M missing 0)
  channels       the Reader's channel is registered by both; a channel deleted on rustqueued
                 is unregistered (nsqlookupd's log: it keeps listing the name, as for nsqd)
                 and a topic deleted on rustqueued loses rustqueued as its producer
  nsqadmin       nsqadmin's API lists rustqueued beside nsqd: nodes, topics, per-node stats
  reconnect      nsqlookupd restarted: rustqueued registers everything again by itself
  leaves         rustqueued stopped: nsqlookupd forgets it at once (the connection closed)

Usage: fleet.py --nsq-bin DIR --nsqlookupd BIN --nsqadmin BIN --rustqueued BIN
Exit status 1 if any scenario failed.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import nsq
from tornado.ioloop import IOLoop

TOPIC = "fleet"
# How soon a registration change must show in nsqlookupd (seconds); rustqueued follows its
# registry every 200 ms, nsqd notifies at once.
REGISTER_BOUND = 5


class Failure(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(method, url, body=None, accept=None):
    req = urllib.request.Request(url, data=body, method=method)
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(url):
    status, text = http("GET", url)
    if status != 200:
        raise Failure("GET %s: %d %s" % (url, status, text[:200]))
    return json.loads(text)


def until(check, what, limit=REGISTER_BOUND):
    deadline = time.time() + limit
    last = None
    while time.time() < deadline:
        try:
            ok, last = check()
            if ok:
                return last
        except (OSError, Failure, ValueError) as e:
            last = repr(e)
        time.sleep(0.1)
    raise Failure("%s within %ss; last seen: %s" % (what, limit, last))


class Fleet:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.procs = {}
        self.lookup_tcp, self.lookup_http = free_port(), free_port()
        self.nsqd_tcp, self.nsqd_http = free_port(), free_port()
        self.rq_tcp, self.rq_http = free_port(), free_port()
        self.admin_http = free_port()

    def start(self, name, cmd, env=None, ping=None):
        log = open(os.path.join(self.work, name + ".log"), "ab")
        self.procs[name] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if ping:
            until(lambda: (http("GET", ping)[0] == 200, None), "%s answering %s" % (name, ping), 20)

    def stop(self, name, sig=signal.SIGTERM):
        p = self.procs.pop(name, None)
        if p and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self):
        for name in list(self.procs):
            self.stop(name)

    def lookupd(self):
        self.start("nsqlookupd", [
            self.args.nsqlookupd,
            "--tcp-address=127.0.0.1:%d" % self.lookup_tcp,
            "--http-address=127.0.0.1:%d" % self.lookup_http,
            "--broadcast-address=127.0.0.1",
        ], ping="http://127.0.0.1:%d/ping" % self.lookup_http)

    def daemons(self):
        nsqd_data = os.path.join(self.work, "nsqd")
        os.makedirs(nsqd_data, exist_ok=True)
        self.start("nsqd", [
            os.path.join(self.args.nsq_bin, "nsqd"),
            "--tcp-address=127.0.0.1:%d" % self.nsqd_tcp,
            "--http-address=127.0.0.1:%d" % self.nsqd_http,
            "--broadcast-address=127.0.0.1",
            "--lookupd-tcp-address=127.0.0.1:%d" % self.lookup_tcp,
            "--data-path=" + nsqd_data,
        ], ping="http://127.0.0.1:%d/ping" % self.nsqd_http)
        config = os.path.join(self.work, "rustqueued.toml")
        with open(config, "w") as fh:
            # the test machine's free disk must not throttle publishing
            fh.write("[storage]\ndisk_high_watermark_percent = 100\n"
                     "disk_low_watermark_percent = 99\nmin_free_bytes = 1\n")
        env = dict(os.environ)
        env.update({
            "RUSTQUEUE_CONFIG": config,
            "RUSTQUEUE_TCP_ADDRESS": "127.0.0.1:%d" % self.rq_tcp,
            "RUSTQUEUE_HTTP_ADDRESS": "127.0.0.1:%d" % self.rq_http,
            "RUSTQUEUE_BROADCAST_ADDRESS": "127.0.0.1",
            "RUSTQUEUE_DATA_PATH": os.path.join(self.work, "rustqueued"),
            "RUSTQUEUE_LOOKUPD_TCP_ADDRESSES": "127.0.0.1:%d" % self.lookup_tcp,
        })
        self.start("rustqueued", [self.args.rustqueued], env=env,
                   ping="http://127.0.0.1:%d/ping" % self.rq_http)
        self.start("nsqadmin", [
            self.args.nsqadmin,
            "--http-address=127.0.0.1:%d" % self.admin_http,
            "--lookupd-http-address=127.0.0.1:%d" % self.lookup_http,
        ], ping="http://127.0.0.1:%d/ping" % self.admin_http)

    def log(self, name):
        with open(os.path.join(self.work, name + ".log"), errors="replace") as fh:
            return fh.read()

    def lookup(self, path):
        return get_json("http://127.0.0.1:%d%s" % (self.lookup_http, path))

    def producer_ports(self, path):
        return sorted(p["tcp_port"] for p in self.lookup(path).get("producers", []))

    def channels_of(self, topic):
        status, text = http("GET", "http://127.0.0.1:%d/channels?topic=%s" % (self.lookup_http, topic))
        return json.loads(text).get("channels", []) if status == 200 else []


def publish(http_port, topic, tag, n):
    bodies = []
    for i in range(n):
        body = "%s-%d" % (tag, i)
        status, text = http("POST", "http://127.0.0.1:%d/pub?topic=%s" % (http_port, topic),
                            body.encode())
        if status != 200:
            raise Failure("publish to :%d: %d %s" % (http_port, status, text))
        bodies.append(body)
    return bodies


def consume_via_lookupd(lookup_http, topic, channel, want, limit=60):
    got = {}

    def handler(m):
        body = m.body.decode()
        got[body] = got.get(body, 0) + 1
        if all(b in got for b in want):
            IOLoop.current().stop()
        return True

    reader = nsq.Reader(topic=topic, channel=channel, message_handler=handler,
                        lookupd_http_addresses=["http://127.0.0.1:%d" % lookup_http],
                        lookupd_poll_interval=1, max_in_flight=50)
    loop = IOLoop.current()
    timeout = loop.call_later(limit, loop.stop)
    loop.start()
    loop.remove_timeout(timeout)
    reader.close()
    return got


def scenario_registers(f):
    f.rq_bodies = publish(f.rq_http, TOPIC, "rq", 40)
    f.nsqd_bodies = publish(f.nsqd_http, TOPIC, "nsqd", 40)
    want = sorted([f.nsqd_tcp, f.rq_tcp])
    until(lambda: (f.producer_ports("/lookup?topic=" + TOPIC) == want,
                   f.producer_ports("/lookup?topic=" + TOPIC)),
          "both daemons registered for the topic")
    nodes = f.lookup("/nodes")["producers"]
    rq = [n for n in nodes if n["tcp_port"] == f.rq_tcp]
    if not rq or TOPIC not in rq[0]["topics"] or rq[0]["http_port"] != f.rq_http:
        raise Failure("rustqueued in /nodes: %s" % nodes)
    if not rq[0].get("version"):
        raise Failure("rustqueued has no version in /nodes: %s" % rq[0])


def scenario_consume(f):
    want = f.rq_bodies + f.nsqd_bodies
    got = consume_via_lookupd(f.lookup_http, TOPIC, "c", want)
    missing = [b for b in want if b not in got]
    print("ledger consume: published %d received %d missing %d"
          % (len(want), sum(1 for b in want if b in got), len(missing)))
    if missing:
        raise Failure("%d messages missing, e.g. %s" % (len(missing), missing[:3]))


def scenario_channels(f):
    until(lambda: (f.channels_of(TOPIC) == ["c"], f.channels_of(TOPIC)), "channel c registered")
    # a channel only rustqueued has, then deleted there
    http("POST", "http://127.0.0.1:%d/channel/create?topic=%s&channel=only-rq" % (f.rq_http, TOPIC))
    until(lambda: ("only-rq" in f.channels_of(TOPIC), f.channels_of(TOPIC)),
          "a channel created on rustqueued registered")
    http("POST", "http://127.0.0.1:%d/channel/delete?topic=%s&channel=only-rq" % (f.rq_http, TOPIC))
    # nsqlookupd keeps listing a channel name after its last producer unregisters it (as it
    # does for nsqd), so the unregistration shows only in its log
    unregistered = "UNREGISTER category:channel key:%s subkey:only-rq" % TOPIC
    until(lambda: (unregistered in f.log("nsqlookupd"), None),
          "a channel deleted on rustqueued unregistered")
    # a topic only rustqueued has, then deleted there
    publish(f.rq_http, "fleet-gone", "g", 1)
    until(lambda: (f.producer_ports("/lookup?topic=fleet-gone") == [f.rq_tcp],
                   f.producer_ports("/lookup?topic=fleet-gone")),
          "a topic created on rustqueued registered")
    http("POST", "http://127.0.0.1:%d/topic/delete?topic=fleet-gone" % f.rq_http)
    until(lambda: (f.producer_ports("/lookup?topic=fleet-gone") == [],
                   f.producer_ports("/lookup?topic=fleet-gone")),
          "a topic deleted on rustqueued unregistered")


def scenario_nsqadmin(f):
    admin = "http://127.0.0.1:%d" % f.admin_http
    nodes = until(lambda: (len(get_json(admin + "/api/nodes").get("nodes", [])) == 2,
                           get_json(admin + "/api/nodes")), "nsqadmin lists both daemons")
    rq = [n for n in nodes["nodes"] if n["tcp_port"] == f.rq_tcp]
    if not rq:
        raise Failure("nsqadmin /api/nodes has no rustqueued: %s" % nodes)
    topics = get_json(admin + "/api/topics")
    if TOPIC not in topics.get("topics", []):
        raise Failure("nsqadmin /api/topics: %s" % topics)
    node_id = "127.0.0.1:%d" % f.rq_http
    node = get_json(admin + "/api/nodes/" + node_id)
    names = [t["topic_name"] for t in node.get("topics", [])]
    if TOPIC not in names:
        raise Failure("nsqadmin /api/nodes/%s topics %s (message %s)"
                      % (node_id, names, node.get("message")))
    topic = get_json(admin + "/api/topics/" + TOPIC)
    hosts = sorted(n["node"] for n in topic.get("nodes", []))
    if node_id not in hosts or topic.get("message"):
        raise Failure("nsqadmin /api/topics/%s: nodes %s message %r"
                      % (TOPIC, hosts, topic.get("message")))
    channels = [c["channel_name"] for c in topic.get("channels", [])]
    if "c" not in channels:
        raise Failure("nsqadmin /api/topics/%s channels %s" % (TOPIC, channels))


def scenario_reconnect(f):
    f.stop("nsqlookupd")
    f.lookupd()
    until(lambda: (f.rq_tcp in f.producer_ports("/lookup?topic=" + TOPIC),
                   f.producer_ports("/lookup?topic=" + TOPIC)),
          "rustqueued registered again with a restarted nsqlookupd")
    until(lambda: (f.channels_of(TOPIC) == ["c"], f.channels_of(TOPIC)),
          "its channel registered again")


def scenario_leaves(f):
    f.stop("rustqueued")
    until(lambda: (all(n["tcp_port"] != f.rq_tcp for n in f.lookup("/nodes")["producers"]),
                   f.lookup("/nodes")["producers"]),
          "nsqlookupd forgets a stopped rustqueued")


SCENARIOS = [
    ("registers", scenario_registers),
    ("consume", scenario_consume),
    ("channels", scenario_channels),
    ("nsqadmin", scenario_nsqadmin),
    ("reconnect", scenario_reconnect),
    ("leaves", scenario_leaves),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nsq-bin", required=True)
    ap.add_argument("--nsqlookupd", required=True)
    ap.add_argument("--nsqadmin", required=True)
    ap.add_argument("--rustqueued", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rq-fleet-")
    f = Fleet(args, work)
    passed = failed = 0
    try:
        f.lookupd()
        f.daemons()
        for name, run in SCENARIOS:
            start = time.time()
            try:
                run(f)
                passed += 1
                print("PASS %s %d" % (name, (time.time() - start) * 1000), flush=True)
            except (Failure, OSError, ValueError, KeyError) as e:
                failed += 1
                print("FAIL %s %d: %s" % (name, (time.time() - start) * 1000, e), flush=True)
                break  # later scenarios build on the earlier ones
    finally:
        f.stop_all()
        if failed:
            for log in sorted(os.listdir(work)):
                if log.endswith(".log"):
                    with open(os.path.join(work, log), errors="replace") as fh:
                        tail = fh.readlines()[-15:]
                    print("--- %s (last lines)\n%s" % (log, "".join(tail)), file=sys.stderr)
        if not args.keep:
            subprocess.run(["rm", "-rf", work])
    print("compat-fleet: %d passed, %d failed" % (passed, failed))
    return 1 if failed or passed < len(SCENARIOS) else 0


if __name__ == "__main__":
    sys.exit(main())

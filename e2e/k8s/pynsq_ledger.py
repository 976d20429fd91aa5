"""A producer and a consumer with the official pynsq client, keeping a ledger of what was
acknowledged and what was delivered, for the operator's rollout scenario
(e2e/k8s/src/ledger.rs drives it).

usage: pynsq_ledger.py <work dir> <topic> <channel> <messages per second>

<work dir>/addresses holds the brokers' TCP addresses (`ip:port`, one a line); the test rewrites
it as broker Pods come and go (a replaced Pod has a new IP) and this process connects its
Writer and Reader to every new address. The Writer publishes `<seq>` at a steady rate over one
of its open connections; a publish counts as acknowledged only when the broker answered OK.
The Reader FINs every message. <work dir>/progress is rewritten every 250 ms with the counts.
Once <work dir>/stop exists, publishing stops and the process waits until every acknowledged
message was delivered (or <work dir>/stop's content, a number of seconds, ran out), prints the
ledger as JSON on stdout and exits 0.
"""
import json
import logging
import os
import sys
import time

import nsq
from tornado.ioloop import IOLoop, PeriodicCallback


def read_addresses(path):
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    work, topic, channel, rate = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    loop = IOLoop.current()
    acked, failed, delivered = [], [0], {}
    errors = {}
    seq = [0]
    initial = read_addresses(os.path.join(work, "addresses"))
    if not initial:
        sys.stderr.write("no broker addresses in %s/addresses\n" % work)
        return 2
    known = set(initial)
    stop = {"at": None, "settle": 0.0}

    def on_message(message):
        body = message.body.decode("utf-8", "replace")
        delivered[body] = delivered.get(body, 0) + 1
        return True  # FIN

    reader = nsq.Reader(
        topic=topic,
        channel=channel,
        message_handler=on_message,
        nsqd_tcp_addresses=initial,
        max_in_flight=50,
        heartbeat_interval=1,
    )
    writer = nsq.Writer(initial, reconnect_interval=1.0, heartbeat_interval=1)

    def follow_addresses():
        for addr in read_addresses(os.path.join(work, "addresses")):
            if addr in known:
                continue
            known.add(addr)
            host, port = addr.rsplit(":", 1)
            writer.connect_to_nsqd(host, int(port))
            reader.connect_to_nsqd(host, int(port))

    def publish():
        if stop["at"] is not None:
            return
        seq[0] += 1
        body = str(seq[0])

        def done(conn, data):
            if isinstance(data, Exception) or data != b"OK":
                failed[0] += 1
                key = str(data)[:80]
                errors[key] = errors.get(key, 0) + 1
            else:
                acked.append(body)

        writer.pub(topic, body.encode(), callback=done)

    def missing():
        return [b for b in acked if b not in delivered]

    def report():
        write_atomically(
            os.path.join(work, "progress"),
            json.dumps({"published": seq[0], "acked": len(acked), "failed": failed[0],
                        "delivered": len(delivered), "missing": len(missing())}),
        )
        stop_file = os.path.join(work, "stop")
        if stop["at"] is None and os.path.exists(stop_file):
            with open(stop_file) as f:
                stop["settle"] = float(f.read().strip() or "30")
            stop["at"] = time.monotonic()
        if stop["at"] is not None:
            settled = not missing()
            if settled or time.monotonic() - stop["at"] > stop["settle"]:
                loop.stop()

    PeriodicCallback(follow_addresses, 250).start()
    PeriodicCallback(publish, 1000.0 / rate).start()
    PeriodicCallback(report, 250).start()
    loop.start()
    print(json.dumps({"published": seq[0], "acked": acked, "failed": failed[0],
                      "errors": errors, "delivered": delivered}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

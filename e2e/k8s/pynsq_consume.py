"""Reads N messages from a RustQueue broker with the official pynsq client and prints their
bodies, one per line; exits 0 once N arrived, 1 on timeout. Used by the operator e2e
(e2e/k8s/tests/operator.rs) with the pinned pynsq venv that scripts/deps.sh installs.

usage: pynsq_consume.py <nsqd tcp address | lookupd http://url> <topic> <channel> <count>
       [timeout seconds]

An http:// address is a lookupd (rustqueue-discovery): the Reader finds the brokers there, as
consumers configured with only `lookupd_http_addresses` do.
"""
import logging
import sys

import nsq
from tornado.ioloop import IOLoop


def main():
    addr, topic, channel, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    bodies = []
    outcome = {"code": 1}

    def handler(message):
        bodies.append(message.body.decode("utf-8", "replace"))
        if len(bodies) >= count:
            outcome["code"] = 0
            IOLoop.current().stop()
        return True

    def give_up():
        sys.stderr.write("timed out with %d of %d messages\n" % (len(bodies), count))
        IOLoop.current().stop()

    if addr.startswith("http://"):
        where = {"lookupd_http_addresses": [addr], "lookupd_poll_interval": 1}
    else:
        where = {"nsqd_tcp_addresses": [addr]}
    reader = nsq.Reader(
        topic=topic,
        channel=channel,
        message_handler=handler,
        max_in_flight=count,
        heartbeat_interval=1,
        **where,
    )
    IOLoop.current().call_later(timeout, give_up)
    IOLoop.current().start()
    reader.close()
    for b in bodies:
        print(b)
    return outcome["code"]


if __name__ == "__main__":
    sys.exit(main())

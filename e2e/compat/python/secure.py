"""The pynsq scenarios that only make sense on the secure broker: TLS required, client
certificates verified against the test CA, AUTH against lib/auth_server.py (`compat-secret`,
TLS and the client certificate's CN, TTL 1 s, publish+subscribe on `^compat-` topics).
"""
import asyncio
import random

from harness import Failure, Inbox, round_trip, until


async def tls_auth_pubsub(e):
    topic = await round_trip(e)
    c = e.channel_stats(topic, "c")
    cl = (c or {}).get("clients") or [{}]
    if not (cl[0].get("tls") and cl[0].get("deflate") and cl[0].get("authed")):
        raise Failure("/stats does not show tls+deflate+authed: %s" % c)


def refused(codes=(), topic=None, **kw):
    """Connect with the overrides kw and publish (on `topic`, default a granted one): the
    connection or the publish must fail, with one of `codes` if any are given."""
    async def run(e):
        w = await e.writer(**kw)
        ok = False
        if w.conns:
            try:
                await w.send("pub", topic or e.topic(), b"must be refused")
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


async def auth_sub_not_granted(e):
    """SUB on a topic outside the grant is refused with E_UNAUTHORIZED, a fatal error (the
    broker closes the connection); nothing is delivered and the topic is not created.
    pynsq sends SUB without waiting for its answer and reports the refusal as a connection
    error event."""
    topic, box = "forbidden-sub-py-%s-%06d" % (e.a.mode, random.randrange(1000000)), Inbox()
    r = await e.reader(topic, "c", box=box, wait=False)
    await until(lambda: any("E_UNAUTHORIZED" in x for x in r.errors), 5,
                lambda: "pynsq never reported E_UNAUTHORIZED for the SUB: %s" % r.errors)
    await until(lambda: r.closes > 0, 5,
                "the broker kept the connection open after the fatal E_UNAUTHORIZED")
    if box.got:
        raise Failure("refused subscriber got " + box.describe())
    if e.topic_stats(topic) is not None:
        raise Failure("the refused SUB created topic " + topic)


def scenarios(e):
    return [
        ("tls_auth_pubsub", tls_auth_pubsub),
        ("tls_required", refused(("E_TLS_REQUIRED", "TLS required"), tls_v1=None,
                                 tls_options=None, auth_secret=None)),
        # trusts the CA but presents no client certificate / one from a rogue CA
        ("mtls_no_client_cert", refused(tls_options=e.tls_options(cert=None))),
        ("mtls_untrusted_client_cert", refused(tls_options=e.tls_options(cert="rogue-client"))),
        ("auth_ttl_refresh", auth_ttl_refresh),
        ("auth_denied", refused(("E_AUTH_FAILED", "E_UNAUTHORIZED"), auth_secret="wrong-secret")),
        ("auth_topic_not_granted", refused(("E_UNAUTHORIZED",), topic="forbidden-topic")),
        ("auth_sub_not_granted", auth_sub_not_granted),
    ]

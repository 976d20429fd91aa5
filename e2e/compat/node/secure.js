'use strict'
// The nsqjs scenarios that only make sense on the secure broker: TLS required, client
// certificates verified against the test CA, AUTH against lib/auth_server.py (`compat-secret`,
// TLS and the client certificate's CN, TTL 1 s, publish+subscribe on `^compat-` topics).

const H = require('./harness')

const { A, Failure, sleep, until, topic, getJSON, Inbox, reader, writer, send } = H

async function tlsAuthPubsub() {
  const t = await H.roundTrip()
  await H.clientHas(t, 'c', 'tls+deflate+authed', (c) => c.tls && c.deflate && c.authed)
}

// refused connects with the overrides `over` and publishes (on `t`, default a granted topic):
// the connection or the publish must fail, with one of `codes` if any are given.
const refused = (codes, over, t) => async () => {
  const w = await writer(over)
  if (w.ready && w.errors.length === 0) {
    try {
      await send(w, 'publish', t || topic(), 'must be refused')
      throw new Failure('publish succeeded, want it refused')
    } catch (e) {
      if (e.message === 'publish succeeded, want it refused') throw e
      w.errors.push(e.message)
    }
  }
  await sleep(100)
  const text = w.errors.join(' ')
  if (codes.length && !codes.some((c) => text.includes(c))) {
    throw new Failure(`refused with ${JSON.stringify(text)}, want one of ${codes}`)
  }
}

async function authTTLRefresh() {
  const before = (await getJSON(A.authHttp, '/requests')).requests
  const t = topic()
  const w = await writer()
  await send(w, 'publish', t, 'before expiry')
  await sleep(1200)
  await send(w, 'publish', t, 'after expiry')
  const n = (await getJSON(A.authHttp, '/requests')).requests - before
  if (n < 2) throw new Failure(`auth server saw ${n} requests, want >= 2 (AUTH + refresh)`)
}

// SUB on a topic outside the grant is refused with E_UNAUTHORIZED, a fatal error after which
// the connection closes (nsqjs also closes on any fatal error itself); nothing is delivered
// and the topic is not created. nsqjs sends SUB without waiting for its answer and reports
// the refusal as a Reader 'error' event, then 'nsqd_closed'.
async function authSubNotGranted(over = {}) {
  const t = `forbidden-sub-js-${A.mode}-${Math.floor(Math.random() * 1e6)}`
  const box = new Inbox()
  const r = await reader(t, 'c', { box, wait: false, ...over })
  await until(() => r.errors.some((x) => x.includes('E_UNAUTHORIZED')), 5000,
    () => `nsqjs never reported E_UNAUTHORIZED for the SUB: ${r.errors}`)
  await until(() => r.closes > 0, 5000, 'the connection stayed open after the fatal E_UNAUTHORIZED')
  if (box.got.length) throw new Failure(`refused subscriber got ${box.describe()}`)
  if ((await H.topicStats(t)) !== null) throw new Failure(`the refused SUB created topic ${t}`)
}

const SCENARIOS = [
  ['tls_auth_pubsub', tlsAuthPubsub],
  ['tls_required', refused(['E_TLS_REQUIRED', 'TLS required'], { tls: false, authSecret: null, deflate: false })],
  ['mtls_no_client_cert', refused([], { cert: null, key: null })],
  ['mtls_untrusted_client_cert', (...a) => refused([], { cert: H.tlsFile('rogue-client.pem'), key: H.tlsFile('rogue-client-key.pem') })(...a)],
  ['auth_ttl_refresh', authTTLRefresh],
  // These three run without Deflate: nsqjs 0.13 crashes (unhandled InflateRaw 'unexpected end
  // of file') when the server closes a deflate stream right after a fatal error frame, as nsqd
  // does on AUTH failure and on E_UNAUTHORIZED.
  ['auth_denied', refused(['E_AUTH_FAILED', 'E_UNAUTHORIZED'], { authSecret: 'wrong-secret', deflate: false })],
  ['auth_topic_not_granted', refused(['E_UNAUTHORIZED'], { deflate: false }, 'forbidden-topic')],
  ['auth_sub_not_granted', () => authSubNotGranted({ deflate: false })],
]

module.exports = { SCENARIOS }

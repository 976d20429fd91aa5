'use strict'
// nsqjs half of the official-client compatibility matrix.
//
// e2e/compat/run.sh runs this with NODE_PATH at the cached nsqjs install, once per broker
// mode: `plain` (TLS optional) and `secure` (TLS required, mTLS, external AUTH). Every
// scenario prints `PASS <mode>/<name> <ms>` or `FAIL <mode>/<name> <ms>: <why>`; the exit
// code is 1 if any failed. Flags match the go-nsq suite (../go/main.go). Plumbing lives in
// harness.js, the secure-only scenarios in secure.js.

const crypto = require('crypto')
const H = require('./harness')
const secure = require('./secure')

const { A, TLS, Failure, sleep, until, topic, post, getJSON, Inbox, reader, writer, send } = H
const { roundTrip, clientHas, channelStats } = H

const SCENARIO_TIMEOUT_MS = 45000

// An nsqjs connection that dies badly throws from inside nsqjs (e.g. an unhandled inflater
// 'error' event); that fails the running scenario instead of the whole suite.
let crash = null
process.on('uncaughtException', (e) => {
  const why = `nsqjs crashed: ${String((e && e.stack) || e).split('\n').slice(0, 3).join(' | ')}`
  if (crash) crash(new Failure(why))
  else console.error(why)
})

// -- scenarios --------------------------------------------------------------------------
const compressed = (kind) => async () => {
  const over = { deflate: kind === 'deflate', snappy: kind === 'snappy' }
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', { box, ...over })
  await clientHas(t, 'c', kind, (c) => c[kind])
  const w = await writer(over)
  const big = `compress me ${kind} `.repeat(2000)
  await send(w, 'publish', t, 'small')
  await send(w, 'publish', t, big)
  await box.wait(['small', big])
}

async function mpub() {
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', { box })
  const w = await writer()
  await send(w, 'publish', t, ['one', 'two', 'three'])
  await box.wait(['one', 'two', 'three'])
  await sleep(300)
  if (box.got.length !== 3) throw new Failure(`want exactly 3 deliveries, got ${box.describe()}`)
}

async function dpub() {
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', { box })
  const w = await writer()
  const start = Date.now()
  // nsqjs 0.13's deferPublish needs the body wrapped in an array (it hands msg straight to
  // produceMessages, which rejects anything else), contrary to its docs.
  await send(w, 'deferPublish', t, ['later'], 1000)
  await send(w, 'publish', t, 'now')
  const nowAcked = Date.now() - start
  await box.wait(['now', 'later'], 12000) // nsqd: up to its 5 s queue-scan refresh
  const later = box.got.find((g) => g.body === 'later')
  if (later.at - start < 950) throw new Failure(`deferred message arrived after ${later.at - start}ms`)
  // A PUB whose ack took most of the deferral (a stalled disk) may rightly lose the race.
  if (nowAcked < 800 && box.got[0].body !== 'now') {
    throw new Failure(`deferred message overtook (acked after ${nowAcked}ms): ${box.describe()}`)
  }
}

async function req() {
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', {
    maxInFlight: 1,
    handler: (m) => {
      box.add(m)
      if (m.attempts === 1) m.requeue(150, false)
      else m.finish()
    },
  })
  const w = await writer()
  await send(w, 'publish', t, 'requeue me')
  await until(() => box.got.length >= 2, 12000, () => box.describe())
  const [a, b] = box.got
  if (a.attempts !== 1 || b.attempts !== 2) throw new Failure(`want attempts 1 then 2: ${box.describe()}`)
  if (b.at - a.at < 100) throw new Failure(`requeued message came back after ${b.at - a.at}ms`)
}

async function touch() {
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', {
    messageTimeout: 1000,
    handler: (m) => {
      box.add(m)
      if (m.attempts > 1) return m.finish()
      setTimeout(() => m.touch(), 700)
      setTimeout(() => m.finish(), 1400)
    },
  })
  const w = await writer()
  await send(w, 'publish', t, 'touch me')
  await until(() => box.got.length > 0, 5000, () => box.describe())
  await sleep(1400 + 1200)
  if (box.got.length !== 1) throw new Failure(`TOUCH did not extend the timeout: ${box.describe()}`)
}

async function rdy() {
  const t = topic()
  const s = { cur: 0, peak: 0, done: 0 }
  await reader(t, 'c', {
    maxInFlight: 2,
    handler: (m) => {
      s.cur++
      s.peak = Math.max(s.peak, s.cur)
      setTimeout(() => {
        s.cur--
        s.done++
        m.finish()
      }, 150)
    },
  })
  const w = await writer()
  await send(w, 'publish', t, [...Array(8).keys()].map((i) => `rdy-${i}`))
  await until(() => s.done >= 8, 10000, () => `handled ${s.done} of 8`)
  if (s.peak !== 2) throw new Failure(`peak concurrency ${s.peak}, want exactly 2 (maxInFlight 2)`)
}

async function fanout() {
  const t = topic()
  const boxes = { workers: new Inbox(), audit: new Inbox() }
  for (const [ch, box] of Object.entries(boxes)) await reader(t, ch, { box })
  const w = await writer()
  await send(w, 'publish', t, ['alpha', 'beta'])
  for (const box of Object.values(boxes)) await box.wait(['alpha', 'beta'])
  await sleep(200)
  for (const [ch, box] of Object.entries(boxes)) {
    if (box.got.length !== 2) throw new Failure(`channel ${ch} got ${box.describe()}`)
  }
}

// Exactly 50 of 100 on rustqueued (deterministic); nsqd samples at random (bound 20..80).
async function sample() {
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', { box, sampleRate: 50 })
  const w = await writer()
  await send(w, 'publish', t, [...Array(100).keys()].map((i) => `sample-${i}`))
  let last = null
  await until(async () => {
    last = await channelStats(t, 'c')
    return last && last.message_count >= 100 && last.depth === 0 && last.in_flight_count === 0
  }, 10000, () => `channel never drained: ${JSON.stringify(last)}`)
  const first = box.got.length
  await sleep(500)
  const n = box.got.length
  if (n !== first) throw new Failure(`sampled-out messages arrived later: ${first} then ${n}`)
  if (A.server === 'nsqd') {
    if (n < 20 || n > 80) throw new Failure(`nsqd delivered ${n} of 100, want 20..80`)
    console.log(`INFO ${A.mode}/sample nsqd delivered ${n} of 100 (random sampling)`)
  } else if (n !== 50) {
    throw new Failure(`delivered ${n} of 100 at sample_rate 50, want exactly 50`)
  }
}

async function ephemeralChannel() {
  const t = topic()
  const ch = 'temporary#ephemeral'
  await post(`/topic/create?topic=${t}`)
  await post(`/channel/create?topic=${t}&channel=keeper`)
  const box = new Inbox()
  const r = await reader(t, ch, { box })
  const w = await writer()
  await send(w, 'publish', t, 'first')
  await box.wait(['first'])
  r.close()
  await until(async () => (await channelStats(t, ch)) === null, 5000, 'ephemeral channel still listed')
  await send(w, 'publish', t, 'stale')
  const again = new Inbox()
  await reader(t, ch, { box: again })
  await send(w, 'publish', t, 'fresh')
  await again.wait(['fresh'])
  await sleep(300)
  if (again.count('stale')) throw new Failure(`re-created channel got the stale message: ${again.describe()}`)
}

// A `#ephemeral` topic vanishes once its only (ephemeral) channel loses its consumer.
async function ephemeralTopic() {
  const t = `${topic()}#ephemeral`
  const box = new Inbox()
  const r = await reader(t, 'c#ephemeral', { box })
  const w = await writer()
  await send(w, 'publish', t, 'short-lived')
  w.close()
  await box.wait(['short-lived'])
  r.close()
  await until(async () => (await H.topicStats(t)) === null, 5000, 'ephemeral topic still listed')
}

// Exactly the broker's limit round-trips intact; limit+1 is refused with E_BAD_MESSAGE.
async function largeMessage() {
  const limit = Number(A.maxMsgSize)
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', { box })
  const body = Buffer.alloc(limit, '0123456789abcdef')
  body[0] = 'A'.charCodeAt(0)
  body[limit - 1] = 'Z'.charCodeAt(0)
  const sha = (b) => crypto.createHash('sha256').update(b).digest('hex')
  await send(await writer(), 'publish', t, body)
  await until(() => box.got.length > 0, 10000, () => box.describe())
  const back = box.got[0].msg.body
  if (sha(back) !== sha(body)) throw new Failure(`large body changed in transit (${back.length} bytes back)`)
  // The size header alone decides: both brokers must refuse limit+1 before any body byte.
  const want = `E_BAD_MESSAGE PUB message too big ${limit + 1} > ${limit}`
  const got = await H.rawOversizedPub(t, limit + 1)
  if (got !== want) throw new Failure(`raw PUB header of ${limit + 1} bytes: want ${want}, got ${got}`)
  // Through nsqjs, which writes the whole body before reading: rustqueued drains what the
  // client still sends after the error so the client reads it; nsqd closes at once, so nsqjs
  // usually sees the connection reset before the error frame.
  const w = await writer()
  let text = null
  await send(w, 'publish', t, Buffer.concat([body, Buffer.from('!')])).catch((e) => {
    text = [e.message, ...w.errors].join(' ')
  })
  if (text === null) throw new Failure(`publish of ${limit + 1} bytes (limit+1) was accepted`)
  if (!text.includes('E_BAD_MESSAGE')) {
    if (A.server !== 'nsqd') throw new Failure(`publish of ${limit + 1} bytes (limit+1): want E_BAD_MESSAGE, got ${text}`)
    console.log(`INFO ${A.mode}/large_message nsqd closed the connection before nsqjs read the error: ${text}`)
  }
}

// TLS without a client certificate on the broker whose TLS is optional (plain, or Snappy).
const tlsOptional = (snappy) => async () => {
  const over = { tls: true, tlsVerification: true, ca: TLS.ca, snappy }
  const t = await roundTrip(over)
  await clientHas(t, 'c', `tls snappy=${snappy}`, (c) => c.tls && Boolean(c.snappy) === snappy)
}

async function lookup() {
  const t = topic()
  const box = new Inbox()
  await post(`/topic/create?topic=${t}`)
  // nsqd tells the lookup service about a new topic asynchronously: until it has, /lookup
  // answers 404 TOPIC_NOT_FOUND, which is "not yet", not a failure.
  const listed = async () => {
    try {
      return ((await getJSON(A.lookupHttp, `/lookup?topic=${t}`)).producers || []).length > 0
    } catch (e) {
      if (/: 404 /.test(String(e && e.message))) return false
      throw e
    }
  }
  await until(listed, 10000, 'topic never listed in /lookup')
  await reader(t, 'c', { box, lookupd: A.lookupHttp })
  const w = await writer()
  await send(w, 'publish', t, 'found via lookup')
  await box.wait(['found via lookup'])
}

const PLAIN = [
  ['pubsub', () => roundTrip()], ['deflate', compressed('deflate')], ['snappy', compressed('snappy')],
  ['mpub', mpub], ['dpub', dpub], ['req', req], ['touch', touch], ['rdy', rdy], ['fanout', fanout],
  ['sample', sample], ['ephemeral_channel', ephemeralChannel], ['ephemeral_topic', ephemeralTopic],
  ['large_message', largeMessage], ['tls', tlsOptional(false)], ['tls_snappy', tlsOptional(true)],
  ['lookup', lookup],
]
const SECURE = [
  ...secure.SCENARIOS,
  ['snappy', compressed('snappy')], ['mpub', mpub], ['dpub', dpub], ['req', req], ['touch', touch],
  ['fanout', fanout], ['ephemeral_channel', ephemeralChannel],
]

async function main() {
  const filter = new RegExp(A.run || '')
  let failed = 0
  for (const [name, fn] of A.mode === 'plain' ? PLAIN : SECURE) {
    if (!filter.test(name)) continue
    H.state.current = name
    const start = Date.now()
    let err = null
    let timer
    try {
      await Promise.race([
        fn(),
        new Promise((_, rej) => {
          crash = rej
          timer = setTimeout(() => rej(new Failure('scenario did not finish in time')), SCENARIO_TIMEOUT_MS)
        }),
      ])
    } catch (e) {
      err = e instanceof Failure ? e.message : (e && e.stack) || String(e)
    } finally {
      clearTimeout(timer)
      H.closeAll()
      await sleep(50)
      crash = null
    }
    const ms = Date.now() - start
    if (err === null) console.log(`PASS ${A.mode}/${name} ${ms}ms`)
    else {
      failed++
      console.log(`FAIL ${A.mode}/${name} ${ms}ms: ${String(err).split('\n').slice(0, 4).join(' | ')}`)
    }
  }
  process.exit(failed ? 1 : 0)
}

process.on('unhandledRejection', (e) => console.error('unhandled rejection:', e))
main()

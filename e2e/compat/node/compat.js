'use strict'
// nsqjs half of the official-client compatibility matrix (issue 4).
//
// e2e/compat/run.sh runs this with NODE_PATH at the cached nsqjs install, once per broker
// mode: `plain` (TLS optional) and `secure` (TLS required, mTLS, external AUTH). Every
// scenario prints `PASS <mode>/<name> <ms>` or `FAIL <mode>/<name> <ms>: <why>`; the exit
// code is 1 if any failed. Flags match the go-nsq suite (../go/main.go).

const fs = require('fs')
const http = require('http')
const https = require('https')
const path = require('path')
const nsq = require('nsqjs')

const SCENARIO_TIMEOUT_MS = 45000

function parseArgs(argv) {
  const a = { secret: 'compat-secret', run: '' }
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-(.)/g, (_, c) => c.toUpperCase())
    a[key] = argv[i + 1]
  }
  return a
}

const A = parseArgs(process.argv.slice(2))
const tlsFile = (n) => fs.readFileSync(path.join(A.tlsDir, n))
const TLS = A.tlsDir
  ? { ca: tlsFile('ca.pem'), cert: tlsFile('client.pem'), key: tlsFile('client-key.pem') }
  : {}
let current = ''
const open = []
// An nsqjs connection that dies badly throws from inside nsqjs (e.g. an unhandled inflater
// 'error' event); that fails the running scenario instead of the whole suite.
let crash = null
process.on('uncaughtException', (e) => {
  const why = `nsqjs crashed: ${String((e && e.stack) || e).split('\n').slice(0, 3).join(' | ')}`
  if (crash) crash(new Failure(why))
  else console.error(why)
})

class Failure extends Error {}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function until(cond, ms, why) {
  const deadline = Date.now() + ms
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) {
      throw new Failure(`timed out after ${ms}ms: ${typeof why === 'function' ? why() : why}`)
    }
    await sleep(20)
  }
}

function topic() {
  return `compat-js-${A.mode}-${current}-${Math.floor(Math.random() * 1e6)}`
}

// Connection options of the original matrix (heartbeat 1 s); the secure mode adds TLS with the
// client certificate, the AUTH secret and Deflate.
function options(over = {}) {
  const o = { heartbeatInterval: 1, outputBufferTimeout: 100 }
  if (A.mode === 'secure') {
    Object.assign(o, { tls: true, tlsVerification: true, authSecret: A.secret, deflate: true }, TLS)
  }
  return Object.assign(o, over)
}

// -- HTTP -------------------------------------------------------------------------------
function request(method, addr, p) {
  const base = addr.includes('://') ? addr : `http://${addr}`
  const url = new URL(base + p)
  const mod = url.protocol === 'https:' ? https : http
  return new Promise((resolve, reject) => {
    const req = mod.request(url, { method, timeout: 5000, ...TLS }, (res) => {
      let body = ''
      res.on('data', (c) => (body += c))
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Failure(`${method} ${p}: ${res.statusCode} ${body}`))
        resolve(body)
      })
    })
    req.on('error', reject)
    req.end()
  })
}

const getJSON = async (addr, p) => JSON.parse(await request('GET', addr, p))
const post = (p) => request('POST', A.http, p)

async function channelStats(t, ch) {
  const doc = await getJSON(A.http, `/stats?format=json&topic=${encodeURIComponent(t)}`)
  for (const tp of doc.topics || []) {
    if (tp.topic_name !== t) continue
    for (const c of tp.channels || []) if (c.channel_name === ch) return c
  }
  return null
}

// -- clients ----------------------------------------------------------------------------
class Inbox {
  constructor() {
    this.got = []
  }
  add(m) {
    this.got.push({ body: m.body.toString(), attempts: m.attempts, at: Date.now(), msg: m })
  }
  count(b) {
    return this.got.filter((g) => g.body === b).length
  }
  describe() {
    return `${this.got.length} deliveries ${JSON.stringify(
      this.got.map((g) => [g.body.length > 24 ? `<${g.body.length} bytes>` : g.body, g.attempts])
    )}`
  }
  wait(bodies, ms = 5000) {
    return until(() => bodies.every((b) => this.count(b) > 0), ms,
      () => `want ${JSON.stringify(bodies)}, got ${this.describe()}`)
  }
}

// reader subscribes; handler(msg) defaults to recording into box and finishing.
async function reader(t, ch, { box, handler, lookupd, ...over } = {}) {
  const opts = options({ maxInFlight: 4, lookupdPollInterval: 1, ...over })
  if (lookupd) opts.lookupdHTTPAddresses = [lookupd]
  else opts.nsqdTCPAddresses = [A.tcp]
  const r = new nsq.Reader(t, ch, opts)
  r.errors = []
  r.on('error', (e) => r.errors.push(String(e)))
  r.on('message', handler || ((m) => { box.add(m); m.finish() }))
  r.connect()
  open.push(r)
  // nsqjs sends SUB without waiting for it; publish only once /stats lists the client.
  await until(async () => {
    const c = await channelStats(t, ch)
    return c && (c.clients || []).length > 0
  }, 5000, () => `subscription ${t}/${ch} not visible in /stats (${r.errors})`).catch(() => {})
  return r
}

// writer connects and resolves once ready, or once it failed (w.errors non-empty).
async function writer(over = {}) {
  const [host, port] = A.tcp.split(':')
  const w = new nsq.Writer(host, Number(port), options(over))
  w.errors = []
  w.ready = false
  w.on('ready', () => (w.ready = true))
  w.on('error', (e) => w.errors.push(String(e && e.message ? e.message : e)))
  w.on('closed', () => w.errors.push('connection closed'))
  w.connect()
  open.push(w)
  await until(() => w.ready || w.errors.length > 0, 5000, 'writer never connected')
  return w
}

function send(w, fn, ...args) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Failure(`${fn} got no answer`)), 10000)
    w[fn](...args, (err) => {
      clearTimeout(timer)
      if (err) reject(new Failure(`${fn} failed: ${err.message || err}`))
      else resolve()
    })
  })
}

function closeAll() {
  while (open.length) {
    try {
      open.pop().close()
    } catch (e) {
      /* already closed */
    }
  }
}

// -- scenarios --------------------------------------------------------------------------
async function roundTrip(over = {}) {
  const t = topic()
  const box = new Inbox()
  await reader(t, 'c', { box, ...over })
  const w = await writer(over)
  await send(w, 'publish', t, 'hello from nsqjs')
  await box.wait(['hello from nsqjs'])
  if (box.got[0].attempts !== 1) throw new Failure(`first delivery attempts=${box.got[0].attempts}`)
  return t
}

async function clientHas(t, ch, what, pred) {
  let last = null
  await until(async () => {
    last = await channelStats(t, ch)
    return last && (last.clients || []).length > 0 && pred(last.clients[0])
  }, 3000, () => `/stats does not show ${what}: ${JSON.stringify(last)}`)
}

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
  await send(w, 'deferPublish', t, ['later'], 300)
  await send(w, 'publish', t, 'now')
  await box.wait(['now', 'later'], 12000) // nsqd: up to its 5 s queue-scan refresh
  const later = box.got.find((g) => g.body === 'later')
  if (later.at - start < 250) throw new Failure(`deferred message arrived after ${later.at - start}ms`)
  if (box.got[0].body !== 'now') throw new Failure(`deferred message overtook: ${box.describe()}`)
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

async function tlsOptional() {
  const over = { tls: true, tlsVerification: true, ca: TLS.ca }
  const t = await roundTrip(over)
  await clientHas(t, 'c', 'tls', (c) => c.tls)
}

async function lookup() {
  const t = topic()
  const box = new Inbox()
  await post(`/topic/create?topic=${t}`)
  await until(async () => ((await getJSON(A.lookupHttp, `/lookup?topic=${t}`)).producers || []).length > 0,
    10000, 'topic never listed in /lookup')
  await reader(t, 'c', { box, lookupd: A.lookupHttp })
  const w = await writer()
  await send(w, 'publish', t, 'found via lookup')
  await box.wait(['found via lookup'])
}

async function tlsAuthPubsub() {
  const t = await roundTrip()
  await clientHas(t, 'c', 'tls+deflate+authed', (c) => c.tls && c.deflate && c.authed)
}

const refused = (codes, over) => async () => {
  const w = await writer(over)
  if (w.ready && w.errors.length === 0) {
    try {
      await send(w, 'publish', topic(), 'must be refused')
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

const PLAIN = [
  ['pubsub', () => roundTrip()], ['deflate', compressed('deflate')], ['snappy', compressed('snappy')],
  ['mpub', mpub], ['dpub', dpub], ['req', req], ['touch', touch], ['rdy', rdy], ['fanout', fanout],
  ['sample', sample], ['ephemeral_channel', ephemeralChannel], ['tls', tlsOptional], ['lookup', lookup],
]
const SECURE = [
  ['tls_auth_pubsub', tlsAuthPubsub],
  ['tls_required', refused(['E_TLS_REQUIRED', 'TLS required'], { tls: false, authSecret: null, deflate: false })],
  ['mtls_no_client_cert', refused([], { cert: null, key: null })],
  ['auth_ttl_refresh', authTTLRefresh],
  // Without Deflate: nsqjs 0.13 crashes (unhandled InflateRaw 'unexpected end of file') when the
  // server closes a deflate stream right after the error frame, as nsqd does on AUTH failure.
  ['auth_denied', refused(['E_AUTH_FAILED', 'E_UNAUTHORIZED'], { authSecret: 'wrong-secret', deflate: false })],
  ['mpub', mpub], ['dpub', dpub], ['req', req], ['touch', touch], ['fanout', fanout],
  ['ephemeral_channel', ephemeralChannel],
]

async function main() {
  const filter = new RegExp(A.run || '')
  let failed = 0
  for (const [name, fn] of A.mode === 'plain' ? PLAIN : SECURE) {
    if (!filter.test(name)) continue
    current = name
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
      closeAll()
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

'use strict'
// Shared plumbing of the nsqjs suite: flags, TLS material, HTTP and /stats helpers, the
// inbox, reader/writer wrappers that record errors, and polling. compat.js holds the
// scenarios and main; secure.js the secure-only scenarios.

const fs = require('fs')
const http = require('http')
const https = require('https')
const net = require('net')
const path = require('path')
const nsq = require('nsqjs')


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
// state.current is the running scenario's name (part of every topic name).
const state = { current: '' }
const open = []

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
  return `compat-js-${A.mode}-${state.current}-${Math.floor(Math.random() * 1e6)}`
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

async function topicStats(t) {
  const doc = await getJSON(A.http, `/stats?format=json&topic=${encodeURIComponent(t)}`)
  return (doc.topics || []).find((tp) => tp.topic_name === t) || null
}

async function channelStats(t, ch) {
  const tp = await topicStats(t)
  return ((tp && tp.channels) || []).find((c) => c.channel_name === ch) || null
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

// reader subscribes; handler(msg) defaults to recording into box and finishing. r.errors and
// r.closes record what nsqjs reported; wait=false skips waiting for the SUB in /stats.
async function reader(t, ch, { box, handler, lookupd, wait = true, ...over } = {}) {
  const opts = options({ maxInFlight: 4, lookupdPollInterval: 1, ...over })
  if (lookupd) opts.lookupdHTTPAddresses = [lookupd]
  else opts.nsqdTCPAddresses = [A.tcp]
  const r = new nsq.Reader(t, ch, opts)
  r.errors = []
  r.closes = 0
  r.on('error', (e) => r.errors.push(String(e)))
  r.on('nsqd_closed', () => r.closes++)
  r.on('message', handler || ((m) => { box.add(m); m.finish() }))
  r.connect()
  open.push(r)
  if (!wait) return r
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

// rawOversizedPub sends a PUB whose size header is `size` without any body over a plain
// socket and resolves to the error frame's text: the header alone must make the broker
// refuse it (as in the go suite).
function rawOversizedPub(t, size) {
  const [host, port] = A.tcp.split(':')
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), host)
    let buf = Buffer.alloc(0)
    const done = (err, text) => {
      sock.destroy()
      if (err) reject(err)
      else resolve(text)
    }
    sock.setTimeout(10000, () => done(new Failure('no reply to the oversized PUB header')))
    sock.on('error', (e) => done(new Failure(`oversized PUB header: ${e.message}`)))
    sock.on('close', () => done(new Failure(`connection closed after ${buf.length} reply bytes`)))
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d])
      if (buf.length < 8) return
      const n = buf.readUInt32BE(0)
      const kind = buf.readInt32BE(4)
      if (kind !== 1 || n < 4 || n > 1024) {
        return done(new Failure(`reply frame type ${kind} size ${n}, want an error frame`))
      }
      if (buf.length >= 4 + n) done(null, buf.subarray(8, 4 + n).toString())
    })
    const size4 = Buffer.alloc(4)
    size4.writeUInt32BE(size)
    sock.write(Buffer.concat([Buffer.from(`  V2PUB ${t}\n`), size4]))
  })
}

module.exports = {
  A, TLS, tlsFile, Failure, state, sleep, until, topic, options, getJSON, post, topicStats, channelStats,
  Inbox, reader, writer, send, closeAll, roundTrip, clientHas, rawOversizedPub,
}

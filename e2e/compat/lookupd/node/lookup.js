'use strict'
// The lookup parity scenarios with nsqjs's Reader({lookupdHTTPAddresses}) against a lookup
// service (official nsqlookupd with nsqd registering, or rustqueue-discovery with rustqueued)
// and two brokers. e2e/compat/lookupd/run.sh starts them; the go-nsq twin is ../go/main.go.
//
// Every scenario prints `PASS <name> <ms>` or `FAIL <name> <ms>: <why>` and one ledger line
// `ledger <name>: published N received M missing K`; the exit status is 1 if any failed.

const nsq = require('nsqjs')

const A = {}
for (let i = 2; i < process.argv.length; i += 2) {
  A[process.argv[i].replace(/^--/, '')] = process.argv[i + 1]
}
// How soon /lookup must stop listing a broker that stopped (ms).
const LEAVE_BOUND = 5000
const SCENARIO_TIMEOUT = 60000

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function until(cond, ms, why) {
  const deadline = Date.now() + ms
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) throw new Error(`after ${ms} ms: ${why()}`)
    await sleep(50)
  }
}

class Ledger {
  constructor() {
    this.published = new Set()
    this.received = new Map()
  }

  missing() {
    let n = 0
    for (const b of this.published) if (!this.received.has(b)) n++
    return n
  }

  line(name) {
    let got = 0
    for (const b of this.received.keys()) if (this.published.has(b)) got++
    return `ledger ${name}: published ${this.published.size} received ${got} missing ${this.missing()}`
  }

  async publish(web, topic, tag, n) {
    for (let i = 0; i < n; i++) {
      const body = `${topic}-${tag}-${i}`
      const r = await fetch(`http://${web}/pub?topic=${topic}`, { method: 'POST', body })
      if (r.status !== 200) throw new Error(`/pub on ${web}: ${r.status} ${await r.text()}`)
      this.published.add(body)
    }
  }

  waitAll(ms) {
    return until(() => this.missing() === 0, ms, () => `consumer still misses ${this.missing()} messages`)
  }
}

async function producers(topic) {
  const r = await fetch(`http://${A.lookup}/lookup?topic=${topic}`, {
    headers: { Accept: 'application/vnd.nsq; version=1.0' },
  })
  if (r.status === 404) return null
  const doc = await r.json()
  return doc.producers.map((p) => `${p.broadcast_address}:${p.tcp_port}`).sort()
}

async function waitProducers(topic, want, ms) {
  const start = Date.now()
  let got
  await until(
    async () => {
      got = await producers(topic)
      return JSON.stringify(got) === JSON.stringify([...want].sort())
    },
    ms,
    () => `/lookup lists ${JSON.stringify(got)}, want ${JSON.stringify(want)}`
  )
  return Date.now() - start
}

const readers = []
function reader(topic, ledger) {
  const r = new nsq.Reader(topic, 'c', {
    lookupdHTTPAddresses: [A.lookup],
    lookupdPollInterval: 1,
    lookupdPollJitter: 0.1,
    maxInFlight: 20,
  })
  r.on('message', (m) => {
    const body = m.body.toString()
    ledger.received.set(body, (ledger.received.get(body) || 0) + 1)
    m.finish()
  })
  r.on('error', () => {}) // connection errors are expected when a broker stops
  r.on('nsqd_closed', () => {})
  r.connect()
  readers.push(r)
  return r
}

const topicName = (s) => `lk-js-${s}-${String(Math.floor(Math.random() * 1e6)).padStart(6, '0')}`

// A topic exists on one broker; a Reader given only the lookup address finds it.
async function discover(l) {
  const t = topicName('discover')
  await l.publish(A['b1-http'], t, 'a', 40)
  await waitProducers(t, [A['b1-tcp']], 10000)
  reader(t, l)
  await l.waitAll(15000)
}

// The Reader starts before the topic exists (lookup 404); it then appears on both brokers.
async function newTopic(l) {
  const t = topicName('new')
  if ((await producers(t)) !== null) throw new Error('topic listed before it exists')
  reader(t, l)
  await sleep(1000)
  await l.publish(A['b1-http'], t, 'a', 20)
  await l.publish(A['b2-http'], t, 'b', 20)
  await l.waitAll(20000)
}

// One nsqjs Writer (one connection each) publishes through the gateway's TCP port.
function gatewayWriter() {
  const [host, port] = A['gateway-tcp'].split(':')
  const w = new nsq.Writer(host, Number(port))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('a Writer did not connect through the gateway')), 10000)
    w.on('ready', () => {
      clearTimeout(timer)
      resolve(w)
    })
    w.on('error', () => {}) // a refused publish rejects its own callback below
    w.connect()
  })
}

// PUB (one body) or MPUB (an array) through a Writer; rejects unless the broker said OK.
function writerPublish(w, topic, msgs) {
  return new Promise((resolve, reject) => {
    w.publish(topic, msgs, (err) => (err ? reject(new Error(`publish through the gateway: ${err}`)) : resolve()))
  })
}

async function messageCount(web, topic) {
  const r = await fetch(`http://${web}/stats?format=json&topic=${topic}`)
  const doc = await r.json()
  return doc.topics.filter((t) => t.topic_name === topic).reduce((n, t) => n + t.message_count, 0)
}

// Two nsqjs Writers publish through the gateway (PUB, MPUB), plus HTTP /pub through it; the
// messages land on both brokers; a Reader via lookup receives all.
async function gatewayPublish(l) {
  const t = topicName('gateway')
  const writers = []
  try {
    for (let i = 0; i < 2; i++) writers.push(await gatewayWriter())
    for (const [i, w] of writers.entries()) {
      for (let j = 0; j < 20; j++) {
        const body = `${t}-tcp-${i}-${j}`
        await writerPublish(w, t, body)
        l.published.add(body)
      }
      const batch = [...Array(5).keys()].map((j) => `${t}-mpub-${i}-${j}`)
      await writerPublish(w, t, batch)
      batch.forEach((b) => l.published.add(b))
    }
  } finally {
    writers.forEach((w) => w.close())
  }
  await l.publish(A['gateway-http'], t, 'http', 10)
  const [n1, n2] = [await messageCount(A['b1-http'], t), await messageCount(A['b2-http'], t)]
  console.log(`gateway spread: broker 1 holds ${n1}, broker 2 holds ${n2} of ${l.published.size}`)
  if (n1 === 0 || n2 === 0 || n1 + n2 !== l.published.size) {
    throw new Error(`brokers hold ${n1} and ${n2} of ${l.published.size} acknowledged`)
  }
  await waitProducers(t, [A['b1-tcp'], A['b2-tcp']], 10000)
  reader(t, l)
  await l.waitAll(15000)
}

// The topic lives on both brokers; broker 2 stops; /lookup drops it within LEAVE_BOUND and
// the Reader keeps receiving from broker 1.
async function brokerLeaves(l) {
  const t = topicName('leave')
  await l.publish(A['b1-http'], t, 'a', 20)
  await l.publish(A['b2-http'], t, 'b', 20)
  await waitProducers(t, [A['b1-tcp'], A['b2-tcp']], 10000)
  reader(t, l)
  await l.waitAll(15000)
  process.kill(Number(A['leave-pid']), 'SIGTERM')
  const took = await waitProducers(t, [A['b1-tcp']], LEAVE_BOUND)
  console.log(`lookup dropped the stopped broker after ${took} ms`)
  await l.publish(A['b1-http'], t, 'c', 20)
  await l.waitAll(15000)
}

async function main() {
  let failed = false
  const scenarios = [['discover', discover], ['new-topic', newTopic]]
  // Before broker-leaves, which stops broker 2.
  if (A['gateway-tcp']) scenarios.push(['gateway-publish', gatewayPublish])
  scenarios.push(['broker-leaves', brokerLeaves])
  for (const [name, fn] of scenarios) {
    const l = new Ledger()
    const start = Date.now()
    let err = null
    try {
      let timer
      const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('scenario timeout')), SCENARIO_TIMEOUT)
      })
      await Promise.race([fn(l), timeout])
      clearTimeout(timer)
    } catch (e) {
      err = String(e && e.message ? e.message : e)
    }
    while (readers.length) readers.pop().close()
    await sleep(100)
    if (!err && l.missing()) err = `ledger: ${l.missing()} missing`
    if (!err && l.published.size === 0) err = 'nothing was published'
    const ms = Date.now() - start
    if (err) {
      failed = true
      console.log(`FAIL ${name} ${ms}: ${err.replace(/\n/g, ' ')}`)
    } else {
      console.log(`PASS ${name} ${ms}`)
    }
    console.log(l.line(name))
  }
  process.exit(failed ? 1 : 0)
}

main()

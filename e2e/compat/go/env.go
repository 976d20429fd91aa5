package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"
)

// env describes the server under test and carries the current scenario's log.
type env struct {
	server, mode          string
	tcp, http, lookupHTTP string
	authHTTP, tlsDir      string
	secret                string
	maxMsg                int

	name string
	log  *syncBuffer
}

// syncBuffer is a goroutine-safe log sink for go-nsq's loggers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.buf.Bytes()...)
}

func (e *env) logger(prefix string) *log.Logger {
	return log.New(e.log, prefix+" ", log.Lmicroseconds)
}

// topic returns a fresh topic name for the current scenario. It starts with `compat-`, the
// prefix the auth server grants.
func (e *env) topic() string {
	return fmt.Sprintf("compat-%s-%s-%06d", e.mode, e.name, rand.Intn(1000000))
}

// config is the base client configuration of the original matrix: heartbeat 1 s, message
// timeout 2 s, max in flight 4, output buffer 4096 B / 100 ms. The secure mode adds TLS with
// the client certificate, the AUTH secret and Deflate.
func (e *env) config() *nsq.Config {
	c := nsq.NewConfig()
	c.HeartbeatInterval = time.Second
	c.MsgTimeout = 2 * time.Second
	c.MaxInFlight = 4
	c.OutputBufferSize = 4096
	c.OutputBufferTimeout = 100 * time.Millisecond
	c.DefaultRequeueDelay = 100 * time.Millisecond
	c.MaxBackoffDuration = 200 * time.Millisecond
	c.LookupdPollInterval = time.Second
	c.DialTimeout = 5 * time.Second
	c.ReadTimeout = 10 * time.Second
	c.WriteTimeout = 10 * time.Second
	if e.mode == "secure" {
		c.TlsV1 = true
		c.TlsConfig = e.tlsConfig("client")
		c.AuthSecret = e.secret
		c.Deflate = true
	}
	return c
}

// tlsConfig trusts the test CA and, unless cert is empty, presents `<cert>.pem`.
func (e *env) tlsConfig(cert string) *tls.Config {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(e.tlsDir, "ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		panic(fmt.Sprintf("cannot load ca.pem from %s: %v", e.tlsDir, err))
	}
	c := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(e.tlsDir, cert+".pem"),
			filepath.Join(e.tlsDir, cert+"-key.pem"))
		if err != nil {
			panic(fmt.Sprintf("cannot load %s certificate: %v", cert, err))
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

func (e *env) producer(c *nsq.Config) (*nsq.Producer, error) {
	p, err := nsq.NewProducer(e.tcp, c)
	if err != nil {
		return nil, err
	}
	p.SetLogger(e.logger("producer"), nsq.LogLevelDebug)
	return p, nil
}

// publishOne publishes with a short-lived producer.
func (e *env) publishOne(c *nsq.Config, topic string, body []byte) error {
	p, err := e.producer(c)
	if err != nil {
		return err
	}
	defer p.Stop()
	return p.Publish(topic, body)
}

// delivery is one message as a handler saw it.
type delivery struct {
	body     string
	attempts uint16
	at       time.Time
	msg      *nsq.Message
}

// inbox collects deliveries from a consumer's handler.
type inbox struct {
	mu   sync.Mutex
	got  []delivery
	more chan struct{}
}

func newInbox() *inbox { return &inbox{more: make(chan struct{}, 1)} }

func (b *inbox) add(m *nsq.Message) {
	b.mu.Lock()
	b.got = append(b.got, delivery{string(m.Body), m.Attempts, time.Now(), m})
	b.mu.Unlock()
	select {
	case b.more <- struct{}{}:
	default:
	}
}

func (b *inbox) snapshot() []delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]delivery(nil), b.got...)
}

// count returns how many deliveries carried body.
func (b *inbox) count(body string) int {
	n := 0
	for _, d := range b.snapshot() {
		if d.body == body {
			n++
		}
	}
	return n
}

// waitBodies waits until every body has been delivered at least once.
func (b *inbox) waitBodies(timeout time.Duration, bodies ...string) error {
	return waitFor(timeout, func() bool {
		for _, body := range bodies {
			if b.count(body) == 0 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("want bodies %q, got %s", bodies, b.describe()) })
}

func (b *inbox) describe() string {
	var parts []string
	for _, d := range b.snapshot() {
		body := d.body
		if len(body) > 24 {
			body = fmt.Sprintf("<%d bytes>", len(body))
		}
		parts = append(parts, fmt.Sprintf("%s(attempt %d)", body, d.attempts))
	}
	return fmt.Sprintf("%d deliveries %v", len(parts), parts)
}

// newConsumer makes a consumer of topic/channel that logs to the scenario log, not yet
// connected; handler nil = auto-FIN into box.
func (e *env) newConsumer(c *nsq.Config, topic, channel string, box *inbox, handler nsq.HandlerFunc) (*nsq.Consumer, error) {
	cons, err := nsq.NewConsumer(topic, channel, c)
	if err != nil {
		return nil, err
	}
	cons.SetLogger(e.logger("consumer/"+channel), nsq.LogLevelDebug)
	if handler == nil {
		handler = func(m *nsq.Message) error { box.add(m); return nil }
	}
	cons.AddHandler(handler)
	return cons, nil
}

// consumer subscribes topic/channel directly on the broker; handler nil = auto-FIN into box.
func (e *env) consumer(c *nsq.Config, topic, channel string, box *inbox, handler nsq.HandlerFunc) (*nsq.Consumer, error) {
	cons, err := e.newConsumer(c, topic, channel, box, handler)
	if err != nil {
		return nil, err
	}
	if err := cons.ConnectToNSQD(e.tcp); err != nil {
		cons.Stop()
		return nil, fmt.Errorf("connect consumer %s/%s: %w", topic, channel, err)
	}
	e.waitSubscribed(topic, channel)
	return cons, nil
}

// waitSubscribed waits until /stats lists a client on topic/channel. go-nsq's ConnectToNSQD
// returns before the broker has answered SUB, and a message published before the channel
// exists never reaches it (when the topic has other channels), so scenarios that publish
// right after subscribing need this. If /stats never shows the client the scenario goes on
// (and likely fails on its own assertion); the note lands in the scenario log.
func (e *env) waitSubscribed(topic, channel string) {
	err := waitFor(3*time.Second, func() bool {
		c, ok, err := e.channelStats(topic, channel)
		return err == nil && ok && len(c.Clients) > 0
	}, func() string { return "no client listed in /stats" })
	if err != nil {
		e.logger("compat").Printf("SUB %s/%s not visible in /stats: %v", topic, channel, err)
	}
}

// stop stops a consumer and waits (bounded) until it has closed.
// pubSub subscribes channel "c" of topic and opens a producer, both with the default config;
// done stops them.
func (e *env) pubSub(topic string) (*inbox, *nsq.Producer, func(), error) {
	box := newInbox()
	cons, err := e.consumer(e.config(), topic, "c", box, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := e.producer(e.config())
	if err != nil {
		stop(cons)
		return nil, nil, nil, err
	}
	return box, p, func() { p.Stop(); stop(cons) }, nil
}

func stop(c *nsq.Consumer) {
	if c == nil {
		return
	}
	c.Stop()
	select {
	case <-c.StopChan:
	case <-time.After(10 * time.Second):
	}
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool, why func() string) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: %s", timeout, why())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// url turns a bare host:port into an http:// base; https:// bases are kept.
func baseURL(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return "http://" + addr
}

// getJSON fetches addr/path and decodes the JSON answer into out.
func getJSON(addr, path string, out any) error {
	resp, err := httpClient.Get(baseURL(addr) + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// post sends an empty POST (nsqd admin endpoints) and checks for 200.
func post(addr, path string) error {
	resp, err := httpClient.Post(baseURL(addr)+path, "text/plain", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: status %d", path, resp.StatusCode)
	}
	return nil
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

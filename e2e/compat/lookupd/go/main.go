// Command lookupd-go runs the lookup parity scenarios with go-nsq's Consumer and
// ConnectToNSQLookupd against a lookup service (official nsqlookupd with nsqd registering, or
// rustqueue-discovery with rustqueued) and two brokers. e2e/compat/lookupd/run.sh starts them.
//
// Every scenario prints `PASS <name> <ms>` or `FAIL <name> <ms>: <why>` and one ledger line
// `ledger <name>: published N received M missing K`; the exit status is 1 if any failed.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nsqio/go-nsq"
)

type env struct {
	lookup       string
	b1tcp, b1web string
	b2tcp, b2web string
	leavePid     int
	// The producer gateway in front of both brokers (empty: no gateway scenario).
	gwTCP, gwHTTP string
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// ledger records what was published and what a consumer received.
type ledger struct {
	mu        sync.Mutex
	published map[string]bool
	received  map[string]int
}

func newLedger() *ledger {
	return &ledger{published: map[string]bool{}, received: map[string]int{}}
}

func (l *ledger) HandleMessage(m *nsq.Message) error {
	l.mu.Lock()
	l.received[string(m.Body)]++
	l.mu.Unlock()
	return nil
}

// missing counts published bodies never received.
func (l *ledger) missing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for b := range l.published {
		if l.received[b] == 0 {
			n++
		}
	}
	return n
}

func (l *ledger) line(name string) string {
	l.mu.Lock()
	got := 0
	for b := range l.received {
		if l.published[b] {
			got++
		}
	}
	pub := len(l.published)
	l.mu.Unlock()
	return fmt.Sprintf("ledger %s: published %d received %d missing %d", name, pub, got, l.missing())
}

// publish sends n distinct bodies to topic on the broker at web (nsqd HTTP /pub).
func (l *ledger) publish(web, topic, tag string, n int) error {
	for i := 0; i < n; i++ {
		body := fmt.Sprintf("%s-%s-%d", topic, tag, i)
		resp, err := httpClient.Post("http://"+web+"/pub?topic="+topic, "application/octet-stream",
			bytes.NewBufferString(body))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/pub on %s: %d %s", web, resp.StatusCode, b)
		}
		l.mu.Lock()
		l.published[body] = true
		l.mu.Unlock()
	}
	return nil
}

func (l *ledger) waitAll(limit time.Duration) error {
	return waitFor(limit, func() bool { return l.missing() == 0 },
		func() string { return "consumer still misses messages" })
}

func waitFor(limit time.Duration, ok func() bool, why func() string) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ok() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("after %s: %s", limit, why())
}

type lookupDoc struct {
	Channels  []string `json:"channels"`
	Producers []struct {
		BroadcastAddress string `json:"broadcast_address"`
		TCPPort          int    `json:"tcp_port"`
	} `json:"producers"`
}

// producers returns the `host:port` TCP addresses /lookup lists for topic (nil on 404).
func (e *env) producers(topic string) ([]string, error) {
	req, _ := http.NewRequest("GET", "http://"+e.lookup+"/lookup?topic="+topic, nil)
	req.Header.Set("Accept", "application/vnd.nsq; version=1.0")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == 404 {
		return nil, nil
	}
	var doc lookupDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range doc.Producers {
		out = append(out, fmt.Sprintf("%s:%d", p.BroadcastAddress, p.TCPPort))
	}
	return out, nil
}

func (e *env) waitProducers(topic string, want []string, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	var got []string
	var lastErr error
	err := waitFor(limit, func() bool {
		got, lastErr = e.producers(topic)
		if len(got) != len(want) {
			return false
		}
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("/lookup lists %v (err %v), want %v", got, lastErr, want) })
	return time.Since(start), err
}

func consumer(e *env, topic string, l *ledger) (*nsq.Consumer, error) {
	cfg := nsq.NewConfig()
	cfg.LookupdPollInterval = 500 * time.Millisecond
	cfg.MaxInFlight = 20
	c, err := nsq.NewConsumer(topic, "c", cfg)
	if err != nil {
		return nil, err
	}
	c.SetLogger(log.New(io.Discard, "", 0), nsq.LogLevelError)
	c.AddHandler(l)
	return c, c.ConnectToNSQLookupd(e.lookup)
}

func topicName(s string) string {
	return fmt.Sprintf("lk-go-%s-%06d", s, rand.Intn(1000000))
}

// discover: a topic exists on one broker; a consumer given only the lookup address finds it.
func discover(e *env, l *ledger) error {
	t := topicName("discover")
	if err := l.publish(e.b1web, t, "a", 40); err != nil {
		return err
	}
	if _, err := e.waitProducers(t, []string{e.b1tcp}, 10*time.Second); err != nil {
		return err
	}
	c, err := consumer(e, t, l)
	if err != nil {
		return err
	}
	defer c.Stop()
	return l.waitAll(15 * time.Second)
}

// newTopic: the consumer starts before the topic exists (lookup answers 404); the topic then
// appears on both brokers and the consumer drains both.
func newTopic(e *env, l *ledger) error {
	t := topicName("new")
	if p, err := e.producers(t); err != nil || p != nil {
		return fmt.Errorf("topic listed before it exists: %v %v", p, err)
	}
	c, err := consumer(e, t, l)
	if err != nil {
		return err
	}
	defer c.Stop()
	time.Sleep(time.Second)
	if err := l.publish(e.b1web, t, "a", 20); err != nil {
		return err
	}
	if err := l.publish(e.b2web, t, "b", 20); err != nil {
		return err
	}
	return l.waitAll(20 * time.Second)
}

// leaveBound: how soon /lookup must stop listing a broker that stopped.
const leaveBound = 5 * time.Second

// brokerLeaves: the topic lives on both brokers; broker 2 stops; /lookup drops it within
// leaveBound and the consumer keeps receiving from broker 1.
func brokerLeaves(e *env, l *ledger) error {
	t := topicName("leave")
	if err := l.publish(e.b1web, t, "a", 20); err != nil {
		return err
	}
	if err := l.publish(e.b2web, t, "b", 20); err != nil {
		return err
	}
	if _, err := e.waitProducers(t, []string{e.b1tcp, e.b2tcp}, 10*time.Second); err != nil {
		return err
	}
	c, err := consumer(e, t, l)
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := l.waitAll(15 * time.Second); err != nil {
		return err
	}
	if err := syscall.Kill(e.leavePid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping broker 2: %v", err)
	}
	took, err := e.waitProducers(t, []string{e.b1tcp}, leaveBound)
	if err != nil {
		return err
	}
	fmt.Printf("lookup dropped the stopped broker after %d ms\n", took.Milliseconds())
	if err := l.publish(e.b1web, t, "c", 20); err != nil {
		return err
	}
	return l.waitAll(15 * time.Second)
}

func main() {
	e := &env{}
	flag.StringVar(&e.lookup, "lookup", "", "lookup HTTP address")
	flag.StringVar(&e.b1tcp, "b1-tcp", "", "broker 1 TCP address")
	flag.StringVar(&e.b1web, "b1-http", "", "broker 1 HTTP address")
	flag.StringVar(&e.b2tcp, "b2-tcp", "", "broker 2 TCP address")
	flag.StringVar(&e.b2web, "b2-http", "", "broker 2 HTTP address")
	flag.IntVar(&e.leavePid, "leave-pid", 0, "pid of broker 2 (stopped by the broker-leaves scenario)")
	flag.StringVar(&e.gwTCP, "gateway-tcp", "", "rustqueue-gateway TCP address (adds the gateway scenario)")
	flag.StringVar(&e.gwHTTP, "gateway-http", "", "rustqueue-gateway HTTP address")
	flag.Parse()
	type scenario struct {
		name string
		run  func(*env, *ledger) error
	}
	scenarios := []scenario{{"discover", discover}, {"new-topic", newTopic}}
	if e.gwTCP != "" {
		// Before broker-leaves, which stops broker 2.
		scenarios = append(scenarios, scenario{"gateway-publish", gatewayPublish})
	}
	scenarios = append(scenarios, scenario{"broker-leaves", brokerLeaves})
	failed := false
	for _, s := range scenarios {
		l := newLedger()
		start := time.Now()
		err := s.run(e, l)
		ms := time.Since(start).Milliseconds()
		if err == nil && l.missing() != 0 {
			err = fmt.Errorf("ledger: %d missing", l.missing())
		}
		if err == nil && len(l.published) == 0 {
			err = fmt.Errorf("nothing was published")
		}
		if err != nil {
			failed = true
			fmt.Printf("FAIL %s %d: %s\n", s.name, ms, strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Printf("PASS %s %d\n", s.name, ms)
		}
		fmt.Println(l.line(s.name))
	}
	if failed {
		os.Exit(1)
	}
}

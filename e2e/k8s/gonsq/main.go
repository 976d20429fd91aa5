// Command gonsq is the official go-nsq client the way an application on Kubernetes uses it,
// for the operator scenario (e2e/k8s): producers given the gateway Service's address and
// consumers given only the discovery Service's address (ConnectToNSQLookupd).
//
//	gonsq produce -nsqd ADDR -topic T -n N -conns C -prefix P [-interval MS]
//	    C Producers, each on its own TCP connection to ADDR, publish N bodies `P-<i>` between
//	    them (PUB, every fourth an MPUB of 1), each Producer pausing MS between publishes,
//	    retrying a refused or failed publish on the same Producer up to 20 times (go-nsq
//	    reconnects a closed connection on the next publish); every acknowledged body is printed
//	    on its own line, and the publishes that needed a retry are counted on stderr.
//	gonsq consume -lookupd URL -topic T -channel CH -n N -timeout SECONDS [-poll MS]
//	    A Consumer FINs every message and prints each new body once; exits 0 as soon as N
//	    distinct bodies arrived, 1 at the timeout (stderr says how many came).
//
// Logs go to stderr; stdout carries only bodies.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: gonsq produce|consume [flags]")
	}
	switch os.Args[1] {
	case "produce":
		produce(os.Args[2:])
	case "consume":
		consume(os.Args[2:])
	default:
		log.Fatalf("unknown command %q (expected produce or consume)", os.Args[1])
	}
}

func produce(args []string) {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	addr := fs.String("nsqd", "", "nsqd TCP address (the gateway Service)")
	topic := fs.String("topic", "", "topic")
	n := fs.Int("n", 0, "bodies to publish")
	conns := fs.Int("conns", 1, "producers (TCP connections)")
	prefix := fs.String("prefix", "m", "body prefix")
	interval := fs.Int("interval", 0, "pause between one Producer's publishes, ms")
	_ = fs.Parse(args)
	var out sync.Mutex
	var wg sync.WaitGroup
	failed, retried := 0, 0
	for c := 0; c < *conns; c++ {
		p, err := nsq.NewProducer(*addr, nsq.NewConfig())
		if err != nil {
			log.Fatal(err)
		}
		p.SetLoggerLevel(nsq.LogLevelWarning)
		wg.Add(1)
		go func(c int, p *nsq.Producer) {
			defer wg.Done()
			defer p.Stop()
			for i := c; i < *n; i += *conns {
				body := fmt.Sprintf("%s-%d", *prefix, i)
				attempts, err := publish(p, *topic, body, i%4 == 3)
				time.Sleep(time.Duration(*interval) * time.Millisecond)
				if attempts > 1 {
					out.Lock()
					retried++
					out.Unlock()
				}
				if err != nil {
					out.Lock()
					failed++
					out.Unlock()
					log.Printf("publish %s: %v", body, err)
					continue
				}
				out.Lock()
				fmt.Println(body)
				out.Unlock()
			}
		}(c, p)
	}
	wg.Wait()
	log.Printf("published %d, %d needed a retry, %d failed", *n-failed, retried, failed)
	if failed > 0 {
		log.Printf("%d publishes failed after retries", failed)
		os.Exit(1)
	}
}

// publish returns how many attempts it made and the last error (nil once acknowledged).
func publish(p *nsq.Producer, topic, body string, multi bool) (int, error) {
	var err error
	for attempt := 1; attempt <= 20; attempt++ {
		if multi {
			err = p.MultiPublish(topic, [][]byte{[]byte(body)})
		} else {
			err = p.Publish(topic, []byte(body))
		}
		if err == nil {
			return attempt, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 20, err
}

type seen struct {
	mu   sync.Mutex
	got  map[string]bool
	want int
	done chan struct{}
}

func (s *seen) HandleMessage(m *nsq.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := string(m.Body)
	if !s.got[b] {
		s.got[b] = true
		fmt.Println(b)
		if len(s.got) == s.want {
			close(s.done)
		}
	}
	return nil
}

func consume(args []string) {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	lookupd := fs.String("lookupd", "", "lookupd HTTP address (the discovery Service)")
	topic := fs.String("topic", "", "topic")
	channel := fs.String("channel", "", "channel")
	n := fs.Int("n", 0, "distinct bodies to wait for")
	timeout := fs.Int("timeout", 60, "seconds")
	poll := fs.Int("poll", 1000, "lookupd poll interval, ms")
	_ = fs.Parse(args)
	cfg := nsq.NewConfig()
	cfg.LookupdPollInterval = time.Duration(*poll) * time.Millisecond
	cfg.MaxInFlight = 100
	c, err := nsq.NewConsumer(*topic, *channel, cfg)
	if err != nil {
		log.Fatal(err)
	}
	c.SetLoggerLevel(nsq.LogLevelWarning)
	s := &seen{got: map[string]bool{}, want: *n, done: make(chan struct{})}
	c.AddHandler(s)
	if err := c.ConnectToNSQLookupd(*lookupd); err != nil {
		log.Fatal(err)
	}
	select {
	case <-s.done:
		c.Stop()
		<-c.StopChan
	case <-time.After(time.Duration(*timeout) * time.Second):
		s.mu.Lock()
		log.Printf("timed out: %d of %d bodies", len(s.got), *n)
		s.mu.Unlock()
		os.Exit(1)
	}
}

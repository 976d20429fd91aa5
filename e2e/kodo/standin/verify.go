package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"
)

// result is what verify prints.
type result struct {
	Acknowledged        int `json:"acknowledged"`
	AcknowledgedArrived int `json:"acknowledged_arrived"`
	Missing             int `json:"missing"`
	Ambiguous           int `json:"ambiguous"`
	AmbiguousArrived    int `json:"ambiguous_arrived"`
	FailedArrived       int `json:"failed_arrived"`
	Duplicates          int `json:"duplicates"`
	Corrupt             int `json:"corrupt"`
	Unknown             int `json:"unknown"`
}

func readLedgers(paths []string) (map[uint64]entry, error) {
	out := map[uint64]entry{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e entry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if _, dup := out[e.ID]; dup {
				f.Close()
				return nil, fmt.Errorf("%s: id %d appears twice in the ledgers", p, e.ID)
			}
			out[e.ID] = e
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func verifyMain(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	lookupd := fs.String("lookupd", "", "nsqlookupd HTTP address (host:port) whose /lookup lists the brokers")
	topic := fs.String("topic", "", "topic")
	channel := fs.String("channel", "verify", "channel (create it before publishing)")
	ledgers := fs.String("ledger", "", "comma-separated ledger files")
	timeout := fs.Duration("timeout", 120*time.Second, "give up after this long")
	settle := fs.Duration("settle", 3*time.Second, "keep consuming this long after the last acknowledged message arrived (ambiguous ones, duplicates)")
	maxInFlight := fs.Int("max-in-flight", 3, "go-nsq MaxInFlight: one 100 MiB body per broker connection")
	verbose := fs.Bool("v", false, "log go-nsq's consumer protocol to stderr")
	_ = fs.Parse(args)
	if *lookupd == "" || *topic == "" || *ledgers == "" {
		return fmt.Errorf("verify needs -lookupd, -topic and -ledger")
	}
	want, err := readLedgers(strings.Split(*ledgers, ","))
	if err != nil {
		return err
	}
	var r result
	for _, e := range want {
		switch e.Acknowledged {
		case "yes":
			r.Acknowledged++
		case "ambiguous":
			r.Ambiguous++
		}
	}

	var mu sync.Mutex
	seen := map[uint64]int{}
	ackedArrived := 0
	lastAcked := make(chan struct{})
	closed := false
	if r.Acknowledged == 0 {
		close(lastAcked)
		closed = true
	}
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = *maxInFlight
	cfg.LookupdPollInterval = 2 * time.Second
	c, err := nsq.NewConsumer(*topic, *channel, cfg)
	if err != nil {
		return err
	}
	if *verbose {
		c.SetLogger(log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds), nsq.LogLevelDebug)
	} else {
		c.SetLogger(log.New(io.Discard, "", 0), nsq.LogLevelError)
	}
	c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		sum := sha256.Sum256(m.Body)
		id, ok := bodyID(m.Body)
		mu.Lock()
		defer mu.Unlock()
		e, known := want[id]
		switch {
		case !ok || !known:
			r.Unknown++
			return nil
		case hex.EncodeToString(sum[:]) != e.SHA256 || len(m.Body) != e.Size:
			r.Corrupt++
			fmt.Fprintf(os.Stderr, "verify: id %d arrived corrupt (%d bytes)\n", id, len(m.Body))
			return nil
		}
		seen[id]++
		if seen[id] > 1 {
			r.Duplicates++
			return nil
		}
		if e.Acknowledged == "yes" {
			ackedArrived++
			if ackedArrived == r.Acknowledged && !closed {
				close(lastAcked)
				closed = true
			}
		}
		return nil
	}))
	if err := c.ConnectToNSQLookupd(*lookupd); err != nil {
		return err
	}
	select {
	case <-lastAcked:
		time.Sleep(*settle)
	case <-time.After(*timeout):
	}
	c.Stop()
	<-c.StopChan

	mu.Lock()
	defer mu.Unlock()
	for id, e := range want {
		arrived := seen[id] > 0
		switch {
		case e.Acknowledged == "yes" && arrived:
			r.AcknowledgedArrived++
		case e.Acknowledged == "yes":
			r.Missing++
			fmt.Fprintf(os.Stderr, "verify: acknowledged id %d is missing\n", id)
		case e.Acknowledged == "ambiguous" && arrived:
			r.AmbiguousArrived++
		case arrived:
			r.FailedArrived++
		}
	}
	out, _ := json.Marshal(r)
	fmt.Printf("verify %s\n", out)
	fmt.Printf("ledger kodo: acknowledged %d received %d missing %d ambiguous %d (arrived %d) duplicates %d corrupt %d\n",
		r.Acknowledged, r.AcknowledgedArrived, r.Missing, r.Ambiguous, r.AmbiguousArrived, r.Duplicates, r.Corrupt)
	if r.Missing > 0 || r.Corrupt > 0 || r.Unknown > 0 {
		return fmt.Errorf("verify failed: missing %d corrupt %d unknown %d", r.Missing, r.Corrupt, r.Unknown)
	}
	return nil
}

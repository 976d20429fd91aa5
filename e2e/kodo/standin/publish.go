package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nsqio/go-nsq"
)

// entry is one ledger line.
type entry struct {
	ID     uint64 `json:"id"`
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
	// Acknowledged: "yes" (some attempt got OK), "ambiguous" (no OK, at least one attempt
	// answered E_AMBIGUOUS: it may or may not be stored), "no" (every attempt failed otherwise).
	Acknowledged string `json:"acknowledged"`
	// Node: the /nodes entry (host:tcp_port) of the last attempt.
	Node     string   `json:"node"`
	Attempts int      `json:"attempts"`
	Errors   []string `json:"errors,omitempty"`
	// GenerateMS and PublishMS: time spent making the body, then publishing it (all attempts);
	// run.sh times its SIGKILL from them so it lands while a body is on the wire.
	GenerateMS int64 `json:"generate_ms"`
	PublishMS  int64 `json:"publish_ms"`
}

// summary is what publish prints (and writes to -summary) at the end.
type summary struct {
	Published        int     `json:"published"`
	Acknowledged     int     `json:"acknowledged"`
	Ambiguous        int     `json:"ambiguous"`
	Failed           int     `json:"failed"`
	ConnectionErrors int     `json:"connection_errors"`
	AmbiguousErrors  int     `json:"ambiguous_errors"`
	OtherErrors      int     `json:"other_errors"`
	NodeRefreshes    int     `json:"node_refreshes"`
	Seconds          float64 `json:"seconds"`
	Stats            *depth  `json:"stats,omitempty"`
	StatsError       string  `json:"stats_error,omitempty"`
}

// errorKind sorts a go-nsq Publish error the way Kodo reacts to it.
func errorKind(err error) string {
	var p nsq.ErrProtocol
	if errors.As(err, &p) {
		if strings.HasPrefix(p.Reason, "E_AMBIGUOUS") {
			return "ambiguous"
		}
		return "other"
	}
	// Dial, write and read errors, and ErrNotConnected (the connection closed with the
	// command outstanding): the node is unreachable for now.
	return "connection"
}

// kodoConfig is go-nsq configured as Kodo configures it.
func kodoConfig() *nsq.Config {
	cfg := nsq.NewConfig()
	cfg.DialTimeout = 3 * time.Second
	cfg.WriteTimeout = 3 * time.Second
	cfg.ReadTimeout = 60 * time.Second
	return cfg
}

func publishMain(args []string) error {
	fs := flag.NewFlagSet("publish", flag.ExitOnError)
	lookupd := fs.String("lookupd", "", "nsqlookupd HTTP address (host:port) whose /nodes lists the targets")
	topic := fs.String("topic", "", "topic")
	n := fs.Int("n", 1, "messages to publish")
	size := fs.Int("size", 104857500, "body size in bytes (Kodo's largest: 100 MiB - 100 B)")
	firstID := fs.Uint64("first-id", 1, "id of the first message (ids must be unique across runs)")
	refresh := fs.Duration("refresh", 300*time.Second, "how often /nodes is refreshed")
	attempts := fs.Int("attempts", 6, "attempts per message, each on the next node after a failure")
	interval := fs.Duration("interval", 0, "pause between messages (a steady fleet rather than a flood)")
	ledgerPath := fs.String("ledger", "", "ledger file (JSON lines, appended)")
	summaryPath := fs.String("summary", "", "summary file (JSON)")
	_ = fs.Parse(args)
	if *lookupd == "" || *topic == "" || *ledgerPath == "" {
		return fmt.Errorf("publish needs -lookupd, -topic and -ledger")
	}
	ledger, err := os.OpenFile(*ledgerPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer ledger.Close()

	stop := make(chan struct{})
	defer close(stop)
	nodes, err := watchNodes(*lookupd, *refresh, stop)
	if err != nil {
		return err
	}
	cfg := kodoConfig()
	producers := map[string]*nsq.Producer{}
	defer func() {
		for _, p := range producers {
			p.Stop()
		}
	}()
	producer := func(addr string) (*nsq.Producer, error) {
		if p, ok := producers[addr]; ok {
			return p, nil
		}
		p, err := nsq.NewProducer(addr, cfg)
		if err != nil {
			return nil, err
		}
		p.SetLogger(log.New(io.Discard, "", 0), nsq.LogLevelError)
		producers[addr] = p
		return p, nil
	}

	// SIGTERM stops the run between messages: the one in progress is finished and written to
	// the ledger first, so every message that may have reached a broker has its line (a
	// SIGKILL mid-publish leaves a stored message the ledger does not know).
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)

	var s summary
	start := time.Now()
	cursor := 0
publishing:
	for i := 0; i < *n; i++ {
		select {
		case <-term:
			break publishing
		default:
		}
		id := *firstID + uint64(i)
		began := time.Now()
		body, sum, err := makeBody(id, *size)
		if err != nil {
			return err
		}
		e := entry{ID: id, SHA256: sum, Size: *size, Acknowledged: "no"}
		e.GenerateMS = time.Since(began).Milliseconds()
		began = time.Now()
		sawAmbiguous := false
		for e.Attempts < *attempts {
			list := nodes.get()
			// Drop producers of nodes that left /nodes (one Producer per listed node).
			listed := map[string]bool{}
			for _, nd := range list {
				listed[nd.tcpAddr()] = true
			}
			for a, p := range producers {
				if !listed[a] {
					p.Stop()
					delete(producers, a)
				}
			}
			nd := list[cursor%len(list)]
			e.Node = nd.tcpAddr()
			e.Attempts++
			p, err := producer(e.Node)
			if err == nil {
				err = p.Publish(*topic, body)
			}
			if err == nil {
				e.Acknowledged = "yes"
				break
			}
			switch errorKind(err) {
			case "ambiguous":
				s.AmbiguousErrors++
				sawAmbiguous = true
			case "other":
				s.OtherErrors++
			default:
				s.ConnectionErrors++
			}
			e.Errors = append(e.Errors, fmt.Sprintf("%s: %v", e.Node, err))
			// Kodo moves on to the next node after any failure.
			cursor++
			time.Sleep(200 * time.Millisecond)
		}
		e.PublishMS = time.Since(began).Milliseconds()
		if e.Acknowledged != "yes" && sawAmbiguous {
			e.Acknowledged = "ambiguous"
		}
		switch e.Acknowledged {
		case "yes":
			s.Acknowledged++
		case "ambiguous":
			s.Ambiguous++
		default:
			s.Failed++
		}
		s.Published++
		line, _ := json.Marshal(e)
		if _, err := ledger.Write(append(line, '\n')); err != nil {
			return err
		}
		fmt.Printf("published id=%d acknowledged=%s attempts=%d node=%s\n", e.ID, e.Acknowledged, e.Attempts, e.Node)
		select {
		case <-term:
			break publishing
		case <-time.After(*interval):
		}
	}
	s.Seconds = time.Since(start).Seconds()
	nodes.mu.Lock()
	s.NodeRefreshes = nodes.refreshes
	nodes.mu.Unlock()
	var addrs []string
	for _, nd := range nodes.get() {
		addrs = append(addrs, nd.httpAddr())
	}
	if d, err := topicStats(addrs, *topic); err != nil {
		s.StatsError = err.Error()
	} else {
		s.Stats = &d
	}
	out, _ := json.Marshal(s)
	fmt.Printf("summary %s\n", out)
	if *summaryPath != "" {
		return os.WriteFile(*summaryPath, append(out, '\n'), 0o644)
	}
	return nil
}

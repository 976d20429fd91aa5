package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

var httpClient = &http.Client{Timeout: 10 * time.Second}

// node is one nsqlookupd /nodes entry as Kodo uses it.
type node struct {
	BroadcastAddress string `json:"broadcast_address"`
	TCPPort          int    `json:"tcp_port"`
	HTTPPort         int    `json:"http_port"`
	NodeID           uint64 `json:"node_id"`
}

func (n node) tcpAddr() string {
	return net.JoinHostPort(n.BroadcastAddress, strconv.Itoa(n.TCPPort))
}

func (n node) httpAddr() string {
	return net.JoinHostPort(n.BroadcastAddress, strconv.Itoa(n.HTTPPort))
}

// fetchNodes reads nsqlookupd /nodes.
func fetchNodes(lookupd string) ([]node, error) {
	resp, err := httpClient.Get("http://" + lookupd + "/nodes")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /nodes: %s", resp.Status)
	}
	var doc struct {
		Producers []node `json:"producers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, fmt.Errorf("GET /nodes: %w", err)
	}
	return doc.Producers, nil
}

// nodeList is /nodes refreshed every interval (a failed refresh keeps the last list, as a
// producer that must keep publishing would).
type nodeList struct {
	mu        sync.Mutex
	nodes     []node
	refreshes int
	failures  int
}

func (l *nodeList) get() []node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nodes
}

func (l *nodeList) refresh(lookupd string) error {
	nodes, err := fetchNodes(lookupd)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failures++
		return err
	}
	l.refreshes++
	l.nodes = nodes
	return nil
}

// watchNodes fills a nodeList (waiting up to 30 s for a first non-empty answer) and keeps it
// refreshed every interval until stop is closed.
func watchNodes(lookupd string, interval time.Duration, stop <-chan struct{}) (*nodeList, error) {
	l := &nodeList{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := l.refresh(lookupd)
		if err == nil && len(l.get()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no /nodes from %s within 30 s (last error: %v)", lookupd, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = l.refresh(lookupd)
			}
		}
	}()
	return l, nil
}

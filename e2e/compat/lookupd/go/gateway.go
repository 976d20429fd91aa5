package main

// The producer gateway scenario (rustqueue-gateway, docs/gateway.md): producers know only the
// gateway's address; go-nsq Producers publish over TCP through it (PUB and MPUB), HTTP /pub
// and /mpub go through it, the messages land on both brokers (least-active TCP placement, the
// HTTP side's shuffle), and a consumer given only the lookup address receives every one.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/nsqio/go-nsq"
)

// messageCount reads topic's message_count from a broker's /stats (0 when absent).
func messageCount(web, topic string) (int, error) {
	resp, err := httpClient.Get("http://" + web + "/stats?format=json&topic=" + topic)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var doc struct {
		Topics []struct {
			TopicName    string `json:"topic_name"`
			MessageCount int    `json:"message_count"`
		} `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return 0, err
	}
	for _, t := range doc.Topics {
		if t.TopicName == topic {
			return t.MessageCount, nil
		}
	}
	return 0, nil
}

// viaGateway records bodies published through the gateway: go-nsq Producers over TCP (one
// connection each), then HTTP /pub and /mpub.
func (l *ledger) viaGateway(e *env, topic string, producers, perProducer int) error {
	cfg := nsq.NewConfig()
	var ps []*nsq.Producer
	defer func() {
		for _, p := range ps {
			p.Stop()
		}
	}()
	for i := 0; i < producers; i++ {
		p, err := nsq.NewProducer(e.gwTCP, cfg)
		if err != nil {
			return err
		}
		p.SetLogger(log.New(io.Discard, "", 0), nsq.LogLevelError)
		// Connect every producer before any publishes, so each holds its own tunnel.
		if err := p.Ping(); err != nil {
			return fmt.Errorf("producer %d through the gateway: %v", i, err)
		}
		ps = append(ps, p)
	}
	for i, p := range ps {
		for j := 0; j < perProducer; j++ {
			body := fmt.Sprintf("%s-tcp-%d-%d", topic, i, j)
			if err := p.Publish(topic, []byte(body)); err != nil {
				return fmt.Errorf("PUB through the gateway: %v", err)
			}
			l.add(body)
		}
		batch := [][]byte{}
		for j := 0; j < 5; j++ {
			batch = append(batch, []byte(fmt.Sprintf("%s-tcpm-%d-%d", topic, i, j)))
		}
		if err := p.MultiPublish(topic, batch); err != nil {
			return fmt.Errorf("MPUB through the gateway: %v", err)
		}
		for _, b := range batch {
			l.add(string(b))
		}
	}
	if err := l.publish(e.gwHTTP, topic, "http", 20); err != nil {
		return fmt.Errorf("HTTP /pub through the gateway: %v", err)
	}
	for k := 0; k < 4; k++ {
		var lines []string
		for j := 0; j < 10; j++ {
			lines = append(lines, fmt.Sprintf("%s-mpub-%d-%d", topic, k, j))
		}
		resp, err := httpClient.Post("http://"+e.gwHTTP+"/mpub?topic="+topic, "application/octet-stream",
			bytes.NewBufferString(strings.Join(lines, "\n")))
		if err != nil {
			return fmt.Errorf("HTTP /mpub through the gateway: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("HTTP /mpub through the gateway: %d %s", resp.StatusCode, b)
		}
		for _, line := range lines {
			l.add(line)
		}
	}
	return nil
}

func (l *ledger) add(body string) {
	l.mu.Lock()
	l.published[body] = true
	l.mu.Unlock()
}

// gatewayPublish: producers publish only through the gateway; the messages land on both
// brokers; a consumer through lookup receives all of them.
func gatewayPublish(e *env, l *ledger) error {
	t := topicName("gateway")
	if err := l.viaGateway(e, t, 4, 25); err != nil {
		return err
	}
	n1, err1 := messageCount(e.b1web, t)
	n2, err2 := messageCount(e.b2web, t)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("broker stats: %v %v", err1, err2)
	}
	fmt.Printf("gateway spread: broker 1 holds %d, broker 2 holds %d of %d\n", n1, n2, len(l.published))
	if n1 == 0 || n2 == 0 {
		return fmt.Errorf("messages did not land on both brokers: %d and %d", n1, n2)
	}
	if n1+n2 != len(l.published) {
		return fmt.Errorf("brokers hold %d messages, %d were acknowledged", n1+n2, len(l.published))
	}
	if _, err := e.waitProducers(t, []string{e.b1tcp, e.b2tcp}, 10*time.Second); err != nil {
		return err
	}
	c, err := consumer(e, t, l)
	if err != nil {
		return err
	}
	defer c.Stop()
	return l.waitAll(15 * time.Second)
}

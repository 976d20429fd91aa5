package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// depth is one topic's figures summed over several /stats answers.
type depth struct {
	// TopicDepth: the topics' own depth.
	TopicDepth int64 `json:"topic_depth"`
	// MessageCount: messages the topics hold.
	MessageCount int64 `json:"message_count"`
	// ChannelDepth: summed over every channel of the topic.
	ChannelDepth int64 `json:"channel_depth"`
	// Answers: how many /stats answers were summed.
	Answers int `json:"answers"`
}

// topicStats sums topic's figures over GET /stats?format=json&topic= on every address.
func topicStats(addrs []string, topic string) (depth, error) {
	var d depth
	for _, a := range addrs {
		u := "http://" + a + "/stats?format=json&topic=" + url.QueryEscape(topic)
		resp, err := httpClient.Get(u)
		if err != nil {
			return d, err
		}
		var doc struct {
			Topics []struct {
				TopicName    string `json:"topic_name"`
				Name         string `json:"name"`
				Depth        int64  `json:"depth"`
				MessageCount int64  `json:"message_count"`
				Channels     []struct {
					Depth int64 `json:"depth"`
				} `json:"channels"`
			} `json:"topics"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return d, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		if err != nil {
			return d, fmt.Errorf("GET %s: %w", u, err)
		}
		d.Answers++
		for _, t := range doc.Topics {
			if t.TopicName != topic && t.Name != topic {
				continue
			}
			d.TopicDepth += t.Depth
			d.MessageCount += t.MessageCount
			for _, c := range t.Channels {
				d.ChannelDepth += c.Depth
			}
		}
	}
	return d, nil
}

func statsMain(args []string) error {
	fs := flag.NewFlagSet("stats", flag.ExitOnError)
	lookupd := fs.String("lookupd", "", "nsqlookupd HTTP address: sum over every /nodes entry's http_port")
	httpAddrs := fs.String("http", "", "comma-separated HTTP addresses to sum over instead of /nodes")
	topic := fs.String("topic", "", "topic")
	_ = fs.Parse(args)
	if *topic == "" || (*lookupd == "") == (*httpAddrs == "") {
		return fmt.Errorf("stats needs -topic and exactly one of -lookupd, -http")
	}
	var addrs []string
	if *lookupd != "" {
		nodes, err := fetchNodes(*lookupd)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			addrs = append(addrs, n.httpAddr())
		}
	} else {
		addrs = strings.Split(*httpAddrs, ",")
	}
	d, err := topicStats(addrs, *topic)
	if err != nil {
		return err
	}
	out, _ := json.Marshal(d)
	fmt.Println(string(out))
	return nil
}

package main

import (
	"fmt"
	"net/url"
	"time"
)

// The subset of nsqd's `/stats?format=json` that the scenarios read. rustqueued serves the
// same field names (docs/compatibility.md).
type statsClient struct {
	ClientID   string `json:"client_id"`
	TLS        bool   `json:"tls"`
	Snappy     bool   `json:"snappy"`
	Deflate    bool   `json:"deflate"`
	Authed     bool   `json:"authed"`
	SampleRate int32  `json:"sample_rate"`
	ReadyCount int64  `json:"ready_count"`
}

type statsChannel struct {
	Name  string `json:"channel_name"`
	Depth int64  `json:"depth"`
	// MessageCount counts the messages the channel received (nsqd: put into the channel).
	MessageCount int64         `json:"message_count"`
	InFlight     int64         `json:"in_flight_count"`
	Deferred     int64         `json:"deferred_count"`
	Clients      []statsClient `json:"clients"`
}

type statsTopic struct {
	Name     string         `json:"topic_name"`
	Channels []statsChannel `json:"channels"`
}

type statsDoc struct {
	Topics []statsTopic `json:"topics"`
}

// topicStats returns the stats of one topic; ok is false when the broker does not list it.
func (e *env) topicStats(topic string) (t statsTopic, ok bool, err error) {
	var doc statsDoc
	if err = getJSON(e.http, "/stats?format=json&topic="+url.QueryEscape(topic), &doc); err != nil {
		return t, false, err
	}
	for _, t := range doc.Topics {
		if t.Name == topic {
			return t, true, nil
		}
	}
	return t, false, nil
}

// channelStats returns one channel's stats; ok is false when it does not exist.
func (e *env) channelStats(topic, channel string) (statsChannel, bool, error) {
	t, ok, err := e.topicStats(topic)
	if err != nil || !ok {
		return statsChannel{}, false, err
	}
	for _, c := range t.Channels {
		if c.Name == channel {
			return c, true, nil
		}
	}
	return statsChannel{}, false, nil
}

// waitChannelGone waits until the broker's /stats no longer lists topic/channel.
func (e *env) waitChannelGone(topic, channel string) error {
	var lastErr error
	return waitFor(5*time.Second, func() bool {
		_, ok, err := e.channelStats(topic, channel)
		lastErr = err
		return err == nil && !ok
	}, func() string { return fmt.Sprintf("channel %s/%s still listed (err %v)", topic, channel, lastErr) })
}

// checkClient asserts a property of the (single) client subscribed to topic/channel.
func (e *env) checkClient(topic, channel, what string, want func(statsClient) bool) error {
	var last statsChannel
	var lastErr error
	return waitFor(3*time.Second, func() bool {
		c, ok, err := e.channelStats(topic, channel)
		last, lastErr = c, err
		return err == nil && ok && len(c.Clients) > 0 && want(c.Clients[0])
	}, func() string {
		return fmt.Sprintf("/stats does not show %s for %s/%s: %+v (err %v)", what, topic, channel, last, lastErr)
	})
}

// lookupDoc is the lookupd-style answer of `/lookup?topic=`.
type lookupDoc struct {
	Channels  []string `json:"channels"`
	Producers []struct {
		BroadcastAddress string `json:"broadcast_address"`
		TCPPort          int    `json:"tcp_port"`
		HTTPPort         int    `json:"http_port"`
	} `json:"producers"`
}

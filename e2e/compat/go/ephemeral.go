package main

import (
	"fmt"
	"strconv"
	"time"
)

// sample: SampleRate=50 over 100 messages. rustqueued samples deterministically (the first 50
// of every 100 candidates, docs/compatibility.md), so it must deliver exactly 50. nsqd draws
// rand.Int31n(100) per message and keeps it when the draw is <= the rate (about 51 %), so for
// nsqd only a wide binomial bound is asserted (20..80; a miss has probability < 1e-9).
// Either way nothing sampled out may arrive later, and the channel must drain to depth 0.
func sample(e *env) error {
	c := e.config()
	c.SampleRate = 50
	topic := e.topic()
	box := newInbox()
	cons, err := e.consumer(c, topic, "c", box, nil)
	if err != nil {
		return err
	}
	defer stop(cons)
	if err := e.checkClient(topic, "c", "sample_rate 50", func(s statsClient) bool { return s.SampleRate == 50 }); err != nil {
		return err
	}
	p, err := e.producer(e.config())
	if err != nil {
		return err
	}
	defer p.Stop()
	var bodies [][]byte
	for i := range 100 {
		bodies = append(bodies, []byte("sample-"+strconv.Itoa(i)))
	}
	if err := p.MultiPublish(topic, bodies); err != nil {
		return err
	}
	var last statsChannel
	if err := waitFor(10*time.Second, func() bool {
		ch, ok, err := e.channelStats(topic, "c")
		last = ch
		return err == nil && ok && ch.MessageCount >= 100 && ch.Depth == 0 && ch.InFlight == 0
	}, func() string {
		return fmt.Sprintf("channel never drained: %+v, %d delivered", last, len(box.snapshot()))
	}); err != nil {
		return err
	}
	first := len(box.snapshot())
	time.Sleep(500 * time.Millisecond)
	n := len(box.snapshot())
	if n != first {
		return fmt.Errorf("sampled-out messages arrived later: %d then %d", first, n)
	}
	if e.server == "nsqd" {
		if n < 20 || n > 80 {
			return fmt.Errorf("nsqd delivered %d of 100 at sample_rate 50, want 20..80", n)
		}
		fmt.Printf("INFO %s/sample nsqd delivered %d of 100 (random sampling)\n", e.mode, n)
		return nil
	}
	if n != 50 {
		return fmt.Errorf("delivered %d of 100 at sample_rate 50, want exactly 50", n)
	}
	return nil
}

// ephemeralChannel: `temporary#ephemeral` disappears once its consumer stops; a re-created
// channel must not see `stale` (published while it did not exist) and must get `fresh`.
// A durable `keeper` channel holds the topic's messages meanwhile: without any channel, nsqd
// keeps messages in the topic and hands them to the next channel created, so the contract
// is only defined for topics that have another channel.
func ephemeralChannel(e *env) error {
	topic := e.topic()
	const ch = "temporary#ephemeral"
	if err := post(e.http, "/topic/create?topic="+topic); err != nil {
		return err
	}
	if err := post(e.http, "/channel/create?topic="+topic+"&channel=keeper"); err != nil {
		return err
	}
	box := newInbox()
	cons, err := e.consumer(e.config(), topic, ch, box, nil)
	if err != nil {
		return err
	}
	if err := e.publishOne(e.config(), topic, []byte("first")); err != nil {
		stop(cons)
		return err
	}
	if err := box.waitBodies(5*time.Second, "first"); err != nil {
		stop(cons)
		return err
	}
	stop(cons)
	if err := e.waitChannelGone(topic, ch); err != nil {
		return err
	}
	if _, ok, err := e.channelStats(topic, "keeper"); err != nil || !ok {
		return fmt.Errorf("durable channel keeper vanished with the ephemeral one (err %v)", err)
	}
	if err := e.publishOne(e.config(), topic, []byte("stale")); err != nil {
		return err
	}
	again := newInbox()
	cons, err = e.consumer(e.config(), topic, ch, again, nil)
	if err != nil {
		return err
	}
	defer stop(cons)
	if err := e.publishOne(e.config(), topic, []byte("fresh")); err != nil {
		return err
	}
	if err := again.waitBodies(5*time.Second, "fresh"); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	if again.count("stale") > 0 {
		return fmt.Errorf("re-created ephemeral channel received the stale message: %s", again.describe())
	}
	return nil
}

// ephemeralTopic: a `#ephemeral` topic whose only (ephemeral) channel loses its last consumer
// disappears from /stats, as in nsqd.
func ephemeralTopic(e *env) error {
	topic := e.topic() + "#ephemeral"
	box := newInbox()
	cons, err := e.consumer(e.config(), topic, "c#ephemeral", box, nil)
	if err != nil {
		return err
	}
	if err := e.publishOne(e.config(), topic, []byte("short-lived")); err != nil {
		stop(cons)
		return err
	}
	if err := box.waitBodies(5*time.Second, "short-lived"); err != nil {
		stop(cons)
		return err
	}
	stop(cons)
	var listed bool
	return waitFor(5*time.Second, func() bool {
		_, ok, err := e.topicStats(topic)
		listed = ok
		return err == nil && !ok
	}, func() string { return fmt.Sprintf("ephemeral topic still listed=%v", listed) })
}

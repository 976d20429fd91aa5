package main

import (
	"fmt"
	"math/rand"
	"strings"
	"time"
)

// secureScenarios run against the broker with TLS required, client certificates verified
// against the test CA and an external auth server (`compat-secret`, tls=true and the client
// certificate's CN, TTL 1 s, publish+subscribe on topics matching `^compat-`).
func secureScenarios() []scenario {
	return []scenario{
		{"tls_auth_pubsub", tlsAuthPubsub},
		{"tls_required", tlsRequired},
		{"mtls_no_client_cert", mtlsRejects("")},
		{"mtls_untrusted_client_cert", mtlsRejects("rogue-client")},
		{"auth_ttl_refresh", authTTLRefresh},
		{"auth_denied", authDenied},
		{"auth_topic_not_granted", authTopicNotGranted},
		{"auth_sub_not_granted", authSubNotGranted},
		{"snappy", compressed("snappy")},
		{"mpub", mpub},
		{"dpub", dpub},
		{"req", req},
		{"touch", touch},
		{"fanout", fanout},
		{"ephemeral_channel", ephemeralChannel},
	}
}

// tlsAuthPubsub: TLS + client certificate + AUTH + Deflate round trip; /stats must show the
// consumer connection as TLS, deflate and authed.
func tlsAuthPubsub(e *env) error {
	topic, err := roundTrip(e, e.config(), e.config())
	if err != nil {
		return err
	}
	box := newInbox()
	cons, err := e.consumer(e.config(), topic, "watch", box, nil)
	if err != nil {
		return err
	}
	defer stop(cons)
	return e.checkClient(topic, "watch", "tls+deflate+authed", func(s statsClient) bool {
		return s.TLS && s.Deflate && s.Authed
	})
}

// expectRefused publishes with cfg and requires an error mentioning one of codes.
func expectRefused(err error, what string, codes ...string) error {
	if err == nil {
		return fmt.Errorf("%s: publish succeeded, want it refused", what)
	}
	for _, c := range codes {
		if strings.Contains(err.Error(), c) {
			return nil
		}
	}
	if len(codes) == 0 {
		return nil
	}
	return fmt.Errorf("%s: refused with %q, want one of %v", what, err, codes)
}

// tlsRequired: a plaintext client is refused. nsqd answers E_INVALID "cannot PUB in current
// state (TLS required)"; rustqueued answers E_TLS_REQUIRED (docs/compatibility.md).
func tlsRequired(e *env) error {
	c := e.config()
	c.TlsV1, c.TlsConfig, c.Deflate = false, nil, false
	err := e.publishOne(c, e.topic(), []byte("plaintext"))
	return expectRefused(err, "plaintext client", "E_TLS_REQUIRED", "TLS required")
}

// mtlsRejects: TLS without a client certificate, or with one from an unknown CA, never gets
// to publish (the handshake fails, so no error code is defined).
func mtlsRejects(cert string) func(e *env) error {
	return func(e *env) error {
		c := e.config()
		c.TlsConfig = e.tlsConfig(cert)
		err := e.publishOne(c, e.topic(), []byte("no valid client cert"))
		return expectRefused(err, "client certificate "+cert)
	}
}

// authTTLRefresh: with a 1 s TTL, a publish 1.2 s after the first one must succeed and must
// have made the broker ask the auth server again.
func authTTLRefresh(e *env) error {
	before, err := e.authRequests()
	if err != nil {
		return err
	}
	p, err := e.producer(e.config())
	if err != nil {
		return err
	}
	defer p.Stop()
	topic := e.topic()
	if err := p.Publish(topic, []byte("before expiry")); err != nil {
		return err
	}
	time.Sleep(1200 * time.Millisecond)
	if err := p.Publish(topic, []byte("after expiry")); err != nil {
		return fmt.Errorf("publish after the TTL expired: %w", err)
	}
	after, err := e.authRequests()
	if err != nil {
		return err
	}
	if after-before < 2 {
		return fmt.Errorf("auth server saw %d requests, want >= 2 (AUTH + refresh after TTL)", after-before)
	}
	return nil
}

// authDenied: a wrong secret is refused by the auth server (403), so publishing fails.
// nsqd reports E_AUTH_FAILED; rustqueued treats 401/403 as a definitive E_UNAUTHORIZED.
func authDenied(e *env) error {
	c := e.config()
	c.AuthSecret = "wrong-secret"
	err := e.publishOne(c, e.topic(), []byte("denied"))
	return expectRefused(err, "wrong secret", "E_AUTH_FAILED", "E_UNAUTHORIZED")
}

// authTopicNotGranted: the grant covers `^compat-` topics only.
func authTopicNotGranted(e *env) error {
	err := e.publishOne(e.config(), "forbidden-topic", []byte("not granted"))
	return expectRefused(err, "topic outside the grant", "E_UNAUTHORIZED")
}

// authSubNotGranted: SUB on a topic outside the grant is refused with E_UNAUTHORIZED, a fatal
// error (nsqd closes the connection, so go-nsq schedules a reconnect); nothing is delivered
// and the refused SUB must not have created the topic. go-nsq's ConnectToNSQD does not wait
// for the SUB answer, so the refusal shows up in the consumer's protocol log.
func authSubNotGranted(e *env) error {
	topic := fmt.Sprintf("forbidden-sub-%s-%06d", e.mode, rand.Intn(1000000))
	box := newInbox()
	cons, err := e.newConsumer(e.config(), topic, "c", box, nil)
	if err != nil {
		return err
	}
	connectErr := cons.ConnectToNSQD(e.tcp)
	defer stop(cons)
	if connectErr != nil && !strings.Contains(connectErr.Error(), "E_UNAUTHORIZED") {
		return fmt.Errorf("SUB outside the grant: connect failed with %v, want E_UNAUTHORIZED", connectErr)
	}
	logged := func(s string) bool { return strings.Contains(string(e.log.Bytes()), s) }
	if err := waitFor(5*time.Second, func() bool { return logged("protocol error - E_UNAUTHORIZED") },
		func() string { return "go-nsq never reported E_UNAUTHORIZED for the SUB" }); err != nil {
		return err
	}
	if err := waitFor(5*time.Second, func() bool { return logged("re-connecting") },
		func() string { return "the broker kept the connection open after the fatal E_UNAUTHORIZED" }); err != nil {
		return err
	}
	if n := len(box.snapshot()); n != 0 {
		return fmt.Errorf("refused subscriber got %s", box.describe())
	}
	if _, ok, err := e.topicStats(topic); err != nil || ok {
		return fmt.Errorf("the refused SUB created topic %s (listed=%v, err %v)", topic, ok, err)
	}
	return nil
}

// authRequests asks the test auth server how many /auth requests it has answered.
func (e *env) authRequests() (int, error) {
	var doc struct {
		Requests int `json:"requests"`
	}
	err := getJSON(e.authHTTP, "/requests", &doc)
	return doc.Requests, err
}

// Command compat-go runs the go-nsq half of the official-client compatibility matrix
// against one NSQ-compatible server: official nsqd or rustqueued.
//
// e2e/compat/run.sh starts the servers and calls this binary once per server mode:
// `plain` (a broker with optional TLS) and `secure` (TLS required, mTLS, external AUTH).
// Every scenario prints one line, `PASS <mode>/<name> <ms>` or `FAIL <mode>/<name> <ms>: <why>`,
// followed on failure by the tail of the go-nsq debug log (the protocol trace). The process
// exits 1 if any scenario failed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"
)

// scenario is one named check; it returns nil on success.
type scenario struct {
	name string
	run  func(e *env) error
}

// scenarioTimeout bounds one scenario, so a hung client cannot stall the whole matrix.
const scenarioTimeout = 45 * time.Second

func main() {
	e := &env{}
	flag.StringVar(&e.server, "server", "", "nsqd or rustqueued (selects documented differences)")
	flag.StringVar(&e.mode, "mode", "plain", "plain or secure")
	flag.StringVar(&e.tcp, "tcp", "", "broker TCP address")
	flag.StringVar(&e.http, "http", "", "broker HTTP address")
	flag.StringVar(&e.lookupHTTP, "lookup-http", "", "HTTP address serving /lookup (nsqlookupd or the broker)")
	flag.StringVar(&e.authHTTP, "auth-http", "", "auth server HTTP address (for request counts)")
	flag.StringVar(&e.tlsDir, "tls-dir", "", "directory with ca.pem, client.pem, client-key.pem, rogue-client.pem, rogue-client-key.pem")
	flag.StringVar(&e.secret, "secret", "compat-secret", "AUTH secret the auth server accepts")
	flag.IntVar(&e.maxMsg, "max-msg-size", 1048576, "the broker's maximum message size in bytes")
	run := flag.String("run", "", "only run scenarios whose name matches this regexp")
	list := flag.Bool("list", false, "list scenario names and exit")
	flag.Parse()

	var set []scenario
	switch e.mode {
	case "plain":
		set = plainScenarios()
	case "secure":
		set = secureScenarios()
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", e.mode)
		os.Exit(2)
	}
	if e.tlsDir != "" {
		// HTTPS admin/stats endpoints (nsqd with --tls-required) need the client certificate.
		httpClient.Transport = &http.Transport{TLSClientConfig: e.tlsConfig("client")}
	}
	filter := regexp.MustCompile(*run)
	failed := 0
	for _, s := range set {
		if !filter.MatchString(s.name) {
			continue
		}
		if *list {
			fmt.Println(e.mode + "/" + s.name)
			continue
		}
		if !runOne(e, s) {
			failed++
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}

// runOne runs a scenario with a fresh log buffer and prints its result line.
func runOne(e *env, s scenario) bool {
	e.log = &syncBuffer{}
	e.name = s.name
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v", r)
			}
		}()
		done <- s.run(e)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(scenarioTimeout):
		err = fmt.Errorf("scenario did not finish within %s", scenarioTimeout)
	}
	ms := time.Since(start).Milliseconds()
	if err == nil {
		fmt.Printf("PASS %s/%s %dms\n", e.mode, s.name, ms)
		return true
	}
	fmt.Printf("FAIL %s/%s %dms: %v\n", e.mode, s.name, ms, err)
	printTail(e.log.Bytes(), 40)
	return false
}

// printTail prints the last n lines of a go-nsq log as an indented trace.
func printTail(b []byte, n int) {
	lines := strings.Split(strings.TrimRight(string(bytes.TrimSpace(b)), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for _, l := range lines {
		if l != "" {
			fmt.Printf("    | %s\n", l)
		}
	}
}

// Command standin behaves like Kodo, the go-nsq producer fleet the Kodo compatibility profile
// serves (docs/kodo.md): it finds its publish targets through nsqlookupd `/nodes`, refreshed on
// an interval, keeps one go-nsq Producer per node, publishes large messages with Kodo's
// timeouts, moves to the next node on an error and reads `/stats` from the nodes' HTTP ports.
//
// Subcommands:
//
//	publish  publish -n messages of -size bytes, writing a ledger (JSON lines) and a summary
//	verify   consume the topic via nsqlookupd /lookup and check the ledger against it
//	stats    sum a topic's depth over /stats of every /nodes entry (or of -http addresses)
//	forward  a stand-in for the <n>-kodo-publish ClusterIP Service (TCP forwarder)
//
// Every message body starts with its id (see body.go), so verify never holds bodies.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "publish":
		err = publishMain(os.Args[2:])
	case "verify":
		err = verifyMain(os.Args[2:])
	case "stats":
		err = statsMain(os.Args[2:])
	case "forward":
		err = forwardMain(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: standin publish|verify|stats|forward [flags] (-h for each)")
	os.Exit(2)
}

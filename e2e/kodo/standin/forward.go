package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// forwardMain stands in for the <n>-kodo-publish ClusterIP Service: it listens on -addr at
// every port of -ports (service port -> target port) and sends each new connection to the
// next gateway's target port, round-robin per connection, as kube-proxy balances a Service.
func forwardMain(args []string) error {
	fs := flag.NewFlagSet("forward", flag.ExitOnError)
	addr := fs.String("addr", "", "listen host (the Service address)")
	gateways := fs.String("gateways", "", "comma-separated gateway hosts (the Pods)")
	ports := fs.String("ports", "4150:4150,4152:4150,4153:4150,4151:4151,4154:4154,4155:4155",
		"service:target port pairs")
	_ = fs.Parse(args)
	if *addr == "" || *gateways == "" {
		return fmt.Errorf("forward needs -addr and -gateways")
	}
	gws := strings.Split(*gateways, ",")
	for _, pair := range strings.Split(*ports, ",") {
		from, to, ok := strings.Cut(pair, ":")
		if !ok {
			return fmt.Errorf("bad port pair %q", pair)
		}
		if _, err := strconv.Atoi(to); err != nil {
			return fmt.Errorf("bad port pair %q", pair)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(*addr, from))
		if err != nil {
			return err
		}
		go serve(l, gws, to)
	}
	fmt.Printf("forwarding %s ports %s to %s\n", *addr, *ports, *gateways)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}

func serve(l net.Listener, gws []string, port string) {
	var next atomic.Uint64
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		gw := gws[int(next.Add(1)-1)%len(gws)]
		go pipe(c, net.JoinHostPort(gw, port))
	}
}

func pipe(c net.Conn, target string) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if t, ok := dst.(*net.TCPConn); ok {
			_ = t.CloseWrite()
		}
		done <- struct{}{}
	}
	go half(u, c)
	go half(c, u)
	<-done
	<-done
}

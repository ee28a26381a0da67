package main

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/compactd/compactd/internal/fakeupstream"
)

// fakeUpstreamConfig is the command line of `compactd fake-upstream`. It reads no environment:
// COMPACTD_LISTEN is serve's address, and the fake started next to serve must not take it.
type fakeUpstreamConfig struct {
	listen                              string
	firstByte, tokenDelay, summaryDelay time.Duration
	grace                               time.Duration
}

func parseFakeUpstreamFlags(args []string) (c fakeUpstreamConfig, err error) {
	fs := flag.NewFlagSet("fake-upstream", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9090", "address to listen on")
	fs.DurationVar(&c.firstByte, "first-byte-delay", 0, "delay before each response starts")
	fs.DurationVar(&c.tokenDelay, "token-delay", 0, "delay between streamed deltas")
	fs.DurationVar(&c.summaryDelay, "summary-delay", 0, "extra delay for summariser calls")
	fs.DurationVar(&c.grace, "shutdown-grace", 5*time.Second, "drain time on SIGTERM")
	return c, parseFlags(fs, args)
}

func runFakeUpstream(args []string) error {
	c, err := parseFakeUpstreamFlags(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// A long-running fake keeps no request log: it would grow without bound. It is strict, as
	// in the tests: a request the real API would refuse is refused, and logged (route and the
	// API's error message, which names ids and types, never content).
	fake := fakeupstream.New(fakeupstream.Options{FirstByteDelay: c.firstByte, TokenDelay: c.tokenDelay, SummaryDelay: c.summaryDelay, DropBodies: true,
		OnRefuse: func(r fakeupstream.Recorded) {
			log.Warn("refused a request the real API would refuse", "method", r.Method, "path", r.Path, "status", r.Status, "reason", r.Refused)
		}})
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	return serveUntilSignal(&http.Server{Handler: fake, ReadHeaderTimeout: defaultReadHeaderTimeout}, ln, c.grace, log, func() {
		log.Info("fake upstream listening", "addr", ln.Addr().String())
	})
}

package main

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/compactd/compactd/fakeupstream"
)

func runFakeUpstream(args []string) error {
	fs := flag.NewFlagSet("fake-upstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9090", "address to listen on")
	firstByte := fs.Duration("first-byte-delay", 0, "delay before each response starts")
	tokenDelay := fs.Duration("token-delay", 0, "delay between streamed deltas")
	summaryDelay := fs.Duration("summary-delay", 0, "extra delay for summariser calls")
	grace := fs.Duration("shutdown-grace", 5*time.Second, "drain time on SIGTERM")
	// No environment: COMPACTD_LISTEN is serve's address, not the fake's.
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// A long-running fake keeps no request log: it would grow without bound.
	fake := fakeupstream.New(fakeupstream.Options{FirstByteDelay: *firstByte, TokenDelay: *tokenDelay, SummaryDelay: *summaryDelay, DropBodies: true})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("fake upstream listening", "addr", ln.Addr().String())
	return serveUntilSignal(&http.Server{Handler: fake, ReadHeaderTimeout: defaultReadHeaderTimeout}, ln, *grace, log)
}

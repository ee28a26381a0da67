package loadtest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/compactd/compactd/internal/fakeupstream"
)

// full runs the full-size load test (200 conversations):
//
//	go test ./loadtest -run FaultInjected -full -timeout 20m -v
//
// and writes its figures to the file named by -report (when set).
var (
	full   = flag.Bool("full", false, "run the fault-injected load test at full size (200 conversations × 6 turns)")
	report = flag.String("report", "", "write the run's figures (Markdown) to this file")
)

func TestFaultInjected(t *testing.T) {
	if testing.Short() {
		t.Skip("load test skipped in -short mode")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	cfg := Config{Conversations: 40, Turns: 4, Faults: DefaultFaults(1)}
	if *full {
		cfg.Conversations, cfg.Turns = 200, 6
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fault-injected load test, %d conversations × %d turns:\n%s", cfg.Conversations, cfg.Turns, rep)
	if *report != "" {
		out := fmt.Sprintf("## Fault-injected load test (%d conversations × %d turns, seed %d)\n\n"+
			"Command: `go test ./loadtest -run FaultInjected -full -timeout 20m -v`\n\n%s",
			cfg.Conversations, cfg.Turns, cfg.Faults.Seed, rep)
		if err := os.WriteFile(*report, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}

	if rep.ItemsLost != 0 {
		t.Errorf("%d compaction items did not open on the next turn", rep.ItemsLost)
	}
	if n := rep.UncleanTotal(); n != 0 {
		t.Errorf("%d attempts ended neither in a complete stream nor in a clean error: %v", n, rep.Unclean)
	}
	if len(rep.UpstreamRefused) != 0 {
		t.Errorf("the strict fake upstream refused requests compactd sent: %v", rep.UpstreamRefused)
	}
	if rep.Turns == 0 || rep.TurnsOK < rep.Turns/2 {
		t.Errorf("only %d of %d turns completed", rep.TurnsOK, rep.Turns)
	}
	if rep.Compactions == 0 || rep.ItemsOpened == 0 {
		t.Errorf("compactions %d, items opened %d: the run did not exercise compaction", rep.Compactions, rep.ItemsOpened)
	}
	for _, k := range []string{Fault5xx, FaultRateLimit, FaultSlow, FaultCut, FaultReset} {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	// Generous: the run keeps nothing once torn down; a leak of per-conversation histories
	// (a few hundred KB each) would show at full size.
	const bound = 256 << 20
	if rep.HeapInuse > bound {
		t.Errorf("heap in use after the run: %d bytes, over %d", rep.HeapInuse, bound)
	}
}

// TestFaultInjectorRoll checks the rates pick the kinds: one kind at a time, then the mix.
func TestFaultInjectorRoll(t *testing.T) {
	tests := []struct {
		name string
		f    Faults
		want string
	}{
		{"none", Faults{}, FaultNone},
		{"5xx", Faults{Status5xx: 1}, Fault5xx},
		{"429", Faults{RateLimit: 1}, FaultRateLimit},
		{"slow", Faults{SlowFirstByte: 1}, FaultSlow},
		{"cut", Faults{CutStream: 1}, FaultCut},
		{"reset", Faults{Reset: 1}, FaultReset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi := NewFaultInjector(nil, tt.f)
			for range 20 {
				if got, _ := fi.roll(); got != tt.want {
					t.Fatalf("roll = %s, want %s", got, tt.want)
				}
			}
		})
	}
	// Mixed rates: every kind shows up, in roughly its proportion.
	fi := NewFaultInjector(nil, DefaultFaults(7))
	seen := map[string]int{}
	for range 10000 {
		k, _ := fi.roll()
		seen[k]++
	}
	for _, k := range faultKinds {
		if seen[k] == 0 {
			t.Errorf("kind %s never rolled in 10000 tries: %v", k, seen)
		}
	}
}

// TestFaultInjectorServes drives each fault kind over a real connection and checks the client
// sees what that fault means.
func TestFaultInjectorServes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	stream := `{"model":"fake-model","stream":true,"input":"hi"}`
	plain := `{"model":"fake-model","input":"hi"}`
	tests := []struct {
		name   string
		f      Faults
		body   string
		status int  // wanted status; 0 = the request itself fails
		cut    bool // the body read fails
		check  func(*http.Response) string
	}{
		{name: "none", body: stream, status: 200},
		{name: "5xx", f: Faults{Status5xx: 1}, body: plain, status: -5},
		{name: "429", f: Faults{RateLimit: 1}, body: plain, status: 429, check: func(r *http.Response) string {
			if r.Header.Get("Retry-After") != "1" {
				return "no Retry-After"
			}
			return ""
		}},
		{name: "slow", f: Faults{SlowFirstByte: 1, SlowDelay: time.Millisecond}, body: stream, status: 200},
		{name: "cut stream", f: Faults{CutStream: 1}, body: stream, status: 200, cut: true},
		{name: "cut json", f: Faults{CutStream: 1}, body: plain, status: 200, cut: true},
		{name: "reset", f: Faults{Reset: 1}, body: plain, status: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakeupstream.New(fakeupstream.Options{DropBodies: true})
			fake.FailOnRefusal(t)
			fi := NewFaultInjector(fake, tt.f)
			base, stop, err := serve(fi)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Post(base+"/v1/responses", "application/json", strings.NewReader(tt.body))
			if tt.status == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatal("request succeeded through a reset")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, readErr := io.ReadAll(resp.Body)
			switch {
			case tt.status == -5 && resp.StatusCode/100 != 5, tt.status > 0 && resp.StatusCode != tt.status:
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			case tt.cut != (readErr != nil):
				t.Fatalf("body read error %v, want cut=%v", readErr, tt.cut)
			}
			if tt.check != nil {
				if msg := tt.check(resp); msg != "" {
					t.Fatal(msg)
				}
			}
			if got := fi.Counts(); got[kindOf(tt.f)] != 1 {
				t.Fatalf("counts %v", got)
			}
		})
	}
}

func kindOf(f Faults) string {
	switch {
	case f.Status5xx > 0:
		return Fault5xx
	case f.RateLimit > 0:
		return FaultRateLimit
	case f.SlowFirstByte > 0:
		return FaultSlow
	case f.CutStream > 0:
		return FaultCut
	case f.Reset > 0:
		return FaultReset
	}
	return FaultNone
}

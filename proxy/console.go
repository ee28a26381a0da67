package proxy

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/console"
	"github.com/compactd/compactd/internal/throttle"
)

// ConsoleConfig turns on the operator console (internal/console) on the ops handler.
type ConsoleConfig struct {
	// Content shows content — handoff texts, what they replaced, recall queries and excerpts,
	// search excerpts — and writes every view of it to the log; without it the console shows
	// only counts, sizes and times.
	Content bool
	// SessionTTL is how long a console login lasts (default console.DefaultSessionTTL).
	SessionTTL time.Duration
}

// consoleHandler is the console for OpsHandler, or nil when it is off.
func (s *Server) consoleHandler() http.Handler {
	if s.cfg.Console == nil {
		return nil
	}
	return console.New(consoleBackend{s}, console.Options{Content: s.cfg.Console.Content,
		SessionTTL: s.cfg.Console.SessionTTL, Logger: s.log})
}

// consoleBackend is what the console reads and does, through the same store APIs as the admin
// API (admin.go): the archive, the event log beside it, and deleteConversation.
type consoleBackend struct{ s *Server }

// CheckToken is the admin API's check: the same digest compare and the same per-address
// throttle of failed attempts (one budget for both), counted in the same metric.
func (b consoleBackend) CheckToken(r *http.Request, token string) (bool, time.Duration) {
	s := b.s
	addr := throttle.Addr(r)
	if ok, retry := s.adminThrottle.Take(addr); !ok {
		s.metrics.AdminAuthFailure("throttled")
		return false, retry
	}
	if s.cfg.AdminToken == "" || !secretEqual(token, s.cfg.AdminToken) {
		s.metrics.AdminAuthFailure("invalid_token")
		return false, 0
	}
	s.adminThrottle.Refund(addr)
	return true, 0
}

func (b consoleBackend) DefaultTenant() string { return b.s.cfg.Tenant }

// Tenants are the configured ones and those the archive holds, sorted.
func (b consoleBackend) Tenants(ctx context.Context) []string {
	out := []string{b.s.cfg.Tenant}
	if t := b.s.cfg.Tenants; t != nil {
		for _, e := range t.entries {
			out = append(out, e.name)
		}
	}
	if l := b.eventLog(); l != nil {
		if ts, err := l.Tenants(ctx); err == nil {
			out = append(out, ts...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (b consoleBackend) Archive() archive.Store { return b.s.cfg.Archive }

func (b consoleBackend) Events() *archive.EventLog { return b.eventLog() }

func (b consoleBackend) eventLog() *archive.EventLog {
	l, _ := b.s.events.Sink().(*archive.EventLog)
	return l
}

func (b consoleBackend) Delete(ctx context.Context, tenant, conversation string) (int, error) {
	if b.s.cfg.Archive == nil {
		return 0, errNoArchive
	}
	return b.s.deleteConversation(ctx, tenant, conversation)
}

var errNoArchive = consoleError("the archive is off on this compactd (--archive off)")

type consoleError string

func (e consoleError) Error() string { return string(e) }

func (b consoleBackend) ExcerptBytes() int { return b.s.cfg.Recall.withDefaults().ExcerptBytes }

// Live is Server.Stats in the console's terms.
func (b consoleBackend) Live() console.Live {
	st := b.s.Stats()
	l := console.Live{Time: st.Time, Compacting: st.Compacting, Breaker: st.Summariser,
		SummariserInFlight: st.SummariserInFlight, SummariserWaiting: st.Waiting,
		BodyBytes: st.BodyBytes, BodyLimit: st.BodyLimit, MemoHits: st.MemoHits, MemoMisses: st.MemoMisses,
		SpeculativeHits: st.SpeculativeHits, SpeculativeMisses: st.SpeculativeMisses, EventsDropped: st.EventsDropped}
	for _, x := range st.Latency {
		l.Latency = append(l.Latency, console.LatencySample{At: x.At, Took: x.Took, Failed: x.Failed})
	}
	for _, p := range st.History {
		l.History = append(l.History, console.Point{At: p.At, Compacting: p.Compacting, BodyBytes: p.BodyBytes})
	}
	return l
}

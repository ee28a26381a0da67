package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// Live figures for the operator console's live view (Server.Stats): counted here, with atomics,
// rather than read back from the Prometheus registry, so they exist without one.

// Stats is a snapshot of what the Server is doing now.
type Stats struct {
	Time time.Time
	// Compacting is how many compactions are running (summarising, archiving, sealing).
	Compacting int
	// Summariser is the summariser's circuit breaker: "closed", "open", "half_open", or ""
	// when the summariser has none. InFlight and Waiting are its summarisations holding a slot
	// and waiting for one.
	Summariser                  string
	SummariserInFlight, Waiting int
	// Latency holds the most recent summarisations, oldest first (at most 64).
	Latency []LatencySample
	// BodyBytes is the in-flight body budget in use, of BodyLimit (0: no budget).
	BodyBytes, BodyLimit int64
	// Memo and speculation outcomes since start: a memo hit applied a remembered compaction, a
	// miss looked and found none; a speculative hit used a summary prepared ahead of the
	// crossing turn, a miss had none ready.
	MemoHits, MemoMisses               int64
	SpeculativeHits, SpeculativeMisses int64
	// EventsDropped counts event log rows lost to a full queue or a failed write.
	EventsDropped int64
	// History holds earlier snapshots' gauges, oldest first (at most 90, one per 2 s or more).
	History []StatsPoint
}

// LatencySample is one summarisation: when it ended, how long it took, whether it failed.
type LatencySample struct {
	At     time.Time
	Took   time.Duration
	Failed bool
}

// StatsPoint is the gauges of one earlier snapshot.
type StatsPoint struct {
	At         time.Time
	Compacting int
	BodyBytes  int64
}

const (
	latencySamples = 64
	historyPoints  = 90
	historyEvery   = 2 * time.Second
)

type liveStats struct {
	compacting           atomic.Int64
	memoApplied          atomic.Int64
	memoHits, memoMisses atomic.Int64
	specHits, specMisses atomic.Int64

	mu     sync.Mutex
	lat    [latencySamples]LatencySample
	latN   int // samples written in all
	hist   [historyPoints]StatsPoint
	histN  int
	lastPt time.Time
}

func (l *liveStats) memo(outcome string) {
	switch outcome {
	case "hit":
		l.memoHits.Add(1)
	case "miss":
		l.memoMisses.Add(1)
	}
}

func (l *liveStats) speculative(outcome string) {
	switch outcome {
	case "hit":
		l.specHits.Add(1)
	case "miss":
		l.specMisses.Add(1)
	}
}

func (l *liveStats) summarised(took time.Duration, failed bool) {
	l.mu.Lock()
	l.lat[l.latN%latencySamples] = LatencySample{At: time.Now(), Took: took, Failed: failed}
	l.latN++
	l.mu.Unlock()
}

// summariserState is what the console shows of the summariser's resilience wrapper
// (summarizer.Resilient).
type summariserState interface {
	State() string
	InFlight() (inFlight, waiting int)
}

// Stats returns what the Server is doing now, for the operator console's live view.
func (s *Server) Stats() Stats {
	l := s.live
	now := time.Now()
	st := Stats{Time: now, Compacting: int(l.compacting.Load()), BodyBytes: s.budget.InUse(),
		MemoHits: l.memoHits.Load(), MemoMisses: l.memoMisses.Load(),
		SpeculativeHits: l.specHits.Load(), SpeculativeMisses: l.specMisses.Load()}
	st.BodyLimit = s.budget.Limit()
	st.EventsDropped = s.events.Dropped()
	if s.breaker != nil {
		st.Summariser = s.breaker.State()
		st.SummariserInFlight, st.Waiting = s.breaker.InFlight()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := max(0, l.latN-latencySamples); i < l.latN; i++ {
		st.Latency = append(st.Latency, l.lat[i%latencySamples])
	}
	if now.Sub(l.lastPt) >= historyEvery {
		l.hist[l.histN%historyPoints] = StatsPoint{At: now, Compacting: st.Compacting, BodyBytes: st.BodyBytes}
		l.histN++
		l.lastPt = now
	}
	for i := max(0, l.histN-historyPoints); i < l.histN; i++ {
		st.History = append(st.History, l.hist[i%historyPoints])
	}
	return st
}

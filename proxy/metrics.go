package proxy

// metrics is compactd's instrumentation. Every method is safe on a nil receiver, so call sites
// need no guards and a Server without a registry records nothing.
type metrics struct{}

func newMetrics(Config) *metrics { return nil }

// compactionEvent describes one compaction attempt, for metrics.
type compactionEvent struct {
	API          string // "openai" or "anthropic"
	Trigger      string // threshold, policy, compact_endpoint, compaction_trigger, on_demand
	Outcome      string // ok, failed, nothing
	Model        string
	TokensBefore int
	TokensAfter  int
}

func (m *metrics) compaction(ev compactionEvent) {}

// openFailure counts a compaction item that could not be opened, by crypto.Reason.
func (m *metrics) openFailure(api, reason string) {}

// handoffApplied counts a request whose compaction item was opened and expanded.
func (m *metrics) handoffApplied(api string) {}

// recall counts one recall search and its hits.
func (m *metrics) recall(ok bool, hits int) {}

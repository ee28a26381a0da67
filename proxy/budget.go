package proxy

import (
	"fmt"
	"net/http"

	"github.com/compactd/compactd/internal/budget"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/metrics"
)

// The in-flight body budget (internal/budget) is reserved by the gate (server.go) for the
// routes compactd parses; the handlers reserve a compaction's and a rebuild's bodies beside it
// on the request's hold (holdOf). What is here is the answer past it, and the defaults of
// Config.MaxInflightBodyBytes.

// DefaultInflightBodyBytes is the budget when the runtime has no memory limit (no GOMEMLIMIT,
// --memory-limit or cgroup limit): 1 GiB, about thirty 32 MiB bodies.
const DefaultInflightBodyBytes = budget.DefaultBytes

// InflightBodyBytesFor is the default budget under a memory limit (math.MaxInt64 or <= 0: none):
// a quarter of it, but never less than maxBody (one body of the largest allowed size always
// fits).
func InflightBodyBytesFor(memLimit, maxBody int64) int64 { return budget.BytesFor(memLimit, maxBody) }

// budgetExceeded is the answer past the budget: 503 with Retry-After, not 429. The condition is
// compactd's own load, not anything this client did (429 says "you are sending too much", and
// with tenants on it is the per-tenant rate limit's answer); both SDKs retry a 503 and honour its
// Retry-After. Anthropic's envelope says overloaded_error, the type its own API uses for load.
func budgetExceeded(b *budget.Budget) *fault.Fault {
	return &fault.Fault{Kind: fault.Overloaded, Code: fault.CodeServerOverloaded, RetryAfter: budget.RetryAfter, Close: true,
		Message: fmt.Sprintf("compactd is holding its limit of %d bytes of request bodies in flight; retry shortly, or raise --max-inflight-body-bytes (COMPACTD_MAX_INFLIGHT_BODY_BYTES).", b.Limit())}
}

// budgetRefused answers budgetExceeded in d's envelope and counts it.
func budgetRefused(w http.ResponseWriter, d dialect, b *budget.Budget, m *metrics.Metrics) {
	m.BudgetRefused()
	writeFault(w, d, budgetExceeded(b))
}

// holdOf is r's share of the in-flight budget, which the gate reserved; nil (every reservation
// fits) for a request outside it.
func holdOf(r *http.Request) *budget.Hold {
	if st := stateFrom(r.Context()); st != nil {
		return st.hold
	}
	return nil
}

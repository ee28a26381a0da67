package engine

import (
	"context"
	"encoding/json"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/memo"
)

// Speculation across replicas. A speculative summary is prepared on whichever replica served the
// turn that passed the speculative fraction; the crossing turn may land on another. So a finished
// job also stores its summary and ledger in the memo, keyed by tenant, owner, dialect, summariser model
// and the canonical hash of the exact prefix it covers, and a crossing turn that finds nothing in
// its own replica's speculator asks the memo for the prefixes a speculation could have covered.

// sharedSpecCandidates bounds the prefixes a crossing turn asks the memo about: a speculation
// covers everything before the newest user message of the turn that started it, so the crossing
// turn tries the positions of its last user messages, newest (longest prefix) first. Since a
// replica starts a new summary only once the conversation has grown by MinGrowth, the newest one
// may be several user messages back. A lookup is one indexed read, and only a turn that compacts
// makes them.
const sharedSpecCandidates = 16

// sharedSpec is the memo's blob of a speculative summary.
type sharedSpec struct {
	Summary string           `json:"summary"`
	Model   string           `json:"model"`
	Ledger  string           `json:"ledger,omitempty"`
	Usage   summarizer.Usage `json:"usage"`
}

// shareSpeculation stores a finished speculative summary of prefix in the memo.
func (e *Engine) shareSpeculation(ctx context.Context, d Dialect, sc Scope, model string, prefix []api.Item, out specResult) {
	if e.cfg.Memo == nil || !d.Memo || out.res.Summary == "" {
		return
	}
	hashes, err := memo.Prefixes(d.Name, rawItems(prefix))
	if err != nil || len(hashes) != len(prefix) || len(hashes) == 0 {
		return
	}
	blob, _ := json.Marshal(sharedSpec{Summary: out.res.Summary, Model: out.res.Model, Ledger: out.ledger, Usage: out.res.Usage})
	k := sc.key(d.Name)
	if err := e.cfg.Memo.PutSpeculative(ctx, k, model, hashes[len(hashes)-1], len(prefix), blob); err != nil {
		e.log.Warn("speculative summary not shared", "err", err)
		return
	}
	e.obs.Memo("spec_shared")
}

// sharedSpeculation looks in the memo for a summary another replica prepared for a prefix of
// units that ends at a safe cut of them (safe: compact.SafeCuts(units)); n == 0 is a miss. The
// candidates are the prefixes speculationPrefix picks: before a user message, moved back to the
// safe cut ahead of it.
func (e *Engine) sharedSpeculation(ctx context.Context, d Dialect, sc Scope, model string, units []api.Item, safe []bool) (int, specResult) {
	if e.cfg.Memo == nil || !d.Memo {
		return 0, specResult{}
	}
	var cands []int
	for i := len(units) - 1; i > 0 && len(cands) < sharedSpecCandidates; i-- {
		if !units[i].IsUserMessage() {
			continue
		}
		if n := compact.SafeCut(safe, i); n > 0 && (len(cands) == 0 || n < cands[len(cands)-1]) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return 0, specResult{}
	}
	hashes, _ := memo.Prefixes(d.Name, rawItems(units[:cands[0]]))
	k := sc.key(d.Name)
	for _, n := range cands {
		if n > len(hashes) {
			continue
		}
		blob, ok, err := e.cfg.Memo.Speculative(ctx, k, model, hashes[n-1])
		if err != nil || !ok {
			continue
		}
		var s sharedSpec
		if json.Unmarshal(blob, &s) != nil || s.Summary == "" {
			continue
		}
		e.obs.Memo("spec_hit")
		return n, specResult{res: summarizer.Result{Summary: s.Summary, Model: s.Model, Usage: s.Usage}, ledger: s.Ledger}
	}
	return 0, specResult{}
}

// rawItems is the raw JSON of items, for the memo's hashes.
func rawItems(items []api.Item) []json.RawMessage { return api.Raws[json.RawMessage](items) }

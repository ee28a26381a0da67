package engine

import (
	"context"
	"encoding/json"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/memo"
)

// The conversation memo (internal/memo) is how a client that never carries compactd's
// compaction item back — Claude Code, Chat Completions agents, any client under the transparent
// policy — still gets one summary per compaction instead of one per turn. Every compaction a
// turn makes is recorded against the canonical prefix hash of the client's own items it covered;
// a later turn whose items start with that prefix gets the recorded compaction back (Remembered),
// and its dialect renders the same handoff as before, byte for byte, so the upstream's prompt
// cache keeps hitting. The memo lives in the archive store, so every replica applies what any
// replica compacted. A miss, and any memo error, is a normal compaction.

// Scope is whose memo a turn reads and writes (memo.Key): its tenant and owner, and the archive
// conversation what it records belongs to (deleted with it).
type Scope struct{ Tenant, Owner, Conversation string }

// Memory is what the memo knows of one turn's client items.
type Memory struct {
	dialect  dialect.Name
	scope    Scope
	prefixes []memo.Hash // prefixes[i] names the client's items[0..i]
	// safe[n] reports that the client's items can be cut at n without parting a tool call from
	// its result (compact.SafeCuts): a record is applied, and made, only at such a cut.
	safe []bool
	// Opened is the compaction recorded for the longest known prefix, opened and checked; nil
	// on a miss. Items is how many of the client's items it covers.
	Opened *Opened
	Items  int
}

// Remembered hashes a turn's client items (raw, as the client sent them: the memo hashes what
// the client sends, never the compacted view) and returns the compaction recorded for the
// longest prefix of them, if any. It never fails: a memo that errs, a record that no longer
// opens (a rotated key, an expired item), or no memo at all is a miss.
func (e *Engine) Remembered(ctx context.Context, d Dialect, sc Scope, items []json.RawMessage) *Memory {
	if e.cfg.Memo == nil || !d.Memo {
		return nil
	}
	units := make([]api.Item, len(items))
	for i, raw := range items {
		units[i] = api.Item{Raw: raw}
	}
	m := &Memory{dialect: d.Name, scope: sc, safe: compact.SafeCuts(units)}
	l, err := memo.Find(ctx, e.cfg.Memo, sc.key(d.Name), items)
	m.prefixes = l.Prefixes
	if err != nil {
		e.log.Warn("memo lookup failed; compacting as usual", "api", string(d.Name), "err", err)
		e.obs.Memo("error")
	}
	if !l.Hit {
		e.obs.Memo("miss")
		return m
	}
	if l.Entry.Items > len(items) || !m.safe[l.Entry.Items] {
		// Applying it would summarise a tool call away and keep its result (or the other way
		// round): the upstream would refuse the request. Compact as usual instead.
		e.log.Warn("memo record ends between a tool call and its result; compacting as usual", "api", string(d.Name))
		e.obs.Memo("miss")
		return m
	}
	o, err := e.Open(string(l.Entry.Compaction), "", d.SealKind, sc.Tenant, "")
	if err != nil {
		e.log.Warn("memo record does not open; compacting as usual", "api", string(d.Name), "reason", Reason(err))
		e.obs.Memo("stale")
		return m
	}
	m.Opened, m.Items = o, l.Entry.Items
	e.obs.Memo("hit")
	return m
}

// remember records c as covering the first covers client items of the turn m describes. A
// failed record costs the turn nothing; the next turn just compacts again.
func (e *Engine) remember(ctx context.Context, m *Memory, covers int, c *Compaction) {
	if m == nil || covers <= 0 || covers > len(m.prefixes) {
		return
	}
	if covers >= len(m.safe) || !m.safe[covers] {
		e.log.Debug("compaction not recorded in the memo: it ends between a tool call and its result")
		return
	}
	k := m.scope.key(m.dialect)
	if c.Payload != nil && c.Payload.Archive != nil {
		k.Conversation = c.Payload.Archive.Conversation
	}
	err := e.cfg.Memo.Record(ctx, k, m.prefixes[covers-1], covers, []byte(c.EncryptedContent))
	if err != nil {
		e.log.Warn("memo record failed", "err", err)
		e.obs.Memo("record_error")
		return
	}
	e.obs.Memo("recorded")
}

func (sc Scope) key(d dialect.Name) memo.Key {
	return memo.Key{Tenant: sc.Tenant, Owner: sc.Owner, Dialect: d, Conversation: sc.Conversation}
}

// Forget deletes what the memo and this replica's speculation hold of the tenant's conversation
// (the admin API's delete, beside the archive's): no later turn is handed a compaction or a
// speculative summary made in it. Other replicas' in-memory speculative summaries are not
// reached; they expire within the speculative TTL and are keyed to their owners' exact history.
func (e *Engine) Forget(ctx context.Context, tenant, conversation string) (int, error) {
	n := 0
	if e.spec != nil {
		n += e.spec.forget(tenant, conversation)
	}
	if e.cfg.Memo == nil {
		return n, nil
	}
	m, err := e.cfg.Memo.Forget(ctx, tenant, conversation)
	return n + m, err
}

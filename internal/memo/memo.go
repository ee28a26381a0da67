// Package memo is the conversation memo: it remembers, per tenant, which compaction replaced
// which run of conversation items, so that a client that never sends compactd's compaction item
// back (Claude Code, Chat Completions agents, any client under the transparent policy) gets the
// same compaction applied again on its next request instead of a new summariser call — the same
// handoff bytes every turn, so the upstream's prompt cache keeps hitting.
//
// # Prefix hashes
//
// A client resends its whole history every turn. The memo names a history prefix by a rolling
// hash over canonical items,
//
//	H_0 = sha256("compactd/memo/v2\x00" + dialect)
//	H_n = sha256(H_{n-1} || canon(item_n))
//
// so one pass over an input yields the hash of every prefix (Chain, Prefixes), and the engine
// can ask the store, in one query per 256 items, which recorded compaction covers the longest
// prefix of this input. A hash names exact content: it matches only when every item up to it
// canonicalises the same, so a hit can never splice a summary of another conversation in.
//
// # Canonical items: what the model sees, not how the client serialised it
//
// Real clients rewrite earlier turns between requests (see testdata/claude-code-2.1.332, a
// captured Claude Code session, and internal/fixtures for Codex). Canonical encoding (canon.go)
// therefore removes what does not reach the model and nothing else:
//
//   - everywhere: object key order, whitespace, and string escape spelling ("\u00e9" = "é",
//     "\/" = "/", "\ud83d\ude00" = "😀"); a lone surrogate escape, which decoders read apart,
//     stays an escape in lower-case hex ("\uD800" = "\ud800", but "\ud800", "\udfff" and
//     "\ufffd" are three texts); numbers keep their spelling, array order is kept;
//   - Responses: an item's id and status (but an item_reference is its id), Codex's
//     internal_chat_message_metadata_passthrough, empty annotations/logprobs on text parts;
//     a message without a type is a message; content (or a function_call_output's output)
//     given as a string equals a list of exactly one input_text part (output_text for the
//     assistant) that holds nothing but the text;
//   - Messages: cache_control anywhere outside a tool input (Claude Code moves its breakpoint
//     to the newest message every turn), null citations; a message's or tool_result's content
//     given as a string equals a list of exactly one text block (Claude Code sends one turn as
//     a one-block list and the same turn as a string in the next request);
//   - Chat: the string / one-text-part rule only (no client capture backs more yet).
//
// A rule that merged what the model tells apart would be a correctness bug (a wrong summary);
// a rule that is missing only costs a miss, which is a normal compaction. So the rules err on
// the side of keeping bytes. Changing any rule must change the seed domain, so old records
// stop matching instead of matching wrongly.
//
// Every walk is bounded and iterative: an item must pass jsonx.Valid (at most jsonx.MaxDepth
// levels) before the scan builds a flat node arena, and the encoder writes it back with an
// explicit stack — no recursion on client depth, work linear in the item's size (plus sorting
// each object's keys).
//
// # Store
//
// Records live in the archive database (archive.MemoStore: SQLite embedded, PostgreSQL
// shared), so every replica applies what any replica compacted, and speculative summaries are
// shared the same way, keyed by tenant, dialect, summariser model and prefix hash. Rows are
// sealed at rest with the archive's Sealer, bound to their identity and tenant, and the prefix
// hash is stored only keyed per tenant (an unkeyed hash of a conversation would let the
// database confirm a guessed conversation); bounded per
// tenant (the least recently used go first); expiring (a use extends the expiry; the retention
// loop deletes expired rows). A miss is never an error.
//
// The memo stores the engine's compaction as an opaque blob; what it holds (summary, ledger,
// archive reference, item id) and how it is sealed is the engine's business.
package memo

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/dialect"
)

// Key says whose memo a turn reads and writes: the tenant, the owner and the route's dialect.
// Only the owner that recorded something finds it (internal/owner: the digest of the tenant and
// the request's credential), so the same history sent with another credential is a miss.
type Key struct {
	Tenant  string // "default" when empty
	Owner   string
	Dialect dialect.Name
	// Conversation is the archive conversation the turn belongs to: what it records is deleted
	// with that conversation (Forget). Lookups ignore it.
	Conversation string
}

// Entry is a recorded compaction.
type Entry struct {
	Items      int    // the compaction replaced input items [0, Items)
	Prefix     Hash   // H_Items of those items
	Compaction []byte // the engine's blob, byte-exact as recorded
	CreatedAt  time.Time
}

// Memo is what the engine calls. Implementations are safe for concurrent use. Errors are for
// metrics and logs only: the engine treats any error like a miss and compacts normally.
type Memo interface {
	// Record notes that compaction replaced the first items items of a conversation whose
	// prefix hash is prefix (prefixes[items-1] from Prefixes). A record for the same prefix
	// is replaced.
	Record(ctx context.Context, k Key, prefix Hash, items int, compaction []byte) error
	// Longest returns the recorded compaction that covers the longest prefix of an input whose
	// prefix hashes are prefixes (prefixes[i] = H_{i+1}, as Prefixes returns them). A miss is
	// (Entry{}, false, nil).
	Longest(ctx context.Context, k Key, prefixes []Hash) (Entry, bool, error)
	// PutSpeculative stores a summary prepared ahead of time for the first items items
	// (prefix hash prefix) with the summariser model model.
	PutSpeculative(ctx context.Context, k Key, model string, prefix Hash, items int, summary []byte) error
	// Speculative returns the summary prepared for exactly (model, prefix), on any replica.
	Speculative(ctx context.Context, k Key, model string, prefix Hash) ([]byte, bool, error)
	// Forget deletes every record and speculative summary made in the tenant's conversation,
	// whoever owned them, and returns how many it deleted.
	Forget(ctx context.Context, tenant, conversation string) (int, error)
}

// Lookup is the memo's answer for one input: the prefix hashes of all its items (to record the
// next compaction with) and, on a hit, the entry covering the longest prefix.
type Lookup struct {
	Prefixes []Hash
	Entry    Entry
	Hit      bool
}

// Find hashes items and asks m for the longest recorded prefix, in one pass over the input.
// On an item that does not canonicalise, the prefixes before it are still looked up; the error
// is returned alongside for the caller's metrics.
func Find(ctx context.Context, m Memo, k Key, items []json.RawMessage) (Lookup, error) {
	ps, herr := Prefixes(k.Dialect, items)
	l := Lookup{Prefixes: ps}
	if len(ps) == 0 {
		return l, herr
	}
	e, ok, err := m.Longest(ctx, k, ps)
	l.Entry, l.Hit = e, ok
	return l, errors.Join(herr, err)
}

// Store is the Memo over the archive database.
type Store struct{ s *archive.MemoStore }

// NewStore returns the memo kept in the archive store's database.
func NewStore(st archive.Store, o archive.MemoOptions) (*Store, error) {
	s, err := archive.NewMemoStore(st, o)
	if err != nil {
		return nil, err
	}
	return &Store{s: s}, nil
}

// Archive is the underlying store, for the retention loop (archive.RunMemoRetention).
func (m *Store) Archive() *archive.MemoStore { return m.s }

func (m *Store) Record(ctx context.Context, k Key, prefix Hash, items int, compaction []byte) error {
	return m.s.PutCompaction(ctx, archive.MemoRecord{Tenant: k.Tenant, Owner: k.Owner, Conversation: k.Conversation,
		Dialect: string(k.Dialect), Prefix: prefix, Items: items, Blob: compaction})
}

func (m *Store) Longest(ctx context.Context, k Key, prefixes []Hash) (Entry, bool, error) {
	if len(prefixes) == 0 {
		return Entry{}, false, nil
	}
	cands := make([][32]byte, len(prefixes))
	for i, p := range prefixes {
		cands[len(prefixes)-1-i] = p
	}
	r, ok, err := m.s.LookupLongest(ctx, k.Tenant, k.Owner, string(k.Dialect), cands)
	if !ok {
		return Entry{}, false, err
	}
	// The record must cover exactly the prefix its hash names in this input; anything else
	// (a hash collision, a hand-edited row that still opened) is a miss.
	if r.Items < 1 || r.Items > len(prefixes) || prefixes[r.Items-1] != r.Prefix {
		return Entry{}, false, nil
	}
	return Entry{Items: r.Items, Prefix: r.Prefix, Compaction: r.Blob, CreatedAt: r.CreatedAt}, true, nil
}

func (m *Store) PutSpeculative(ctx context.Context, k Key, model string, prefix Hash, items int, summary []byte) error {
	return m.s.PutSpeculative(ctx, archive.MemoRecord{Tenant: k.Tenant, Owner: k.Owner, Conversation: k.Conversation,
		Dialect: string(k.Dialect), Model: model, Prefix: prefix, Items: items, Blob: summary})
}

func (m *Store) Speculative(ctx context.Context, k Key, model string, prefix Hash) ([]byte, bool, error) {
	r, ok, err := m.s.GetSpeculative(ctx, k.Tenant, k.Owner, string(k.Dialect), model, prefix)
	if !ok {
		return nil, false, err
	}
	return r.Blob, true, nil
}

func (m *Store) Forget(ctx context.Context, tenant, conversation string) (int, error) {
	return m.s.DeleteConversation(ctx, tenant, conversation)
}

var _ Memo = (*Store)(nil)

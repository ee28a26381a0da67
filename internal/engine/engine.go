// Package engine is compactd's compaction engine, the same for every API dialect.
//
// A dialect adapter (proxy: Responses, Messages) parses a request into neutral items
// ([]api.Item: the raw JSON of each item or message with its type and role), asks the engine to
// open the compaction it carries (Open), to compact (Compact) or to prepare a compaction in the
// background (Speculate), and renders what comes back in its own wire format. The engine decides
// the window (what is kept verbatim, what is summarised), calls the summariser under the
// compaction deadline and the failure policy, writes the facts ledger and the gap check, archives
// the raw items it replaced, and seals the payload. It never sees an *http.Request or a response
// writer: what differs by dialect comes in as values in Request (the seal kind, the retain
// budget, how units are counted, how the compacted context is rendered and counted).
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/memo"
)

// Signer is what signed compactions (Messages on-demand blocks) need beyond sealing:
// *crypto.Keyring provides it.
type Signer interface {
	Sign(msg []byte, b crypto.Binding) string
	Verify(sig string, msg []byte, b crypto.Binding) error
}

// Observer is told what the engine did, for metrics. Every method must be cheap and safe for
// concurrent use; a nil Observer in Config observes nothing.
type Observer interface {
	// Speculative counts a speculative compaction outcome: started, hit, miss, failed.
	Speculative(outcome string)
	// Fallback counts a summariser failure covered by a failure policy (extractive, passthrough).
	Fallback(d dialect.Name, policy string)
	// Memo counts a conversation-memo outcome: hit, miss, stale, error, recorded, record_error,
	// and for speculative summaries shared through it spec_shared, spec_hit.
	Memo(outcome string)
	// SummaryTruncated counts a summariser answer cut to Config.MaxSummaryTokens before it was
	// used (a dialect's compaction, a speculative summary, a gap check).
	SummaryTruncated(d dialect.Name)
}

// Config is what the engine works with. Sealer, Summarizer and Counter are required.
type Config struct {
	Sealer     crypto.Sealer
	Summarizer summarizer.Summarizer
	// Summarizers overrides Summarizer per dialect (by Dialect.Name) for every summariser call
	// of that dialect's compactions: summary, gap check, speculation. A dialect not in it uses
	// Summarizer.
	Summarizers map[dialect.Name]summarizer.Summarizer
	Counter     *compact.Counter
	// Archive keeps the raw items every compaction replaced (nil: no archive).
	Archive archive.Store
	// LedgerBytes bounds the facts ledger (0: no ledger; the proxy passes its default).
	LedgerBytes int
	// GapCheck runs a second summariser pass over summary + ledger.
	GapCheck bool
	// CompactionTimeout bounds one compaction (0: DefaultCompactionTimeout; < 0: none).
	CompactionTimeout time.Duration
	// ItemMaxAge refuses compactions older than this when opened (0: no limit).
	ItemMaxAge time.Duration
	// FailurePolicy is the policy of a dialect (by name) when the summariser fails
	// (FailurePolicies.For).
	FailurePolicy func(d dialect.Name) FailurePolicy
	// Speculative configures speculative compaction (Fraction < 0: off).
	Speculative SpeculativeConfig
	// Memo remembers compactions for clients that do not carry compaction items back, and shares
	// speculative summaries between replicas (nil: no memo).
	Memo memo.Memo
	// MinSaving is the least share of a turn's tokens (Request.TokensBefore) a compaction compactd
	// decides on must be able to save: a window whose replaceable part, less the handoff's fixed
	// text, is smaller is skipped before the summariser is called (ErrTooLittleSaving). 0:
	// DefaultMinSaving; negative: no minimum (a compaction must still make the turn smaller).
	// Explicit compactions (Request.Explicit) have none.
	MinSaving float64
	// MaxSummaryTokens bounds a summariser answer: a longer one is cut at a line boundary, logged
	// and counted (Observer.SummaryTruncated) before it is used. 0: DefaultMaxSummaryTokens;
	// negative: no bound.
	MaxSummaryTokens int
	Observer         Observer
	Logger           *slog.Logger
}

// DefaultMinSaving is Config.MinSaving's default: a compaction must be able to save a tenth of
// the turn's tokens.
const DefaultMinSaving = 0.10

// DefaultMaxSummaryTokens is Config.MaxSummaryTokens's default: the summariser's default output
// budget (summarizer.DefaultMaxOutputTokens) and a quarter more, since the summariser's model may
// count tokens differently from compactd's tokenizer.
const DefaultMaxSummaryTokens = summarizer.DefaultMaxOutputTokens * 5 / 4

// Engine compacts conversations. It is safe for concurrent use; Close stops its background work.
type Engine struct {
	cfg  Config
	spec *speculator
	log  *slog.Logger
	obs  Observer
}

type nopObserver struct{}

func (nopObserver) Speculative(string)            {}
func (nopObserver) Fallback(dialect.Name, string) {}
func (nopObserver) Memo(string)                   {}
func (nopObserver) SummaryTruncated(dialect.Name) {}

// New returns an engine for cfg.
func New(cfg Config) *Engine {
	if cfg.MinSaving == 0 {
		cfg.MinSaving = DefaultMinSaving
	}
	if cfg.MaxSummaryTokens == 0 {
		cfg.MaxSummaryTokens = DefaultMaxSummaryTokens
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, obs: cfg.Observer}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	if cfg.Speculative.Fraction >= 0 {
		e.spec = newSpeculator(cfg.Speculative)
	}
	return e
}

// summarizer is the summariser of a dialect's compactions (Config.Summarizers).
func (e *Engine) summarizer(d dialect.Name) summarizer.Summarizer {
	if s, ok := e.cfg.Summarizers[d]; ok && s != nil {
		return s
	}
	return e.cfg.Summarizer
}

// Close stops speculation for good: no job starts after it, running jobs are cancelled and
// waited for until ctx is done.
func (e *Engine) Close(ctx context.Context) error {
	if e.spec == nil {
		return nil
	}
	return e.spec.stop(ctx)
}

// Dialect is what the engine needs to know of the API a compaction is for.
type Dialect struct {
	// Name names the dialect in logs, metrics, speculation keys, the summariser choice
	// (Config.Summarizers), the failure policy and the conversation memo.
	Name dialect.Name
	// SealKind is the crypto binding kind of the dialect's items or blocks.
	SealKind string
	// Handoff renders the dialect's handoff text: true to what the dialect keeps verbatim, and a
	// pure function of summary and ledger, so it is byte-stable turn after turn.
	Handoff func(summary, ledger string) string
	// Memo puts the dialect's compactions in the conversation memo (Config.Memo), its items
	// canonicalised by the memo's rules for Name; false: no memo, and speculation hashes raw
	// bytes.
	Memo bool
	// UserMessage renders a user message of text in the dialect's wire form: what KeepWindow
	// writes for the one retained message it shortens. The engine writes no dialect's JSON of
	// its own; with no UserMessage that message is kept whole.
	UserMessage func(text string) []byte
}

// Request is one compaction, dialect-neutral.
type Request struct {
	Dialect      Dialect
	ID           string // the new item's or block's id; generated when ""
	Model        string
	Instructions string // replaces the default summarisation prompt when set
	Conversation string // archive conversation id: a label within the owner's namespace
	Tenant       string // bound into the seal and the archive segment
	// Owner is the request's owner digest (internal/owner): the archive segment and the memo
	// record are stamped with it, and the sealed payload names it, so whoever carries the item
	// back may read what it replaced.
	Owner string
	Auth  summarizer.Auth
	// Items is the neutral view of the context to compact (after any earlier handoff).
	Items []api.Item
	// Units are what speculation keys on and what a kept tail is counted in: nil means Items
	// themselves (Responses); on Messages one per message, Prefix(n) giving the neutral items of
	// Units[:n].
	Units        []api.Item
	Prefix       func(n int) []api.Item
	TokensBefore int
	Prev         *Opened // the compaction this one supersedes, if any
	Retain       int     // the budget of newest user messages kept verbatim (Messages: 0)
	// Speculate lets the turn use a summary speculative compaction prepared for a prefix of its
	// units (threshold turns only: their clients keep the whole history, tail included).
	Speculate bool
	// AllowEmpty issues a compaction with an empty summary, without calling the summariser, when
	// there is nothing to replace (routes that must answer with exactly one item); otherwise that
	// is ErrNothingToCompact.
	AllowEmpty bool
	// Explicit marks a compaction the client asked for (/v1/responses/compact, compaction_trigger,
	// Anthropic on-demand, an agent's own compaction request): the client compacts whatever the
	// saving, so there is no minimum (Config.MinSaving), and the compaction is refused as not
	// smaller (ErrNotSmaller) only when the summary and ledger are not smaller than everything
	// the summariser was given to summarise, nor than the handoff's fixed text — a failed
	// summarisation. A short conversation the client asked to compact still gets its compaction,
	// although its summary and the fixed text may outweigh it.
	Explicit bool
	// Sign signs the sealed content too (Messages on-demand blocks).
	Sign bool
	// Finish renders the dialect's compacted context from c (before sealing) and returns its
	// size in tokens and how many units it replaced, which the payload records.
	Finish func(c *Compaction) (tokensAfter, replaced int)
	// Memory is the turn's memo lookup (Remembered); with Covers > 0 the compaction is recorded
	// in the memo as covering the first Covers of the client's items.
	Memory *Memory
	Covers int
}

// Compaction is the outcome of one compaction.
type Compaction struct {
	ID               string
	EncryptedContent string // the id, then the sealed payload
	Signature        string // over EncryptedContent, when signed
	Summary, Ledger  string
	Handoff          string         // the handoff text ("" when there is neither summary nor ledger)
	Kept             []api.Item     // of Compacted: the instructions and retained messages kept verbatim
	Window           compact.Window // over Compacted
	// Compacted are the neutral items summarised: Items, or on a speculative hit the prefix the
	// ready summary covers; Tail units after it are kept verbatim behind the handoff.
	Compacted []api.Item
	Tail      int
	Payload   *compact.Payload
	Usage     summarizer.Usage
	// Speculated: the summary was one speculative compaction prepared ahead of this turn.
	Speculated bool
}

// Skipped compactions. A compaction that cannot make the request meaningfully smaller is not
// made: the engine returns one of these before anything is archived, sealed or recorded, and the
// turn goes on uncompacted (an explicit route answers its own contract's error instead).
var (
	// ErrNothingToCompact means the window replaces nothing: the input holds nothing but
	// instructions and what the retain budget keeps verbatim. Nothing is summarised.
	ErrNothingToCompact = errors.New("nothing to compact")
	// ErrTooLittleSaving means what the window could replace, less the handoff's fixed text, is
	// under the minimum saving (Config.MinSaving). Nothing is summarised.
	ErrTooLittleSaving = errors.New("compaction would save too little")
	// ErrNotSmaller means the summary came back no smaller than what it was to replace: sealing
	// it would make every later turn larger.
	ErrNotSmaller = errors.New("compaction would not make the context smaller")
)

// SkipReason is the metrics reason of a skipped compaction's error: "nothing", "min_saving",
// "not_smaller", or "" when err is no skip.
func SkipReason(err error) string {
	switch {
	case errors.Is(err, ErrNothingToCompact):
		return "nothing"
	case errors.Is(err, ErrTooLittleSaving):
		return "min_saving"
	case errors.Is(err, ErrNotSmaller):
		return "not_smaller"
	}
	return ""
}

// NewID returns prefix + 32 random hex characters, the shape of OpenAI's ids.
func NewID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Compact summarises the conversation (everything but instructions; retained user messages are
// also kept verbatim), writes the facts ledger (and gap check), and archives and seals the
// result.
//
// Summarising (the wait for a speculative summary, the summariser's attempts, the gap check) runs
// under the compaction deadline; archiving and sealing, local and quick, under ctx, so a summary
// that made it in time is not lost to the clock.
func (e *Engine) Compact(ctx context.Context, in Request) (*Compaction, error) {
	var sg Signer
	if in.Sign {
		var ok bool
		if sg, ok = e.cfg.Sealer.(Signer); !ok {
			return nil, errors.New("the configured sealer cannot sign compaction blocks")
		}
	}
	sctx, cancel := e.compactionContext(ctx)
	defer cancel()
	units, prefix := in.Units, in.Prefix
	if units == nil {
		units, prefix = in.Items, func(n int) []api.Item { return in.Items[:n] }
	}
	items, tail := in.Items, 0
	var res summarizer.Result
	ledger, hit := "", false
	if in.Speculate {
		// A ready summary (and ledger) of a prefix: summarise nothing now, keep what followed it
		// verbatim.
		if n, spec := e.useSpeculation(sctx, in, units); n > 0 {
			items, tail, res, ledger, hit = prefix(n), len(units)-n, spec.res, spec.ledger, true
		}
	}
	w := compact.Partition(items, in.Retain, e.countItem)
	replaced := e.replacedTokens(items, w, in.Retain)
	if replaced == 0 && !in.AllowEmpty {
		return nil, ErrNothingToCompact
	}
	if replaced > 0 && !in.Explicit {
		if err := e.enoughSaving(in, replaced); err != nil {
			return nil, err
		}
	}
	if replaced > 0 && !hit {
		var err error
		res, err = e.summarise(sctx, in.Dialect.Name, summarizer.Request{
			Model:        in.Model,
			Entries:      compact.RenderEntries(items, w.Summarise),
			Instructions: in.Instructions,
			Auth:         in.Auth,
		})
		if err != nil {
			return nil, err
		}
	}
	if replaced == 0 {
		res = summarizer.Result{} // AllowEmpty: an empty compaction, nothing summarised
	}
	if in.ID == "" {
		in.ID = NewID("cmp_")
	}
	c := &Compaction{ID: in.ID, Summary: res.Summary, Usage: res.Usage, Window: w, Compacted: items, Tail: tail, Speculated: hit}
	if !hit && replaced > 0 {
		ledger = e.ledger(sctx, in.Dialect.Name, in.Auth, in.Model, items, w, res, &c.Usage)
	}
	c.Ledger = ledger
	if res.Summary != "" || ledger != "" {
		c.Handoff = in.Dialect.Handoff(res.Summary, ledger)
	}
	if replaced > 0 {
		if err := e.smaller(in, c, replaced); err != nil {
			return nil, err
		}
	}
	c.Kept = e.KeepWindow(in.Dialect, make([]api.Item, 0, len(w.Instructions)+len(w.Retained)), items, w, in.Retain)
	after, replacedUnits := in.Finish(c)
	if replaced > 0 && !in.Explicit && in.TokensBefore > 0 && after >= in.TokensBefore {
		return nil, fmt.Errorf("%w: %d tokens after against %d before", ErrNotSmaller, after, in.TokensBefore)
	}
	ref, err := e.archiveReplaced(ctx, in, res.Model, items, w)
	if err != nil {
		return nil, err
	}
	c.Payload = &compact.Payload{
		V:             compact.PayloadVersion,
		Summary:       res.Summary,
		Model:         res.Model,
		CreatedAt:     time.Now().Unix(),
		TokensBefore:  in.TokensBefore,
		TokensAfter:   after,
		ItemsReplaced: replacedUnits,
		Archive:       ref,
		Ledger:        ledger,
		Tail:          tail,
	}
	if in.Prev != nil {
		c.Payload.Previous = in.Prev.ID
	}
	plain, err := c.Payload.Marshal()
	if err != nil {
		return nil, err
	}
	b := crypto.Binding{Kind: in.Dialect.SealKind, ItemID: c.ID, Tenant: in.Tenant}
	sealed, err := e.cfg.Sealer.Seal(plain, b)
	if err != nil {
		return nil, err
	}
	c.EncryptedContent = encryptedContent(c.ID, sealed)
	if sg != nil {
		c.Signature = sg.Sign([]byte(c.EncryptedContent), b)
	}
	e.remember(ctx, in.Memory, in.Covers, c)
	return c, nil
}

// ledger is the facts ledger sealed with a summary: the hard facts of the replaced items the
// summary lacks, and, with GapCheck, what a second summariser pass found still missing. A failed
// gap check costs the turn nothing: the ledger goes out without it.
func (e *Engine) ledger(ctx context.Context, d dialect.Name, auth summarizer.Auth, model string, items []api.Item, w compact.Window, res summarizer.Result, usage *summarizer.Usage) string {
	if e.cfg.LedgerBytes <= 0 || len(w.Summarise) == 0 {
		return ""
	}
	ledger := compact.Ledger(items, w.Summarise, e.cfg.LedgerBytes)
	if !e.cfg.GapCheck {
		return ledger
	}
	entries := append([]string{"[summary and ledger so far]\n" + res.Summary + "\n\n" + ledger}, compact.RenderEntries(items, w.Summarise)...)
	gap, err := e.summarizer(d).Summarize(ctx, summarizer.Request{
		Model: model, Entries: entries, Instructions: compact.GapCheckPrompt(),
		Auth: auth,
	})
	if err != nil {
		e.log.Warn("gap check failed; sealing the ledger without it", "err", err)
		return ledger
	}
	if e.capSummary(d, &gap) {
		// The cut marker is for a reader of a summary: among the findings it would be sealed,
		// and carried forward, as a fact.
		gap.Summary = strings.TrimSuffix(gap.Summary, cutMarker(e.cfg.MaxSummaryTokens))
	}
	usage.InputTokens += gap.Usage.InputTokens
	usage.OutputTokens += gap.Usage.OutputTokens
	usage.TotalTokens += gap.Usage.TotalTokens
	return compact.WithGapFindings(ledger, gap.Summary)
}

// KeepWindow appends, in their original order, the items a window keeps verbatim: instructions
// and retained user messages (the one that had to be shortened, shortened, written by
// d.UserMessage in the dialect's own form).
func (e *Engine) KeepWindow(d Dialect, out, items []api.Item, w compact.Window, retain int) []api.Item {
	keep := make(map[int]bool, len(w.Instructions)+len(w.Retained))
	for _, i := range w.Instructions {
		keep[i] = true
	}
	for _, i := range w.Retained {
		keep[i] = true
	}
	for i, it := range items {
		if !keep[i] {
			continue
		}
		if i == w.Truncated && d.UserMessage != nil {
			text := compact.TruncateMiddle(api.MessageText(it.Raw), retain, e.cfg.Counter)
			it = api.Item{Raw: d.UserMessage(text), Type: "message", Role: "user"}
		}
		out = append(out, it)
	}
	return out
}

// Partition is the window compaction applies to items with the retain budget.
func (e *Engine) Partition(items []api.Item, retain int) compact.Window {
	return compact.Partition(items, retain, e.countItem)
}

func (e *Engine) countItem(it api.Item) int { return e.cfg.Counter.Item(it.Raw) }

// CountItems is the token count of items.
func (e *Engine) CountItems(items []api.Item) int {
	n := 0
	for _, it := range items {
		n += e.countItem(it)
	}
	return n
}

// replacedTokens is what a window takes out of the context: the conversation items it summarises
// and does not keep verbatim, and what truncating the one retained user message cuts from it.
// 0 means the compaction would replace nothing.
func (e *Engine) replacedTokens(items []api.Item, w compact.Window, retain int) int {
	n, k := 0, 0
	for _, i := range w.Summarise {
		for k < len(w.Retained) && w.Retained[k] < i {
			k++
		}
		switch {
		case i == w.Truncated:
			n += max(0, e.countItem(items[i])-retain)
		case k < len(w.Retained) && w.Retained[k] == i:
		default:
			n += e.countItem(items[i])
		}
	}
	return n
}

// enoughSaving reports ErrTooLittleSaving when what a window can replace, less the dialect's
// fixed handoff text (which the summary comes on top of), is under the minimum saving, or cannot
// make the turn smaller at all. It runs before the summariser is called.
func (e *Engine) enoughSaving(in Request, replaced int) error {
	framing := e.cfg.Counter.Text(in.Dialect.Handoff("", ""))
	least := 1 // even with no minimum, a compaction must be able to save something
	if e.cfg.MinSaving > 0 {
		least = max(least, int(math.Ceil(e.cfg.MinSaving*float64(in.TokensBefore))))
	}
	if gain := replaced - framing; gain < least {
		return fmt.Errorf("%w: it could replace %d tokens (the handoff's fixed text takes %d) of %d, under the minimum saving of %d",
			ErrTooLittleSaving, replaced, framing, in.TokensBefore, least)
	}
	return nil
}

// smaller reports ErrNotSmaller when the compaction's result is not smaller than what it
// replaces: the handoff (summary, ledger and fixed text) against the replaced tokens; for an
// explicit compaction, the summary and ledger against everything summarised or the fixed text,
// whichever is more (Request.Explicit).
func (e *Engine) smaller(in Request, c *Compaction, replaced int) error {
	got, of := 0, replaced
	if in.Explicit {
		got = e.cfg.Counter.Text(c.Summary) + e.cfg.Counter.Text(c.Ledger)
		// A short conversation's summary is rarely shorter than the conversation: up to the
		// handoff's own fixed text that is noise every short compaction pays, past it the
		// summariser wrote more than it read.
		of = e.cfg.Counter.Text(in.Dialect.Handoff("", ""))
		n := 0
		for _, i := range c.Window.Summarise {
			n += e.countItem(c.Compacted[i])
		}
		of = max(of, n)
	} else if c.Handoff != "" {
		got = e.cfg.Counter.Text(c.Handoff)
	}
	if got >= of {
		return fmt.Errorf("%w: the summary takes %d tokens, what it replaces %d", ErrNotSmaller, got, of)
	}
	return nil
}

// capSummary cuts a summariser answer longer than Config.MaxSummaryTokens at the last line break
// that fits (a rune boundary if there is none), marks the cut, and logs and counts it. It reports
// whether it cut.
func (e *Engine) capSummary(d dialect.Name, res *summarizer.Result) bool {
	limit := e.cfg.MaxSummaryTokens
	s := res.Summary
	if limit <= 0 || len(s) <= limit {
		return false // a token is at least one byte
	}
	// A pathological answer (megabytes) is cut by bytes first, so it is not tokenised whole:
	// 16 bytes per token is past any real text's ratio.
	if len(s) > 16*limit {
		s = runePrefix(s, 16*limit)
	}
	total := e.cfg.Counter.Text(s)
	if total <= limit && len(s) == len(res.Summary) {
		return false
	}
	marker := cutMarker(limit)
	budget := limit - e.cfg.Counter.Text(marker)
	keep := len(s)
	if total > budget {
		keep = int(float64(len(s)) * float64(max(budget, 0)) / float64(total))
	}
	var out string
	for range 8 {
		out = lineCut(s, keep)
		if n := e.cfg.Counter.Text(out); n <= budget || keep == 0 {
			break
		} else {
			keep = int(float64(keep) * float64(budget) / float64(n) * 0.97)
		}
	}
	e.log.Warn("summary truncated to its token budget", "api", string(d), "bytes", len(res.Summary), "kept_bytes", len(out), "max_tokens", limit)
	e.obs.SummaryTruncated(d)
	res.Summary = strings.TrimRight(out, " \t\n") + marker
	return true
}

// cutMarker ends a summariser answer capSummary cut to its budget of limit tokens.
func cutMarker(limit int) string {
	return "\n\n[compactd: the summary was cut here at its budget of " + strconv.Itoa(limit) + " tokens]"
}

// lineCut is s cut to at most n bytes, at the last line break in the second half of the kept
// part when there is one, else at a rune boundary.
func lineCut(s string, n int) string {
	s = runePrefix(s, n)
	if i := strings.LastIndexByte(s, '\n'); i >= len(s)/2 {
		return s[:i]
	}
	return s
}

// runePrefix is s cut to at most n bytes on a rune boundary.
func runePrefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)]
}

// Package recallbench measures how much of a long coding session survives chained compaction:
// the share of planted facts whose exact answer is still reachable from (a) the summary alone,
// (b) the summary plus the facts ledger, and (c) those plus a recall search of the archive.
//
// Sessions are synthetic and seeded (see session.go): Codex-shaped Responses items with tool
// output noise, and facts planted where real agents meet them (a function's return type in a file
// listing, a line number in grep output, a config value in a YAML file, the reason an approach was
// rejected in a user or assistant message). The summariser is deliberately lossy: it keeps the
// first sentence of each user message and the last assistant message, never tool output. A
// mediocre summary with good recall should beat an excellent summary without it; this is the
// number that says whether it does.
package recallbench

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/handoff"
)

// Config sizes one run. Zero fields take the defaults in DefaultConfig.
type Config struct {
	Seed          uint64
	Checkpoints   []int // report after these many compactions (default 1, 3, 10)
	Steps         int   // agent steps per round (tool calls, messages)
	FactsPerRound int
	LedgerBudget  int // bytes of ledger per compaction
	TopK          int // recall hits per query
	ExcerptBytes  int // bytes per recall excerpt
	// Excerpts is ExcerptArchive (default: archive.Search's excerpts, what the proxy returns;
	// ExcerptFocused is an alias) or ExcerptSegment (the upper bound of a perfect excerpt).
	Excerpts string
	// Dir holds the SQLite archive; a temporary directory (removed afterwards) when empty.
	Dir string
}

// DefaultConfig is the size the command runs: ten rounds of 60 steps (about 1.2 MB of raw items
// in all), four planted facts per round.
func DefaultConfig() Config {
	return Config{Seed: 1, Checkpoints: []int{1, 3, 10}, Steps: 60, FactsPerRound: 4, LedgerBudget: 6 << 10, TopK: 5, ExcerptBytes: 800}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if len(c.Checkpoints) == 0 {
		c.Checkpoints = d.Checkpoints
	}
	if c.Steps <= 0 {
		c.Steps = d.Steps
	}
	if c.FactsPerRound <= 0 {
		c.FactsPerRound = d.FactsPerRound
	}
	c.FactsPerRound = min(c.FactsPerRound, c.Steps)
	if c.LedgerBudget <= 0 {
		c.LedgerBudget = d.LedgerBudget
	}
	if c.TopK <= 0 {
		c.TopK = d.TopK
	}
	if c.ExcerptBytes <= 0 {
		c.ExcerptBytes = d.ExcerptBytes
	}
	if c.Excerpts == "" {
		c.Excerpts = ExcerptArchive
	}
	c.Checkpoints = slices.Clone(c.Checkpoints)
	slices.Sort(c.Checkpoints)
	return c
}

// Result is the reach after one checkpoint: how many of the facts planted so far have their
// answer in the final summary, in summary + ledger, and in summary + ledger + recall excerpts.
type Result struct {
	Compactions             int
	Facts                   int
	Summary, Ledger, Recall int
	ByKind                  map[string][3]int // kind → the three counts
	KindFacts               map[string]int
	SummaryBytes            int
	LedgerBytes             int
	ArchivedBytes           int
}

// Share returns the three shares (a), (b), (c) in [0,1].
func (r Result) Share() (a, b, c float64) {
	if r.Facts == 0 {
		return 0, 0, 0
	}
	n := float64(r.Facts)
	return float64(r.Summary) / n, float64(r.Ledger) / n, float64(r.Recall) / n
}

// Run simulates one session of max(Checkpoints) compactions and measures reach at each
// checkpoint. Each compaction replaces the previous handoff (summary + ledger) and the new items
// except a two-item tail, exactly as the proxy does: the summariser input includes the previous
// summary, the ledger input includes the previous ledger (carried forward by compact.Ledger), and
// the replaced raw items go to the archive as one segment linked to the previous one.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg = cfg.withDefaults()
	if err := validExcerpts(cfg.Excerpts); err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "recallbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	sealer := newSealer(cfg.Seed)
	store, err := archive.Open(ctx, "sqlite:"+filepath.Join(dir, fmt.Sprintf("recallbench-%d.db", cfg.Seed)), sealer)
	if err != nil {
		return nil, err
	}
	defer store.Close()

	g := newGen(cfg.Seed)
	conv := fmt.Sprintf("recallbench-%d", cfg.Seed)
	epoch := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	var (
		summary, ledger string
		tail            []api.Item
		facts           []Fact
		prevSeg         string
		archived        int
		results         []Result
	)
	last := cfg.Checkpoints[len(cfg.Checkpoints)-1]
	for k := 1; k <= last; k++ {
		items, newTail, planted := g.round(k, cfg.Steps, cfg.FactsPerRound)
		facts = append(facts, planted...)

		// what this compaction replaces: the previous handoff, the previous tail, this round
		var replaced []api.Item
		if k > 1 {
			replaced = append(replaced, api.Item{Raw: handoff.ResponsesMessage(summary, ledger), Type: "message", Role: "user", Handoff: true})
		}
		replaced = append(replaced, tail...)
		replaced = append(replaced, items...)
		tail = newTail

		summary = lossySummary(summary, replaced)
		idx := make([]int, len(replaced))
		for i := range idx {
			idx[i] = i
		}
		ledger = compact.Ledger(replaced, idx, cfg.LedgerBudget)

		// The archive holds the items as the client sent them: the client sends the opaque
		// compaction item, never the handoff text compactd expands it into.
		raws := make([]json.RawMessage, len(replaced))
		for i, it := range replaced {
			raw := it.Raw
			if it.Handoff {
				raw = api.CompactionItem(fmt.Sprintf("cmp_%d", k-1), opaqueBlob(cfg.Seed, k-1))
			}
			raws[i] = raw
			archived += len(raw)
		}
		ref, err := store.Put(ctx, archive.Segment{Conversation: conv, Previous: prevSeg, Items: raws,
			CreatedAt: epoch.Add(time.Duration(k) * time.Minute)})
		if err != nil {
			return nil, err
		}
		prevSeg = ref.ID

		if !slices.Contains(cfg.Checkpoints, k) {
			continue
		}
		r := Result{Compactions: k, Facts: len(facts), ByKind: map[string][3]int{}, KindFacts: map[string]int{},
			SummaryBytes: len(summary), LedgerBytes: len(ledger), ArchivedBytes: archived}
		for _, f := range facts {
			a := contains(summary, f.Answer)
			b := a || contains(ledger, f.Answer)
			c := b
			if !c {
				if c, err = recalled(ctx, store, conv, f, cfg); err != nil {
					return nil, err
				}
			}
			kc := r.ByKind[f.Kind]
			r.KindFacts[f.Kind]++
			for i, ok := range []bool{a, b, c} {
				if ok {
					kc[i]++
				}
			}
			r.ByKind[f.Kind] = kc
			r.Summary += b2i(a)
			r.Ledger += b2i(b)
			r.Recall += b2i(c)
		}
		results = append(results, r)
	}
	return results, nil
}

// recalled reports whether a recall search with the fact's query returns an excerpt holding the
// answer among the top-k hits.
func recalled(ctx context.Context, store archive.Store, conv string, f Fact, cfg Config) (bool, error) {
	hits, err := store.Search(ctx, archive.Query{Text: f.Query, Conversation: conv, Limit: cfg.TopK, ExcerptBytes: cfg.ExcerptBytes})
	if errors.Is(err, archive.ErrEmptyQuery) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, h := range hits {
		ex, err := hitText(ctx, store, h, cfg.Excerpts)
		if err != nil {
			return false, err
		}
		if contains(ex, f.Answer) {
			return true, nil
		}
	}
	return false, nil
}

// opaqueBlob stands in for a sealed compaction payload: base64 noise, unsearchable like the real
// thing.
func opaqueBlob(seed uint64, k int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "recallbench blob %d %d", seed, k))
	return base64.RawURLEncoding.EncodeToString(append(h[:], h[:]...))
}

func contains(text, answer string) bool {
	return strings.Contains(strings.ToLower(text), strings.ToLower(answer))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lossySummary is the deliberately bad summariser: the previous summary, then the first sentence
// of every user message, then the last assistant message. No tool output survives it, and no
// sentence of a user message after the first.
func lossySummary(previous string, items []api.Item) string {
	var b strings.Builder
	b.WriteString(previous)
	lastAssistant := ""
	for _, it := range items {
		if it.Type != "message" || it.Handoff {
			continue
		}
		text := messageText(it.Raw)
		switch it.Role {
		case "user":
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString("- The user asked: " + firstSentence(text))
		case "assistant":
			lastAssistant = text
		}
	}
	if lastAssistant != "" {
		b.WriteString("\n- Last reply: " + lastAssistant)
	}
	return b.String()
}

func messageText(raw []byte) string {
	var parts []string
	for _, p := range gjson.GetBytes(raw, "content").Array() {
		if t := p.Get("text"); t.Exists() {
			parts = append(parts, t.Str)
		}
	}
	return strings.Join(parts, "\n")
}

func firstSentence(s string) string {
	if i := strings.IndexAny(s, ".?!\n"); i >= 0 {
		return s[:i+1]
	}
	return s
}

// Markdown renders the results as a table (and a per-kind breakdown of the last checkpoint).
func Markdown(cfg Config, rs []Result) string {
	cfg = cfg.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "| compactions | facts | (a) summary | (b) + ledger | (c) + recall top-%d | summary | ledger | archived |\n", cfg.TopK)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		a, l, c := r.Share()
		fmt.Fprintf(&b, "| %d | %d | %.1f%% (%d) | %.1f%% (%d) | %.1f%% (%d) | %s | %s | %s |\n",
			r.Compactions, r.Facts, 100*a, r.Summary, 100*l, r.Ledger, 100*c, r.Recall,
			size(r.SummaryBytes), size(r.LedgerBytes), size(r.ArchivedBytes))
	}
	if len(rs) == 0 {
		return b.String()
	}
	r := rs[len(rs)-1]
	fmt.Fprintf(&b, "\nBy kind after %d compactions:\n\n| kind | facts | (a) | (b) | (c) |\n|---|---:|---:|---:|---:|\n", r.Compactions)
	for _, k := range kinds {
		n := r.KindFacts[k]
		if n == 0 {
			continue
		}
		c := r.ByKind[k]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d |\n", k, n, c[0], c[1], c[2])
	}
	return b.String()
}

func size(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// sealer is the archive's keyring stand-in: AES-256-GCM under a key derived from the seed, with
// the segment id and tenant as associated data. The bench measures search, not key management.
type sealer struct {
	aead  cipher.AEAD
	index []byte
}

func newSealer(seed uint64) *sealer {
	k := sha256.Sum256(fmt.Appendf(nil, "recallbench seal %d", seed))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	ix := sha256.Sum256(fmt.Appendf(nil, "recallbench index %d", seed))
	return &sealer{aead: aead, index: ix[:]}
}

func sealAD(segmentID, tenant string) []byte {
	return []byte("archive\x00" + segmentID + "\x00" + tenant)
}

func (s *sealer) SealArchive(plaintext []byte, segmentID, tenant string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plaintext, sealAD(segmentID, tenant))), nil
}

func (s *sealer) OpenArchive(blob, segmentID, tenant string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(blob)
	if err != nil {
		return nil, err
	}
	if len(b) < s.aead.NonceSize() {
		return nil, errors.New("recallbench: short blob")
	}
	return s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], sealAD(segmentID, tenant))
}

func (s *sealer) IndexKey() []byte { return s.index }

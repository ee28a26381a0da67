package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/memo"
)

// specTurns is a turn below the threshold (which speculates on everything before its newest user
// message: 4 items) and the turn that crosses it, two items later.
func specTurns() (below, crossing []api.Item) {
	below = []api.Item{
		msg("user", "U1 "+words(1500)), msg("assistant", "A1 "+words(3000)),
		msg("user", "U2 "+words(100)), msg("assistant", "A2 "+words(3000)),
		msg("user", "U3 go on"),
	}
	crossing = append(slices.Clone(below), msg("assistant", "A3 "+words(500)), msg("user", "U4 next"))
	return below, crossing
}

// Speculation: a summary prepared below the threshold for a prefix is used by the crossing turn
// that starts with the same items (nothing summarised now, what followed the prefix kept verbatim
// behind it, the speculative ledger sealed with it); a changed prefix, another owner, or a turn
// that may not use speculation compacts the normal way.
func TestCompactUsesSpeculation(t *testing.T) {
	below, crossing := specTurns()
	changed := slices.Clone(crossing)
	changed[2] = msg("user", "U2-EDITED "+words(100))
	tests := []struct {
		name      string
		items     []api.Item
		owner     string
		speculate bool
		wantHit   bool
		wantObs   string // the speculation outcome counted ("" none)
	}{
		{"the same prefix: the ready summary is used", crossing, "o1", true, true, "spec:hit"},
		{"a changed prefix compacts normally", changed, "o1", true, false, "spec:miss"},
		{"another owner's turn compacts normally", crossing, "o2", true, false, "spec:miss"},
		{"a turn that may not use speculation", crossing, "o1", false, false, ""},
	}
	const ledgerBytes = 4096
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := entriesSum()
			obs := &recObs{}
			e, _ := testEngine(t, sum, func(c *Config) {
				c.Observer, c.LedgerBytes = obs, ledgerBytes
				c.Speculative = SpeculativeConfig{Fraction: 0.5}
			})
			if e.Speculating(4000, 10_000) || !e.Speculating(5000, 10_000) {
				t.Fatal("Speculating does not follow the fraction")
			}
			e.Speculate(SpecRequest{Dialect: responsesDialect, Tenant: "t1", Owner: "o1", Model: "m", Units: below, Retain: 64_000, Total: 4000, Limit: 10_000})
			if obs.has("spec:started") {
				t.Fatal("a turn below the fraction started a speculation")
			}
			e.Speculate(SpecRequest{Dialect: responsesDialect, Tenant: "t1", Owner: "o1", Model: "m", Units: below, Retain: 64_000, Total: 9000, Limit: 10_000})
			if !obs.has("spec:started") {
				t.Fatal("no speculation started")
			}
			in := request(e, tt.items, 64_000)
			in.Tenant, in.Owner, in.Speculate = "t1", tt.owner, tt.speculate
			c, err := e.Compact(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if c.Speculated != tt.wantHit {
				t.Fatalf("speculated %v, want %v (observed %v)", c.Speculated, tt.wantHit, obs.all())
			}
			if tt.wantObs != "" && !obs.has(tt.wantObs) {
				t.Errorf("observed %v, want %s", obs.all(), tt.wantObs)
			}
			o := openOK(t, e, c, responsesDialect.SealKind, "t1")
			if tt.wantHit {
				prefix := tt.items[:4]
				w := e.Partition(prefix, 64_000)
				if c.Summary != "summary of 4 entries" || len(c.Compacted) != 4 || c.Tail != 3 || o.Payload.Tail != 3 {
					t.Errorf("summary %q over %d items, tail %d (sealed %d); want the prefix's, 3 kept", c.Summary, len(c.Compacted), c.Tail, o.Payload.Tail)
				}
				if want := compact.Ledger(prefix, w.Summarise, ledgerBytes); c.Ledger != want || want == "" {
					t.Errorf("ledger %q, want the speculative one %q", c.Ledger, want)
				}
				if sum.n() != 1 {
					t.Errorf("%d summariser calls, want the speculative one only", sum.n())
				}
				if want := raws([]api.Item{prefix[0], prefix[2]}); !slices.Equal(raws(c.Kept), want) {
					t.Errorf("kept %.40q, want the prefix's retained user messages", raws(c.Kept))
				}
				return
			}
			if c.Summary != "summary of 7 entries" || len(c.Compacted) != 7 || c.Tail != 0 || o.Payload.Tail != 0 {
				t.Errorf("summary %q over %d items, tail %d: want a normal compaction", c.Summary, len(c.Compacted), c.Tail)
			}
			if tt.wantObs == "" && obs.hasPrefix("spec:hit") {
				t.Error("speculation was consulted")
			}
		})
	}
}

// Speculation across replicas: a summary one replica prepared is shared through the memo and
// used by another replica's crossing turn of the same owner, without a summariser call there.
func TestCompactUsesSpeculationSharedThroughTheMemo(t *testing.T) {
	below, crossing := specTurns()
	m := memo.NewLocal(0, time.Hour)
	obsA := &recObs{events: make(chan string, 64)}
	a, _ := testEngine(t, entriesSum(), func(c *Config) {
		c.Memo, c.Observer, c.Speculative = m, obsA, SpeculativeConfig{Fraction: 0.5}
	})
	a.Speculate(SpecRequest{Dialect: responsesDialect, Tenant: "t1", Owner: "o1", Conversation: "conv", Model: "m", Units: below, Retain: 64_000, Total: 9000, Limit: 10_000})
	obsA.waitFor(t, "memo:spec_shared")

	for _, tt := range []struct {
		owner string
		hit   bool
	}{{"o2", false}, {"o1", true}} {
		sumB, obsB := entriesSum(), &recObs{}
		b, _ := testEngine(t, sumB, func(c *Config) {
			c.Memo, c.Observer, c.Speculative = m, obsB, SpeculativeConfig{Fraction: 0.5}
		})
		in := request(b, crossing, 64_000)
		in.Tenant, in.Owner, in.Speculate = "t1", tt.owner, true
		c, err := b.Compact(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if c.Speculated != tt.hit || obsB.has("memo:spec_hit") != tt.hit {
			t.Fatalf("owner %s: speculated %v (observed %v), want %v", tt.owner, c.Speculated, obsB.all(), tt.hit)
		}
		if tt.hit && (c.Summary != "summary of 4 entries" || c.Tail != 3 || sumB.n() != 0) {
			t.Errorf("summary %q, tail %d, %d summariser calls on the second replica", c.Summary, c.Tail, sumB.n())
		}
		if !tt.hit && (c.Summary != "summary of 7 entries" || !obsB.has("spec:miss")) {
			t.Errorf("owner %s: summary %q, observed %v", tt.owner, c.Summary, obsB.all())
		}
	}
}

package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/memo"
)

// sealOnly is a sealer that cannot sign.
type sealOnly struct{ crypto.Sealer }

func compactFor(t *testing.T, e *Engine, tenant string, sign bool) *Compaction {
	t.Helper()
	items := []api.Item{msg("user", words(1000)), msg("assistant", words(3000)), msg("user", "go on")}
	in := request(e, items, 64_000)
	in.Tenant, in.Sign = tenant, sign
	c, err := e.Compact(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// flipMiddle changes one character in the middle of the sealed part of encrypted_content: still
// well-formed base64, no longer what was sealed.
func flipMiddle(ec string) string {
	id, sealed, _ := strings.Cut(ec, ".")
	b := []byte(sealed)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return id + "." + string(b)
}

// Open gives a later turn back the compaction it carries only when it is exactly what compactd
// sealed, for this item, kind and tenant, and not older than the item age limit; every refusal is
// one of the crypto package's classes (or ErrExpired), named by Reason.
func TestOpenContract(t *testing.T) {
	const kind, tenant = "openai.compaction", "t1"
	e, _ := testEngine(t, entriesSum(), func(c *Config) { c.ItemMaxAge = time.Hour })
	ring := e.cfg.Sealer.(*crypto.Keyring)
	good := compactFor(t, e, tenant, false)
	signed := compactFor(t, e, tenant, true)
	other, _ := testEngine(t, entriesSum(), nil) // another deployment's key
	foreign := compactFor(t, other, tenant, false)

	seal := func(id string, plain []byte) string {
		s, err := ring.Seal(plain, crypto.Binding{Kind: kind, ItemID: id, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		return encryptedContent(id, s)
	}
	payload := func(created time.Time) []byte {
		b, err := (&compact.Payload{V: compact.PayloadVersion, Summary: "old", CreatedAt: created.Unix()}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	old := seal("cmp_old", payload(time.Now().Add(-2*time.Hour)))
	recent := seal("cmp_recent", payload(time.Now().Add(-time.Minute)))
	_, goodSealed, _ := strings.Cut(good.EncryptedContent, ".")

	tests := []struct {
		name                string
		ec, givenID, kind   string
		tenant, sig         string
		wantErr             error // nil: it opens
		reason              string
		signature           bool // the refusal is the signature's
		wantID, wantSummary string
	}{
		{"good", good.EncryptedContent, "", kind, tenant, "", nil, "", false, good.ID, good.Summary},
		{"good, with its id beside it", good.EncryptedContent, good.ID, kind, tenant, "", nil, "", false, good.ID, good.Summary},
		{"within the age limit", recent, "", kind, tenant, "", nil, "", false, "cmp_recent", "old"},
		{"another id beside it", good.EncryptedContent, "cmp_other", kind, tenant, "", crypto.ErrTampered, "tampered", false, "", ""},
		{"tampered", flipMiddle(good.EncryptedContent), "", kind, tenant, "", crypto.ErrTampered, "tampered", false, "", ""},
		{"moved to another item", "cmp_other." + goodSealed, "", kind, tenant, "", crypto.ErrTampered, "tampered", false, "", ""},
		{"wrong tenant", good.EncryptedContent, "", kind, "t2", "", crypto.ErrWrongTenant, "wrong_tenant", false, "", ""},
		{"wrong seal kind", good.EncryptedContent, "", "anthropic.compaction", tenant, "", crypto.ErrTampered, "tampered", false, "", ""},
		{"expired", old, "", kind, tenant, "", ErrExpired, "expired", false, "", ""},
		{"not compactd's format", "opaque-foreign-blob", "", kind, tenant, "", crypto.ErrMalformed, "malformed", false, "", ""},
		{"not a compactd id", "rs_1." + goodSealed, "", kind, tenant, "", crypto.ErrMalformed, "malformed", false, "", ""},
		{"sealed, but no payload", seal("cmp_junk", []byte("not a payload")), "", kind, tenant, "", crypto.ErrMalformed, "malformed", false, "", ""},
		{"another deployment's key", foreign.EncryptedContent, "", kind, tenant, "", crypto.ErrUnknownKey, "unknown_key", false, "", ""},
		{"signed", signed.EncryptedContent, "", kind, tenant, signed.Signature, nil, "", false, signed.ID, signed.Summary},
		{"signed, another block's signature", good.EncryptedContent, "", kind, tenant, signed.Signature, crypto.ErrTampered, "tampered", true, "", ""},
		{"signed, not compactd's format", "opaque", "", kind, tenant, signed.Signature, crypto.ErrMalformed, "malformed", true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := e.Open(tt.ec, tt.givenID, tt.kind, tt.tenant, tt.sig)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if o.ID != tt.wantID || o.Summary != tt.wantSummary || o.Payload.Summary != tt.wantSummary {
					t.Errorf("opened %s with summary %q, want %s, %q", o.ID, o.Summary, tt.wantID, tt.wantSummary)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || o != nil {
				t.Fatalf("Open = %v, %v; want %v", o != nil, err, tt.wantErr)
			}
			if got := Reason(err); got != tt.reason {
				t.Errorf("Reason = %q, want %q", got, tt.reason)
			}
			var se *SignatureError
			if got := errors.As(err, &se); got != tt.signature {
				t.Errorf("a signature error: %v, want %v (%v)", got, tt.signature, err)
			}
			if tt.signature && !strings.HasPrefix(err.Error(), "compaction signature: ") {
				t.Errorf("error %q", err)
			}
		})
	}

	// The age limit is the engine's: without one, the old item opens.
	noLimit := New(Config{Sealer: ring, Summarizer: entriesSum(), Counter: e.cfg.Counter, Speculative: SpeculativeConfig{Fraction: -1}})
	if _, err := noLimit.Open(old, "", kind, tenant, ""); err != nil {
		t.Errorf("an old item without an age limit: %v", err)
	}
}

// A sealer that cannot sign cannot make signed compactions, and refuses to check a signature.
func TestSignedCompactionNeedsASigner(t *testing.T) {
	e, _ := testEngine(t, entriesSum(), func(c *Config) { c.Sealer = sealOnly{c.Sealer} })
	items := []api.Item{msg("user", words(1000)), msg("assistant", words(3000)), msg("user", "go on")}
	in := request(e, items, 64_000)
	in.Sign = true
	if c, err := e.Compact(context.Background(), in); err == nil || c != nil {
		t.Fatal("a signed compaction made without a signer")
	}
	c := compactFor(t, e, "t1", false)
	_, err := e.Open(c.EncryptedContent, "", responsesDialect.SealKind, "t1", "c2lnbmF0dXJl")
	var se *SignatureError
	if !errors.As(err, &se) || !errors.Is(err, crypto.ErrMalformed) {
		t.Errorf("Open with a signature and no signer = %v", err)
	}
	openOK(t, e, c, responsesDialect.SealKind, "t1")
}

// failingMemo is a memo whose reads and writes fail.
type failingMemo struct{ memo.Memo }

var errMemoDown = errors.New("memo down")

func (failingMemo) Longest(context.Context, memo.Key, []memo.Hash) (memo.Entry, bool, error) {
	return memo.Entry{}, false, errMemoDown
}

func (failingMemo) Record(context.Context, memo.Key, memo.Hash, int, []byte) error {
	return errMemoDown
}

// The conversation memo never fails a turn: no memo is no lookup, a failing one and a record that
// no longer opens are misses (and a failed record costs the compaction nothing), a good record
// is applied to the turn that starts with what it covers.
func TestRememberedContract(t *testing.T) {
	ctx := context.Background()
	items := []api.Item{msg("user", words(1000)), msg("assistant", words(3000)), msg("user", "go on")}
	next := append(append([]api.Item(nil), items...), msg("assistant", "done"), msg("user", "and now?"))
	sc := Scope{Tenant: "t1", Owner: "o1", Conversation: "conv"}
	record := func(e *Engine) *Compaction {
		t.Helper()
		in := request(e, items, 64_000)
		in.Tenant, in.Owner, in.Conversation = sc.Tenant, sc.Owner, sc.Conversation
		in.Memory, in.Covers = e.Remembered(ctx, responsesDialect, sc, rawItems(items)), len(items)
		c, err := e.Compact(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("no memo", func(t *testing.T) {
		e, _ := testEngine(t, entriesSum(), nil)
		if m := e.Remembered(ctx, responsesDialect, sc, rawItems(items)); m != nil {
			t.Error("a lookup without a memo")
		}
	})
	t.Run("a dialect without memo", func(t *testing.T) {
		e, _ := testEngine(t, entriesSum(), func(c *Config) { c.Memo = memo.NewLocal(0, time.Hour) })
		d := responsesDialect
		d.Memo = false
		if m := e.Remembered(ctx, d, sc, rawItems(items)); m != nil {
			t.Error("a lookup for a dialect without memo")
		}
	})
	t.Run("a failing memo", func(t *testing.T) {
		obs := &recObs{}
		e, _ := testEngine(t, entriesSum(), func(c *Config) { c.Memo, c.Observer = failingMemo{memo.NewLocal(0, time.Hour)}, obs })
		c := record(e)
		if c.EncryptedContent == "" {
			t.Fatal("no compaction")
		}
		for _, want := range []string{"memo:error", "memo:miss", "memo:record_error"} {
			if !obs.has(want) {
				t.Errorf("observed %v, want %s", obs.all(), want)
			}
		}
	})
	t.Run("a record that no longer opens", func(t *testing.T) {
		m := memo.NewLocal(0, time.Hour)
		before, _ := testEngine(t, entriesSum(), func(c *Config) { c.Memo = m })
		record(before)
		obs := &recObs{}
		rotated, _ := testEngine(t, entriesSum(), func(c *Config) { c.Memo, c.Observer = m, obs }) // another key
		if got := rotated.Remembered(ctx, responsesDialect, sc, rawItems(next)); got == nil || got.Opened != nil || !obs.has("memo:stale") {
			t.Errorf("a record sealed with another key: %+v, observed %v", got, obs.all())
		}
	})
	t.Run("a hit, then forgotten", func(t *testing.T) {
		obs := &recObs{events: make(chan string, 64)}
		e, _ := testEngine(t, entriesSum(), func(c *Config) {
			c.Memo, c.Observer, c.Speculative = memo.NewLocal(0, time.Hour), obs, SpeculativeConfig{Fraction: 0.5}
		})
		c := record(e)
		got := e.Remembered(ctx, responsesDialect, sc, rawItems(next))
		if got == nil || got.Opened == nil || got.Opened.ID != c.ID || got.Items != len(items) || got.Opened.Summary != c.Summary {
			t.Fatalf("the record was not applied: %+v", got)
		}
		if !obs.has("memo:recorded") || !obs.has("memo:hit") {
			t.Errorf("observed %v", obs.all())
		}
		// A speculative summary made in the same conversation: held here and shared in the memo.
		below, _ := specTurns()
		e.Speculate(SpecRequest{Dialect: responsesDialect, Tenant: sc.Tenant, Owner: sc.Owner, Conversation: sc.Conversation, Model: "m", Units: below, Retain: 64_000, Total: 9000, Limit: 10_000})
		obs.waitFor(t, "memo:spec_shared")
		n, err := e.Forget(ctx, sc.Tenant, sc.Conversation)
		if err != nil || n != 3 {
			t.Errorf("Forget = %d, %v; want the record, the speculation and its shared summary", n, err)
		}
		if got := e.Remembered(ctx, responsesDialect, sc, rawItems(next)); got == nil || got.Opened != nil {
			t.Error("a forgotten record was applied")
		}
		if n, _ := e.Forget(ctx, sc.Tenant, sc.Conversation); n != 0 {
			t.Errorf("forgot %d more", n)
		}
	})
}

// A compaction records in the memo only what it covers of the client's items, and only with a
// memo lookup of the turn.
func TestCompactRecordsWhatItCovers(t *testing.T) {
	ctx := context.Background()
	obs := &recObs{}
	e, _ := testEngine(t, entriesSum(), func(c *Config) { c.Memo, c.Observer = memo.NewLocal(0, time.Hour), obs })
	items := []api.Item{msg("user", words(1000)), msg("assistant", words(3000)), msg("user", "go on")}
	sc := Scope{Tenant: "t1"}
	for _, covers := range []int{0, len(items) + 1} {
		in := request(e, items, 64_000)
		in.Tenant, in.Memory, in.Covers = "t1", e.Remembered(ctx, responsesDialect, sc, rawItems(items)), covers
		if _, err := e.Compact(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if obs.has("memo:recorded") {
		t.Error("a compaction covering nothing, or more than the turn's items, was recorded")
	}
}

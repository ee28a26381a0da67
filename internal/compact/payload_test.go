package compact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// summary16K is 16 KiB of summary-like prose: drawn from a fixed vocabulary by a fixed-seed
// generator, so it compresses like real text (about 3x) rather than like a repeated line.
func summary16K() string {
	words := strings.Fields(`the parser lexer error position offset test decided keep rejected because config file
		value timeout retries handler request response stream compaction summary item token budget window user
		asked fix bug in regression benchmark allocation cache hit miss key seed hash prefix upstream proxy model
		tool output command exit status failed passed reverted commit branch merge next step remaining TODO`)
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < 16<<10 {
		b.WriteString("- ")
		for n := 8 + rng.IntN(12); n > 0; n-- {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "(%s:%d).\n", words[rng.IntN(len(words))]+".go", rng.IntN(2000))
	}
	return b.String()
}

func TestPayloadRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		p       Payload
		wantEnc byte
	}{
		{"small stays raw", Payload{Summary: "short summary", CreatedAt: 1764967971, TokensBefore: 210000, TokensAfter: 9000, ItemsReplaced: 42}, encRaw},
		{"large compressed", Payload{Summary: summary16K(), Model: "gpt-5.4", CreatedAt: 1764967971, TokensBefore: 250000,
			TokensAfter: 12000, ItemsReplaced: 300, Previous: "cmp_1", Archive: &ArchiveRef{ID: "arc_1", Hash: "sha256:ab"}, Ledger: "facts"}, encZstd},
		{"unicode and escapes", Payload{Summary: "naïve \"quoted\" \u2028 <html> \x00 日本語"}, encRaw},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if b[0] != tc.wantEnc {
				t.Errorf("encoding %d, want %d", b[0], tc.wantEnc)
			}
			got, err := UnmarshalPayload(b)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.p
			want.V = PayloadVersion
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("round trip changed the payload:\n%+v\n%+v", *got, want)
			}
		})
	}
}

// TestPayloadJSONMatchesEncodingJSON holds the hand-written codec to encoding/json's reading of
// the struct tags, both ways.
func TestPayloadJSONMatchesEncodingJSON(t *testing.T) {
	for _, p := range []Payload{
		{V: 1, Summary: "a\"b\\c\n\t\x01\x1f</script>\u2028 é", CreatedAt: -5, TokensBefore: 1 << 40},
		{V: 1, Summary: "s", Model: "m", Previous: "cmp_0", Archive: &ArchiveRef{ID: "a", Hash: "h", Conversation: "conv_1"}, Ledger: "l", ItemsReplaced: 3, Tail: 2},
		{V: 1, Summary: "bad utf8 \xff\xfe end"},
	} {
		mine := p.appendJSON(nil)
		var viaStd Payload
		if err := json.Unmarshal(mine, &viaStd); err != nil {
			t.Fatalf("encoding/json rejects %s: %v", mine, err)
		}
		std, _ := json.Marshal(p)
		viaMine, err := parsePayload(std)
		if err != nil {
			t.Fatalf("parsePayload rejects %s: %v", std, err)
		}
		if !reflect.DeepEqual(viaStd, *viaMine) {
			t.Errorf("codecs disagree:\n%+v\n%+v", viaStd, *viaMine)
		}
	}
	if _, err := parsePayload([]byte(`{"v":1,"tokens_before":1.5}`)); err == nil {
		t.Error("fractional count accepted")
	}
	if _, err := parsePayload([]byte(`{"v":1,"summary":7}`)); err == nil {
		t.Error("numeric summary accepted")
	}
}

func TestUnmarshalPayloadRejects(t *testing.T) {
	good, _ := (&Payload{Summary: summary16K()}).Marshal()
	truncated := good[:len(good)/2]
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0xff

	bomb := zstd.EncodeTo(nil, make([]byte, MaxPayloadSize+1))
	bombBlob := append([]byte{encZstd}, bomb...)

	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"tag only", []byte{encRaw}},
		{"unknown encoding", append([]byte{7}, `{"v":1}`...)},
		{"raw not json", append([]byte{encRaw}, "not json"...)},
		{"wrong version", append([]byte{encRaw}, `{"v":2,"summary":"x"}`...)},
		{"missing version", append([]byte{encRaw}, `{"summary":"x"}`...)},
		{"truncated zstd", truncated},
		{"corrupted zstd", flipped},
		{"zstd not json", append([]byte{encZstd}, zstd.EncodeTo(nil, []byte(strings.Repeat("garbage ", 100)))...)},
		{"compression bomb", bombBlob},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := UnmarshalPayload(tc.b)
			if err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			if !errors.Is(err, ErrPayload) {
				t.Errorf("error %v is not ErrPayload", err)
			}
		})
	}
	if len(bombBlob) > 64<<10 {
		t.Errorf("bomb blob is %d bytes; the test wants a small blob that expands past the cap", len(bombBlob))
	}
}

func BenchmarkPayloadMarshal16K(b *testing.B) {
	p := Payload{Summary: summary16K(), Model: "gpt-5.4", CreatedAt: 1764967971, TokensBefore: 250000, TokensAfter: 12000}
	b.ReportAllocs()
	b.SetBytes(int64(len(p.Summary)))
	for b.Loop() {
		if _, err := p.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPayloadUnmarshal16K(b *testing.B) {
	p := Payload{Summary: summary16K(), Model: "gpt-5.4", CreatedAt: 1764967971, TokensBefore: 250000, TokensAfter: 12000}
	blob, _ := p.Marshal()
	b.ReportAllocs()
	b.SetBytes(int64(len(p.Summary)))
	for b.Loop() {
		if _, err := UnmarshalPayload(blob); err != nil {
			b.Fatal(err)
		}
	}
}

package crypto

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestParseKeyring(t *testing.T) {
	a, b, c := testKey("a", 1), testKey("b", 2), testKey("c", 3)
	as, bs, cs := a.String(), b.String(), c.String()
	tests := []struct {
		name    string
		text    string
		wantIDs []string // active first; nil when an error is expected
		wantErr string
	}{
		{"single", as, []string{"a"}, ""},
		{"newlines", as + "\n" + bs + "\n" + cs + "\n", []string{"a", "b", "c"}, ""},
		{"crlf", as + "\r\n" + bs + "\r\n", []string{"a", "b"}, ""},
		{"commas", as + "," + bs + " , " + cs, []string{"a", "b", "c"}, ""},
		{"mixed", as + ",\n" + bs + ",," + "\n\n" + cs, []string{"a", "b", "c"}, ""},
		{"comments and blanks", "# keys\n\n" + as + "  # current\n# old one:\n" + bs + "\n", []string{"a", "b"}, ""},
		{"explicit active later", bs + "\nactive " + as + "\n" + cs, []string{"a", "b", "c"}, ""},
		{"explicit both", "retired " + bs + ",active " + as, []string{"a", "b"}, ""},
		{"tab after marker", "active\t" + as, []string{"a"}, ""},
		{"first retired, second implicit active", "retired " + bs + "\n" + as, []string{"a", "b"}, ""},
		{"String form", "active " + as + "\nretired " + bs + "\n", []string{"a", "b"}, ""},
		{"empty", "", nil, "no keys"},
		{"only comments", "# nothing\n  \n,,", nil, "no keys"},
		{"duplicate id", as + "\n" + testKey("a", 9).String(), nil, "duplicate"},
		{"same secret twice", as + "\n" + "z:" + strings.SplitN(as, ":", 2)[1], nil, "same secret"},
		{"two actives", "active " + as + "\nactive " + bs, nil, "exactly one"},
		{"all retired", "retired " + as + "\nretired " + bs, nil, "no active"},
		{"bad entry", as + "\nnot-a-key", nil, "entry 2"},
		{"unknown marker", "primary " + as, nil, "entry 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseKeyring(tt.text)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseKeyring succeeded with ids %v, want error containing %q", r.IDs(), tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q does not contain %q", err, tt.wantErr)
				}
				for _, s := range []string{as, bs, cs} {
					if strings.Contains(err.Error(), strings.SplitN(s, ":", 2)[1]) {
						t.Fatalf("error leaks a secret: %q", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKeyring: %v", err)
			}
			if got := r.IDs(); !slices.Equal(got, tt.wantIDs) {
				t.Fatalf("IDs() = %v, want %v", got, tt.wantIDs)
			}
			if r.ActiveID() != tt.wantIDs[0] {
				t.Fatalf("ActiveID() = %q, want %q", r.ActiveID(), tt.wantIDs[0])
			}
		})
	}
}

func TestKeyringStringRoundTrip(t *testing.T) {
	r := mustKeyring(t, testKey("new", 10), testKey("old", 20), testKey("older", 30))
	back, err := ParseKeyring(r.String())
	if err != nil {
		t.Fatalf("ParseKeyring(String()): %v", err)
	}
	if !slices.Equal(back.IDs(), r.IDs()) {
		t.Fatalf("IDs after round trip = %v, want %v", back.IDs(), r.IDs())
	}
	// Same secrets: the reparsed keyring opens what the original sealed, for every key.
	for _, k := range []Key{testKey("new", 10), testKey("old", 20), testKey("older", 30)} {
		blob := mustSeal(t, mustKeyring(t, k), []byte("x"), defaultBinding)
		if _, err := back.Open(blob, defaultBinding); err != nil {
			t.Fatalf("round-tripped keyring cannot open blob of %q: %v", k.ID, err)
		}
	}
}

func TestNewKeyring(t *testing.T) {
	tests := []struct {
		name    string
		active  Key
		retired []Key
		wantErr string
	}{
		{"one key", testKey("a", 1), nil, ""},
		{"rotated", testKey("b", 2), []Key{testKey("a", 1)}, ""},
		{"duplicate id", testKey("a", 1), []Key{testKey("a", 2)}, "duplicate"},
		{"duplicate retired ids", testKey("a", 1), []Key{testKey("b", 2), testKey("b", 3)}, "duplicate"},
		{"same secret", testKey("a", 1), []Key{testKey("b", 1)}, "same secret"},
		{"invalid id", testKey("a:b", 1), nil, "key id"},
		{"empty id", Key{}, nil, "key id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKeyring(tt.active, tt.retired...)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("NewKeyring: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("NewKeyring succeeded, want error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestKeyringRedactedForms(t *testing.T) {
	k1, k2 := testKey("one", 1), testKey("two", 2)
	r := mustKeyring(t, k1, k2)
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("keys", "keyring", r)
	for name, s := range map[string]string{"%#v": fmt.Sprintf("%#v", r), "slog": logged.String()} {
		for _, k := range []Key{k1, k2} {
			if strings.Contains(s, base64.RawURLEncoding.EncodeToString(k.Secret[:])) {
				t.Errorf("%s form leaks a secret: %s", name, s)
			}
			if !strings.Contains(s, k.ID) {
				t.Errorf("%s form %s lacks id %q", name, s, k.ID)
			}
		}
	}
}

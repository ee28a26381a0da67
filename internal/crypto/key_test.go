package crypto

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
)

func TestGenerateKey(t *testing.T) {
	idRE := regexp.MustCompile(`^k[a-z2-7]{12}$`)
	seenIDs := map[string]bool{}
	seenSecrets := map[[32]byte]bool{}
	for range 200 {
		k, err := GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		if !idRE.MatchString(k.ID) {
			t.Fatalf("id %q does not match %s", k.ID, idRE)
		}
		if seenIDs[k.ID] || seenSecrets[k.Secret] {
			t.Fatalf("GenerateKey repeated an id or secret after %d keys", len(seenIDs))
		}
		seenIDs[k.ID], seenSecrets[k.Secret] = true, true

		back, err := ParseKey(k.String())
		if err != nil {
			t.Fatalf("ParseKey(String()): %v", err)
		}
		if back != k {
			t.Fatalf("String/ParseKey round trip changed the key")
		}
	}
}

func TestKeyStringForm(t *testing.T) {
	k := testKey("abc", 7)
	want := "abc:" + base64.RawURLEncoding.EncodeToString(k.Secret[:])
	if got := k.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestParseKey(t *testing.T) {
	k := testKey("key.1_A-z", 200) // bytes ≥ 0xF8 so url and std alphabets differ
	url := base64.RawURLEncoding.EncodeToString(k.Secret[:])
	std := base64.StdEncoding.EncodeToString(k.Secret[:])
	if url == strings.TrimRight(std, "=") {
		t.Fatal("test key does not exercise the std/url alphabet difference")
	}
	tests := []struct {
		name    string
		in      string
		wantErr string // "" means success with key k
	}{
		{"string form", k.ID + ":" + url, ""},
		{"std base64 padded", k.ID + ":" + std, ""},
		{"std base64 unpadded", k.ID + ":" + strings.TrimRight(std, "="), ""},
		{"url padded", k.ID + ":" + base64.URLEncoding.EncodeToString(k.Secret[:]), ""},
		{"surrounding space", "  " + k.ID + ":" + url + "\n", ""},
		{"no colon", url, "ID:base64"},
		{"empty id", ":" + url, "key id"},
		{"id too long", strings.Repeat("a", 33) + ":" + url, "key id"},
		{"id bad char", "a/b:" + url, "key id"},
		{"id with space", "a b:" + url, "key id"},
		{"short secret", "a:" + base64.RawURLEncoding.EncodeToString(k.Secret[:16]), "32 bytes"},
		{"long secret", "a:" + base64.RawURLEncoding.EncodeToString(append(k.Secret[:], 1)), "32 bytes"},
		{"not base64", "a:" + strings.Repeat("!", 43), "base64"},
		{"empty secret", "a:", "32 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseKey: %v", err)
				}
				if got != k {
					t.Fatalf("ParseKey returned a different key")
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseKey succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
			// The input may be or contain a secret; errors must never echo it.
			if _, secret, ok := strings.Cut(tt.in, ":"); ok && len(secret) > 8 && strings.Contains(err.Error(), strings.TrimSpace(secret)) {
				t.Fatalf("error echoes the secret: %q", err)
			}
			if !strings.Contains(tt.in, ":") && strings.Contains(err.Error(), tt.in) {
				t.Fatalf("error echoes the input: %q", err)
			}
		})
	}
}

func TestKeyRedactedForms(t *testing.T) {
	k := testKey("redact", 1)
	secret := base64.RawURLEncoding.EncodeToString(k.Secret[:])
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("key", "key", k)
	for name, s := range map[string]string{
		"%#v":  fmt.Sprintf("%#v", k),
		"slog": logged.String(),
	} {
		if strings.Contains(s, secret) || !strings.Contains(s, k.ID) {
			t.Errorf("%s form %q: want the id and not the secret", name, s)
		}
	}
}

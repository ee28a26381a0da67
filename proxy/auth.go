package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/metrics"

	"go.yaml.in/yaml/v3"
	"golang.org/x/time/rate"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/owner"
)

// Proxy authentication and tenants. With a tenants file configured, every request — on any path
// and method, compactd's routes, pass-through and unknown paths alike; only the probes, /metrics
// and the admin API, which have guards of their own, are exempt — must carry a compactd client
// key (as `Authorization: Bearer …`, `x-api-key` or `api-key`, whichever its SDK sends), and
// counts against its tenant's rate limit. Keys are stored only as SHA-256 hashes and compared in constant time. The key's
// tenant is bound into every item compactd seals for the request, so an item issued to one tenant
// never opens for another; the tenant's own upstream credentials replace the client's key on the
// way out, so clients need not hold provider keys; and each tenant has its own rate limit.
// Without a tenants file compactd behaves as before: one tenant, "default", and the client's own
// credentials forwarded.

// TenantsFile is the on-disk form (YAML or JSON) of the tenants configuration.
type TenantsFile struct {
	Tenants []TenantConfig `json:"tenants" yaml:"tenants"`
}

// TenantConfig is one tenant.
type TenantConfig struct {
	Name string `json:"name" yaml:"name"`
	// Keys are the SHA-256 hashes of the tenant's client keys, "sha256:<hex>" (compactd hash-key).
	Keys []string `json:"keys" yaml:"keys"`
	// OpenAIKeyEnv and AnthropicKeyEnv name environment variables that hold the tenant's upstream
	// credentials; secrets never live in this file.
	OpenAIKeyEnv    string `json:"openai_key_env" yaml:"openai_key_env"`
	AnthropicKeyEnv string `json:"anthropic_key_env" yaml:"anthropic_key_env"`
	// RequestsPerMinute and Burst bound the tenant's request rate (0 = unlimited).
	RequestsPerMinute float64 `json:"requests_per_minute" yaml:"requests_per_minute"`
	Burst             int     `json:"burst" yaml:"burst"`
}

// Tenants is the loaded, validated tenants configuration.
type Tenants struct {
	entries []*tenant
}

type tenant struct {
	name                    string
	hashes                  [][sha256.Size]byte
	openaiKey, anthropicKey string
	limiter                 *rate.Limiter
}

// HashKey returns the form a client key is stored in: "sha256:<hex>".
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(h[:])
}

// LoadTenants reads a tenants file (.json, or YAML otherwise) and resolves its credentials from
// the environment. Errors name the tenant and field, never a secret.
func LoadTenants(path string) (*Tenants, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f TenantsFile
	if strings.HasSuffix(path, ".json") {
		err = json.Unmarshal(raw, &f)
	} else {
		err = yaml.Unmarshal(raw, &f)
	}
	if err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	return NewTenants(f, os.Getenv)
}

// NewTenants validates a tenants configuration; getenv resolves the credential variables.
func NewTenants(f TenantsFile, getenv func(string) string) (*Tenants, error) {
	if len(f.Tenants) == 0 {
		return nil, fmt.Errorf("tenants file: no tenants")
	}
	seen := map[string]bool{}
	keys := map[[sha256.Size]byte]string{}
	out := &Tenants{}
	for i, tc := range f.Tenants {
		if tc.Name == "" || metrics.Label(tc.Name) == "other" {
			return nil, fmt.Errorf("tenants[%d]: name must be 1-32 of [a-z0-9_]", i)
		}
		if seen[tc.Name] {
			return nil, fmt.Errorf("tenants[%d]: duplicate tenant %q", i, tc.Name)
		}
		seen[tc.Name] = true
		t := &tenant{name: tc.Name}
		if len(tc.Keys) == 0 {
			return nil, fmt.Errorf("tenant %q: no keys", tc.Name)
		}
		for j, k := range tc.Keys {
			hexHash, ok := strings.CutPrefix(k, "sha256:")
			b, err := hex.DecodeString(hexHash)
			if !ok || err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("tenant %q keys[%d]: want sha256:<64 hex digits> (compactd hash-key prints it)", tc.Name, j)
			}
			var h [sha256.Size]byte
			copy(h[:], b)
			if other, dup := keys[h]; dup {
				return nil, fmt.Errorf("tenant %q keys[%d]: the same key is already tenant %q's", tc.Name, j, other)
			}
			keys[h] = tc.Name
			t.hashes = append(t.hashes, h)
		}
		for _, c := range []struct {
			env string
			dst *string
		}{{tc.OpenAIKeyEnv, &t.openaiKey}, {tc.AnthropicKeyEnv, &t.anthropicKey}} {
			if c.env == "" {
				continue
			}
			if *c.dst = getenv(c.env); *c.dst == "" {
				return nil, fmt.Errorf("tenant %q: environment variable %s is empty", tc.Name, c.env)
			}
		}
		if tc.RequestsPerMinute > 0 {
			burst := tc.Burst
			if burst <= 0 {
				burst = int(math.Max(1, tc.RequestsPerMinute/60))
			}
			t.limiter = rate.NewLimiter(rate.Limit(tc.RequestsPerMinute/60), burst)
		}
		out.entries = append(out.entries, t)
	}
	return out, nil
}

// match finds the tenant of a client key. Every stored hash is compared, in constant time, so
// the time taken says nothing about which key (or how much of it) matched.
func (ts *Tenants) match(key string) *tenant {
	if key == "" {
		return nil
	}
	h := sha256.Sum256([]byte(key))
	var found *tenant
	for _, t := range ts.entries {
		for _, kh := range t.hashes {
			if subtle.ConstantTimeCompare(h[:], kh[:]) == 1 {
				found = t
			}
		}
	}
	return found
}

// openAIKey is the named tenant's OpenAI credential ("" if it has none): an OpenAI-API
// summariser's on every route (compaction.go summariserAuth).
func (ts *Tenants) openAIKey(name string) string {
	for _, t := range ts.entries {
		if t.name == name {
			return t.openaiKey
		}
	}
	return ""
}

// anthropicKey is the named tenant's Anthropic credential ("" if it has none): a Messages-API
// summariser's on every route.
func (ts *Tenants) anthropicKey(name string) string {
	for _, t := range ts.entries {
		if t.name == name {
			return t.anthropicKey
		}
	}
	return ""
}

type tenantKey struct{}

// tenantOf is the tenant a request was authenticated as, or the configured default.
func (s *Server) tenantOf(ctx context.Context) string {
	if t, ok := ctx.Value(tenantKey{}).(string); ok {
		return t
	}
	return s.cfg.Tenant
}

// ownerOf is the owner digest of the request of ctx: its tenant and the credential it presented
// (internal/owner). A context outside a request (none is, in the server) is the tenant's
// anonymous owner.
func (s *Server) ownerOf(ctx context.Context) string {
	st := stateFrom(ctx)
	if st == nil {
		return s.owners.Of(s.tenantOf(ctx), "")
	}
	if st.owner == "" {
		st.owner = s.connOwner(ctx, s.tenantOf(ctx), st.credential)
	}
	return st.owner
}

// ownerKeyer is the Keyer of cfg.OwnerKey, else of a key derived from a keyring Sealer, else a
// random one (owners then mean nothing to another process: fine for one replica without an
// archive shared with others, and for tests).
func ownerKeyer(cfg Config) (*owner.Keyer, error) {
	if cfg.OwnerKey != nil {
		return owner.New(cfg.OwnerKey)
	}
	if ring, ok := cfg.Sealer.(*crypto.Keyring); ok {
		if k, err := ring.Derive("", owner.KeyPurpose); err == nil {
			return owner.New(k)
		}
	}
	return owner.Ephemeral(), nil
}

// clientKey is the credential a client presented, in whichever header its SDK uses.
func clientKey(h http.Header) string {
	if k, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(k)
	}
	if k := h.Get("X-Api-Key"); k != "" {
		return k
	}
	return h.Get("Api-Key")
}

// authExempt reports whether a path is one compactd answers itself, under a guard of its own,
// and never forwards: the probes, /metrics where it is served (its own token) and the admin API
// (the admin token, which spans tenants). Only exact spellings are exempt. Everything else —
// compactd's routes, pass-through and unknown paths, on any method — needs a client key.
func (s *Server) authExempt(raw, canon string) bool {
	if ok, _ := ownRoutes.SpelledExactly(raw, canon); !ok {
		return false
	}
	switch canon {
	case "/healthz", "/readyz", "/v1/compactd":
		return true
	case "/metrics":
		return s.ops.metrics != nil && !s.cfg.MetricsSeparate
	}
	return strings.HasPrefix(canon, "/v1/compactd/")
}

// authenticate checks the client key and the tenant's rate limit when tenants are configured,
// and swaps the client's key for the tenant's upstream credentials. raw and canon are the
// request's escaped and canonical paths, d its dialect. On refusal it has answered.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, raw, canon string, d dialect) (*http.Request, bool) {
	if s.cfg.Tenants == nil || s.authExempt(raw, canon) {
		return r, true
	}
	t := s.cfg.Tenants.match(clientKey(r.Header))
	if t == nil {
		s.metrics.AuthFailure()
		writeFault(w, d, &fault.Fault{Kind: fault.Unauthenticated, Code: fault.CodeInvalidAPIKey,
			Message: "present a compactd client key issued to your tenant."})
		return nil, false
	}
	if t.limiter != nil {
		if res := t.limiter.Reserve(); res.Delay() > 0 {
			wait := res.Delay()
			res.Cancel()
			retry := time.Duration(math.Ceil(wait.Seconds())) * time.Second
			writeFault(w, d, &fault.Fault{Kind: fault.RateLimited, Code: fault.CodeTenantRateLimited, RetryAfter: retry,
				Message: "This tenant's request rate limit on compactd is exceeded; retry after " + strconv.Itoa(int(retry.Seconds())) + "s."})
			return nil, false
		}
	}
	// The client's compactd key goes no further; the tenant's provider credentials go instead.
	r = r.Clone(context.WithValue(r.Context(), tenantKey{}, t.name))
	r.Header.Del("Authorization")
	r.Header.Del("X-Api-Key")
	r.Header.Del("Api-Key")
	switch {
	case d == dialectAnthropic && t.anthropicKey != "":
		r.Header.Set("X-Api-Key", t.anthropicKey)
	case d == dialectOpenAI && t.openaiKey != "":
		r.Header.Set("Authorization", "Bearer "+t.openaiKey)
	}
	return r, true
}

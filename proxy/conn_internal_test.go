package proxy

import (
	"context"
	"testing"

	"github.com/compactd/compactd/internal/owner"
)

// The owner digest a connection remembers is the one owners.Of gives for the request's own
// tenant and credential, whatever the connection's earlier requests presented: a memo that
// ignored the credential or the tenant would hand one client's conversations to another.
func TestConnOwnerIsTheRequestsOwn(t *testing.T) {
	s := &Server{owners: owner.Ephemeral()}
	conn := ConnContext(context.Background(), nil)
	steps := []struct{ tenant, credential string }{
		{"t1", "sk-first-key-0000000000000000000000"},
		{"t1", "sk-first-key-0000000000000000000000"}, // the memo
		{"t1", "sk-first-key-0000000000000000000001"}, // another key, one byte apart
		{"t1", "sk-first-key-000000000000000000000"},  // a prefix of it
		{"t2", "sk-first-key-000000000000000000000"},  // the same key, another tenant
		{"t1", ""}, // no key
		{"t1", "sk-first-key-0000000000000000000000"},
	}
	for i, st := range steps {
		want := s.owners.Of(st.tenant, st.credential)
		if got := s.connOwner(conn, st.tenant, st.credential); got != want {
			t.Fatalf("step %d (%s): owner %s, want %s", i, st.tenant, got, want)
		}
		if got := s.connOwner(context.Background(), st.tenant, st.credential); got != want {
			t.Fatalf("step %d without a connection: owner %s, want %s", i, got, want)
		}
	}
	if m := connStateOf(conn).owner.Load(); m == nil || m.credential != steps[len(steps)-1].credential {
		t.Fatalf("the connection remembers %+v, not its last request's owner", m)
	}
}

func TestSameSecret(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"", "", true}, {"abc", "abc", true}, {"abc", "abd", false}, {"abc", "ab", false}, {"xbc", "abc", false}} {
		if got := sameSecret(c.a, c.b); got != c.want {
			t.Errorf("sameSecret(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

package proxy

import (
	"context"
	"net"
	"sync/atomic"
)

// What compactd keeps for one client connection, reached from its requests' contexts.

// connKey is the request context's key of its connection's state (ConnContext).
type connKey struct{}

// connState is one client connection's: its TCP connection, whose receive low-water mark is set
// while a large body arrives (lowat.go), and the owner digest of the last request on it.
type connState struct {
	tcp   *net.TCPConn // nil when the connection is not TCP (TLS, a test's pipe)
	owner atomic.Pointer[ownerMemo]
}

// ownerMemo is the owner digest (internal/owner) of one tenant and credential. An agent sends
// every turn of a conversation on one kept-alive connection with one key, so the digest, an
// HMAC-SHA-256, is computed once a connection rather than once a request; a request with another
// tenant or key computes its own (connOwner). HTTP/2 runs a connection's requests at once, hence
// the atomic pointer.
type ownerMemo struct{ tenant, credential, owner string }

// ConnContext is an http.Server ConnContext that gives each connection's requests its
// connState. `compactd serve` sets it; a server without it reads bodies as before and computes
// every request's owner digest.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	cs := &connState{}
	cs.tcp, _ = c.(*net.TCPConn)
	return context.WithValue(ctx, connKey{}, cs)
}

// connStateOf is ctx's connection state, nil outside a ConnContext.
func connStateOf(ctx context.Context) *connState {
	cs, _ := ctx.Value(connKey{}).(*connState)
	return cs
}

// connOwner is owners.Of(tenant, credential), taken from the connection's memo when its last
// request had the same tenant and credential (compared in time independent of where they
// differ), else computed and remembered.
func (s *Server) connOwner(ctx context.Context, tenant, credential string) string {
	cs := connStateOf(ctx)
	if cs != nil {
		if m := cs.owner.Load(); m != nil && m.tenant == tenant && sameSecret(m.credential, credential) {
			return m.owner
		}
	}
	o := s.owners.Of(tenant, credential)
	if cs != nil {
		cs.owner.Store(&ownerMemo{tenant: tenant, credential: credential, owner: o})
	}
	return o
}

// sameSecret reports whether a and b are equal, in time that depends on their length only.
func sameSecret(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := 0; i < len(a); i++ {
		v |= a[i] ^ b[i]
	}
	return v == 0
}

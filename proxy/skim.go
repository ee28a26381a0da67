package proxy

import (
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/skimcache"
)

// DefaultSkimCacheBytes is the skim cache's default budget. A remembered 2 MB agent conversation
// holds ~50 KB (32 bytes per item, 12 per Messages block, counted at its tables' capacity: 49,280
// bytes for the 1,406 items of BenchmarkPrefixResume's 2 MB body), so 64 MiB keeps the skims of a
// thousand or more long conversations; an evicted one costs its next request a full skim.
const DefaultSkimCacheBytes = 64 << 20

// The pipe's side of the skim cache (turn.Front's ResumeFrom and Skimmed): agents resend the
// previous request plus a few items, so the skim of a conversation's last request, remembered
// per tenant and API under a keyed MAC of the bytes it covers, lets the next one be validated
// and skimmed only past them. What the resumed skim gives is what the full skim gives for the
// same bytes (api.FuzzPrefixResume), so nothing compactd decides changes.

// skimScope is the cache scope of the request: the API and the owner (tenant and credential
// digest), so one client's bytes never resume another's skim. Made once per request (Find and
// Store both need it).
func (p *pipe) skimScope() string {
	if p.scope == "" {
		p.scope = string(p.a.Name()) + "\x00" + p.s.ownerOf(p.r.Context())
	}
	return p.scope
}

// ResumeFrom is the remembered skim of a body this one begins with, nil when there is none.
func (p *pipe) ResumeFrom(body []byte) *api.Prefix {
	if !p.s.skims.Wants(len(body)) {
		return nil
	}
	p.skimHit = p.s.skims.Find(p.skimScope(), body, p.bodyMAC)
	if !p.skimHit.OK() {
		return nil
	}
	pre, _ := p.skimHit.State.(*api.Prefix)
	return pre
}

// Skimmed remembers the skim of body for the conversation's next request; s gives the prefix
// (made only when the cache takes bodies of this size).
func (p *pipe) Skimmed(body []byte, s interface{ Prefix() *api.Prefix }) {
	if !p.s.skims.Wants(len(body)) {
		return
	}
	if pre := s.Prefix(); pre != nil {
		p.s.skims.Store(p.skimScope(), body, p.skimHit, pre)
	}
}

var _ skimcache.State = (*api.Prefix)(nil)

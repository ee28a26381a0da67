package proxy

import (
	"context"
	"net/http"

	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/owner"
)

// The archive conversation a turn's compactions are stored under (the engine archives them:
// internal/engine/archive.go), and what of the archive a turn may read.
//
// A conversation id is a label, and a label a client chose is never proof of anything: every
// segment and memo record is stamped with its writer's owner (the digest of tenant and
// credential, internal/owner), and a turn reads only what its own owner wrote and what a
// compactd-issued item, block or signed reference it carries vouches for (readSet). Two clients
// that send the same session header share a label, not an archive. See SECURITY.md, "Who owns a
// conversation".

// maxConversationID bounds a client-chosen conversation id.
const maxConversationID = 128

// conversationHeaders are the request headers that name a conversation, in order of precedence:
// compactd's own, Claude Code's session id (so a transparent Claude Code session and its
// /compact archive under the same label), and Codex's session-id.
var conversationHeaders = [...]string{"X-Compactd-Session", "X-Claude-Code-Session-Id", "Session-Id"}

// conversationLabel is the conversation a request names: a conversation header, else the
// prompt_cache_key, else the conversation of the compaction item the request carries (lineage);
// "" when it names none.
func conversationLabel(r *http.Request, promptCacheKey string, prev *engine.Opened) string {
	for _, h := range conversationHeaders {
		if id := cleanID(r.Header.Get(h)); id != "" {
			return id
		}
	}
	if id := cleanID(promptCacheKey); id != "" {
		return id
	}
	if prev != nil && prev.Payload.Archive != nil && prev.Payload.Archive.Conversation != "" {
		return prev.Payload.Archive.Conversation
	}
	return ""
}

// conversationID is conversationLabel, or a new id when the request names none.
func conversationID(r *http.Request, promptCacheKey string, prev *engine.Opened) string {
	if id := conversationLabel(r, promptCacheKey, prev); id != "" {
		return id
	}
	return engine.NewID("conv_")
}

// cleanID keeps an id only if it is short and printable ASCII without spaces.
func cleanID(s string) string {
	if s == "" || len(s) > maxConversationID {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return ""
		}
	}
	return s
}

// scope is whose memo and speculation a request uses: its tenant and owner.
func (s *Server) scope(ctx context.Context) engine.Scope {
	return engine.Scope{Tenant: s.tenantOf(ctx), Owner: s.ownerOf(ctx)}
}

// readSet is the archive conversation a turn's recall searches and the owners whose segments in
// it the turn may read: the conversation of the compaction this turn made (its own owner's), else
// of the one it opened — a sealed item or block compactd issued, or the memo's record of the
// turn's own history — whose payload vouches for the owner it was archived under. "" when
// neither was archived.
func (s *Server) readSet(ctx context.Context, prev *engine.Opened, c *engine.Compaction) (string, owner.Set) {
	own := owner.Set{s.ownerOf(ctx)}
	var pconv string
	if prev != nil && prev.Payload != nil && prev.Payload.Archive != nil {
		pconv = prev.Payload.Archive.Conversation
	}
	switch {
	case c != nil && c.Payload != nil && c.Payload.Archive != nil:
		conv := c.Payload.Archive.Conversation
		if conv == pconv && conv != "" {
			own = own.With(prev.Payload.Archive.Owner)
		}
		return conv, own
	case pconv != "":
		return pconv, own.With(prev.Payload.Archive.Owner)
	}
	return "", nil
}

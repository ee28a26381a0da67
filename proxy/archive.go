package proxy

import (
	"net/http"

	"github.com/compactd/compactd/internal/engine"
)

// The archive conversation a turn's compactions are stored under (the engine archives them:
// internal/engine/archive.go).

// maxConversationID bounds a client-chosen conversation id.
const maxConversationID = 128

// conversationID names the archive conversation of a request: an explicit x-compactd-session
// header, Codex's session-id, the prompt_cache_key, the conversation of the compaction item the
// request carries (lineage), or a new id.
func conversationID(r *http.Request, promptCacheKey string, prev *engine.Opened) string {
	for _, c := range []string{r.Header.Get("X-Compactd-Session"), r.Header.Get("Session-Id"), promptCacheKey} {
		if id := cleanID(c); id != "" {
			return id
		}
	}
	if prev != nil && prev.Payload.Archive != nil && prev.Payload.Archive.Conversation != "" {
		return prev.Payload.Archive.Conversation
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

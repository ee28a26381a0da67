package chat

import (
	"io"

	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/turn"
)

// The Chat rewriter. A Chat compaction is transparent, so the answer of a turn past the
// threshold is passed on as the upstream wrote it, JSON or SSE — its stream guarded to its
// [DONE] (a break ends in an error chunk, not a cut that looks like a short answer) — except on
// a stream compactd committed itself (keep-alives while the summariser ran): there the
// upstream's status can no longer be sent, so an upstream error becomes the stream's error
// chunk (UpstreamError), and a JSON answer to the streamed request (which cannot follow the
// stream's comments) a 502 error chunk (the front's).
type rewriter struct{ t *Turn }

var (
	_ turn.Rewriter         = rewriter{}
	_ turn.StreamValidation = rewriter{}
)

// Rewrites: only a stream compactd committed, whose upstream failures must be reported inside
// it; otherwise the answer passes, guarded (and the upstream negotiates its own compression).
func (r rewriter) Rewrites() bool { return r.t.stream.Committed }

// Carries is false: nothing the client holds is affected when the answer is lost, the
// compaction lives only in the upstream's view (and the memo).
func (rewriter) Carries() bool { return false }

// ValidatesEvents is false: no event of a Chat answer is edited, so none is refused for not
// being JSON; the guard ends the stream only when it breaks off before its [DONE] or sends an
// event over the cap.
func (rewriter) ValidatesEvents() bool { return false }

// Events: a successful stream passes as it came.
func (rewriter) Events(io.ReadCloser) io.ReadCloser { return nil }

// JSON: a successful JSON answer passes as it came.
func (rewriter) JSON(body []byte) ([]byte, string) { return body, "" }

// UpstreamError carries an upstream error into a committed stream: one error chunk, with the
// upstream's own message and code when it sent an OpenAI envelope.
func (rewriter) UpstreamError(status int, body []byte) []byte {
	return errorChunk(responses.UpstreamError(status, body))
}

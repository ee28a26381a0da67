package proxy

import "github.com/compactd/compactd/internal/relay"

// SetRewriteCapForTest lowers the size limit of an upstream JSON body compactd reads whole to
// rewrite (relay.MaxJSON), so a test can send an over-cap body without 64 MiB of traffic. The
// proxy tests do not run in parallel, so swapping the package variable is safe; restore puts the
// limit back.
func SetRewriteCapForTest(n int64) (restore func()) {
	old := relay.MaxJSON
	relay.MaxJSON = n
	return func() { relay.MaxJSON = old }
}

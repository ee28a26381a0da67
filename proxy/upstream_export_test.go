package proxy

// SetRewriteCapForTest lowers the size limit of an upstream JSON body compactd reads whole to
// rewrite, so a test can send an over-cap body without 64 MiB of traffic. The proxy tests do not
// run in parallel, so swapping the package variable is safe; restore puts the limit back.
func SetRewriteCapForTest(n int64) (restore func()) {
	old := maxJSONResponse
	maxJSONResponse = n
	return func() { maxJSONResponse = old }
}

package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/memo"
)

// Lifecycle. A Server owns what it starts — speculative compaction jobs, the archive retention
// loop, the transport it built when Config.Transport was nil — and what Config hands it with a
// lifecycle of its own: Config.Archive and Config.Counter. Close stops and closes all of them.
// Hand a Server an Archive or Counter of its own, not one shared with another Server. What has no
// lifecycle stays the caller's: Transport (its idle connections are the caller's to drop),
// Summarizer, Sealer, Registry, Tenants, Logger.

// Close stops the Server's background work and releases what it owns, in order: speculation (no
// new job; running jobs cancelled and waited for), the archive retention loop (cancelled and
// waited for), the Counter's background worker, the idle upstream connections of the transport
// New built, and the Archive. Waiting is bounded by ctx: past it Close still closes the rest and
// returns an error saying what did not stop in time.
//
// Call it once the Server serves no request any more, i.e. after http.Server.Shutdown: a turn
// still running could find its Archive closed. Close is idempotent: later calls do nothing and
// return the first call's result.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Server) close(ctx context.Context) error {
	var errs []error
	if err := s.engine.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.stopRetention != nil {
		s.stopRetention()
		select {
		case <-s.retentionDone:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("archive retention: still pruning: %w", context.Cause(ctx)))
		}
	}
	if s.stopMemoRetention != nil {
		s.stopMemoRetention()
		select {
		case <-s.memoRetentionDone:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("memo retention: still pruning: %w", context.Cause(ctx)))
		}
	}
	if err := s.events.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	s.cfg.Counter.Close()
	if s.ownTransport != nil {
		s.ownTransport.CloseIdleConnections()
	}
	if s.cfg.Archive != nil {
		if err := s.cfg.Archive.Close(); err != nil {
			errs = append(errs, fmt.Errorf("archive: close: %w", err))
		}
	}
	return errors.Join(errs...)
}

// startRetention runs the archive retention loop until Close, when an archive and a limit are
// configured.
func (s *Server) startRetention() {
	r := s.cfg.ArchiveRetention
	if s.cfg.Archive == nil || !r.Enabled() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRetention, s.retentionDone = cancel, make(chan struct{})
	go func() {
		defer close(s.retentionDone)
		archive.RunRetention(ctx, s.cfg.Archive, r, s.cfg.ArchiveRetentionInterval, func(n int, err error) {
			if err != nil {
				s.log.Warn("archive retention failed", "err", err)
			} else if n > 0 {
				s.log.Info("archive retention", "segments_deleted", n)
			}
		})
	}()
}

// startMemoRetention deletes expired memo records from the archive database until Close. It
// runs whenever the memo lives there, archive retention limits or not: expiry is the memo's own
// bound.
func (s *Server) startMemoRetention() {
	st, ok := s.cfg.Memo.(*memo.Store)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopMemoRetention, s.memoRetentionDone = cancel, make(chan struct{})
	go func() {
		defer close(s.memoRetentionDone)
		archive.RunMemoRetention(ctx, st.Archive(), s.cfg.ArchiveRetentionInterval, func(n int, err error) {
			if err != nil {
				s.log.Warn("memo retention failed", "err", err)
			} else if n > 0 {
				s.log.Info("memo retention", "records_deleted", n)
			}
		})
	}()
}

// validate refuses configurations that make no sense, naming the field, before New fills in
// defaults: zero means "the default" throughout Config, and negative means "off" only where a
// field's documentation says so (LedgerBytes, CompactionTimeout, BodyReadTimeout,
// Speculative.Fraction); any other negative size or duration is a mistake, not a setting.
func (c *Config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("proxy: Config.%s %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Sealer == nil {
		bad("Sealer", "is nil: compaction items cannot be sealed or opened without the keyring")
	}
	// Any client can ask for a compaction (POST /v1/responses/compact, context_management, a
	// Messages compact edit), whatever the operator's Policy, so there is no configuration in
	// which the summariser is never needed.
	if c.Summarizer == nil {
		bad("Summarizer", "is nil: clients can always request a compaction, which needs a summariser")
	}
	if c.MessagesAgentSummarizer != nil && c.MessagesSummarizer == nil {
		bad("MessagesAgentSummarizer", "is set without MessagesSummarizer: set both, or AgentSummarizer for every route")
	}
	for _, u := range []struct {
		field string
		u     *url.URL
	}{{"Upstream", c.Upstream}, {"AnthropicUpstream", c.AnthropicUpstream}} {
		if u.u != nil && (u.u.Scheme == "" || u.u.Host == "") {
			bad(u.field, "%q is not an absolute URL (scheme and host, e.g. https://api.openai.com)", u.u.Redacted())
		}
	}
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"RetainTokens", int64(c.RetainTokens)},
		{"MaxBodyBytes", c.MaxBodyBytes},
		{"MaxHeaderBytes", int64(c.MaxHeaderBytes)},
		{"ItemMaxAge", int64(c.ItemMaxAge)},
		{"KeepAlive", int64(c.KeepAlive)},
		{"Policy.Threshold", int64(c.Policy.Threshold)},
		{"Policy.DefaultClientThreshold", int64(c.Policy.DefaultClientThreshold)},
		{"Speculative.MaxEntries", int64(c.Speculative.MaxEntries)},
		{"Speculative.MaxConcurrent", int64(c.Speculative.MaxConcurrent)},
		{"Speculative.TTL", int64(c.Speculative.TTL)},
		{"Recall.MaxRounds", int64(c.Recall.MaxRounds)},
		{"Recall.TopK", int64(c.Recall.TopK)},
		{"Recall.ExcerptBytes", int64(c.Recall.ExcerptBytes)},
		{"ArchiveRetention.MaxAge", int64(c.ArchiveRetention.MaxAge)},
		{"ArchiveRetention.MaxBytes", c.ArchiveRetention.MaxBytes},
		{"ArchiveRetention.MaxTotalBytes", c.ArchiveRetention.MaxTotalBytes},
		{"ArchiveRetentionInterval", int64(c.ArchiveRetentionInterval)},
		{"MemoOptions.MaxPerTenant", int64(c.MemoOptions.MaxPerTenant)},
		{"MemoOptions.TTL", int64(c.MemoOptions.TTL)},
	} {
		if n.v < 0 {
			bad(n.field, "is negative (%d); use 0 for the default", n.v)
		}
	}
	if f := c.Speculative.Fraction; math.IsNaN(f) || f >= 1 {
		bad("Speculative.Fraction", "is %v: it is the fraction of the threshold at which to start, below 1 (negative turns speculation off)", f)
	}
	if f := c.CompactionMinSaving; math.IsNaN(f) || f >= 1 {
		bad("CompactionMinSaving", "is %v: it is a share of the turn's tokens, below 1 (0 for the default, negative for no minimum)", f)
	}
	if c.Archive == nil && c.ArchiveRetention != (archive.Retention{}) {
		bad("ArchiveRetention", "is set without an Archive to prune")
	}
	if c.ArchiveRetention.Tenant != "" && c.ArchiveRetention.MaxTotalBytes > 0 {
		bad("ArchiveRetention", "has a Tenant and a MaxTotalBytes: the total ceiling bounds all tenants together")
	}
	if c.ArchiveRetentionInterval != 0 && !c.ArchiveRetention.Enabled() {
		bad("ArchiveRetentionInterval", "is set without an ArchiveRetention limit: there is nothing to prune that often")
	}
	if _, err := ParseForeignItems(string(c.ForeignItems)); err != nil {
		bad("ForeignItems", "%v", err)
	}
	if (c.MetricsUser == "") != (c.MetricsPassword == "") {
		bad("MetricsUser", "and MetricsPassword go together: basic auth needs both")
	}
	if c.Console != nil && c.AdminToken == "" {
		bad("Console", "is set without an AdminToken: the console's login is the admin token")
	}
	if c.Console != nil && c.Console.SessionTTL < 0 {
		bad("Console.SessionTTL", "is negative (%s); use 0 for the default", c.Console.SessionTTL)
	}
	return errors.Join(errs...)
}

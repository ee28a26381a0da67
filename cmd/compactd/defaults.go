package main

import "time"

// Defaults of the command line that no package exports a constant for. Most are the zero-value
// defaults proxy.New applies (proxy/server.go, recall.go, speculative.go); they are stated here
// rather than exported from proxy only because proxy is being reworked on other branches at the
// same time. Move them into proxy (and use them from there) once that settles. Defaults that a
// package does export (compact.DefaultRetainBudget, summarizer.Default*, archive.DefaultTenant…)
// are used directly by the flags.
const (
	defaultListen            = "127.0.0.1:8080" // serve --listen, and where healthcheck looks
	defaultUpstream          = "https://api.openai.com"
	defaultAnthropicUpstream = "https://api.anthropic.com"
	defaultMaxBodyBytes      = 32 << 20 // proxy.Config.MaxBodyBytes
	defaultMaxHeaderBytes    = 1 << 20  // proxy.Config.MaxHeaderBytes (0 there means no limit)
	defaultKeepAlive         = 5 * time.Second
	defaultLedgerBytes       = 6144 // proxy.Config.LedgerBytes
	defaultReadHeaderTimeout = 10 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	defaultUpstreamHeader    = 10 * time.Minute // proxy.DefaultTransport's ResponseHeaderTimeout
	defaultShutdownGrace     = 30 * time.Second

	defaultSpeculativeFraction      = 0.85 // proxy.SpeculativeConfig
	defaultSpeculativeMaxConcurrent = 2
	defaultSpeculativeTTL           = 15 * time.Minute

	defaultRecallToolName     = "compactd_recall" // proxy.RecallConfig
	defaultRecallMaxRounds    = 3
	defaultRecallTopK         = 5
	defaultRecallExcerptBytes = 1200
)

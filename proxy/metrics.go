package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/metrics"
)

// NewRegistry returns a registry with the Go runtime and process collectors, the one compactd
// serves on /metrics. The proxy's own metrics (internal/metrics) are added to it by New
// (Config.Registry).
func NewRegistry() *prometheus.Registry { return metrics.NewRegistry() }

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/skimcache"
)

// RegisterSkimCache exports the skim cache's counters (internal/skimcache), read from stats at
// each scrape: lookups by outcome (hit: the body resumed a remembered skim; miss: skimmed in
// full), evictions, and what the cache holds. A nil reg registers nothing.
func RegisterSkimCache(reg *prometheus.Registry, stats func() skimcache.Stats) {
	if reg == nil {
		return
	}
	for _, o := range []struct {
		outcome string
		read    func(skimcache.Stats) int64
	}{{"hit", func(s skimcache.Stats) int64 { return s.Hits }}, {"miss", func(s skimcache.Stats) int64 { return s.Misses }}} {
		read := o.read
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compactd_skim_cache_lookups_total",
			Help:        "Request bodies looked up in the skim cache, by outcome: hit (the body began with a remembered request's bytes, and only the rest was skimmed), miss (skimmed in full). Bodies under the cache's minimum size are not looked up.",
			ConstLabels: prometheus.Labels{"outcome": o.outcome}},
			func() float64 { return float64(read(stats())) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compactd_skim_cache_evictions_total",
		Help: "Remembered skims evicted to keep the skim cache within --skim-cache-bytes."},
		func() float64 { return float64(stats().Evictions) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactd_skim_cache_bytes",
		Help: "Bytes the skim cache holds (remembered skims and their bookkeeping), at most --skim-cache-bytes."},
		func() float64 { return float64(stats().Bytes) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactd_skim_cache_entries",
		Help: "Conversations whose last request's skim the skim cache holds."},
		func() float64 { return float64(stats().Entries) }))
}

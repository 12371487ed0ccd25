package memory

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// failuresDesc describes kvwin_memory_store_errors_total.
var failuresDesc = prometheus.NewDesc("kvwin_memory_store_errors_total",
	"Memory store ingests and searches that failed (disk, lock, corruption, the database down or not answering within --memory-store-timeout): the request's packet came from its own turns, and turns it evicted were not stored then. A named chat served without memory counts one.",
	nil, nil)

// unstoredDesc describes kvwin_memory_store_unstored_turns_total.
var unstoredDesc = prometheus.NewDesc("kvwin_memory_store_unstored_turns_total",
	"Evicted turns whose ingest failed (the store was down or refused the write; nothing of that ingest was written). A later request of the conversation resends them.",
	nil, nil)

// count records a failed Ingest or Search. A request that went away (its
// context cancelled or past its deadline) is not the store's failure; the
// store's own deadline passing (ErrTimeout) is.
func (s *Store) count(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	if !errors.Is(err, ErrTimeout) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	s.failures.Add(1)
}

// Collector returns a Prometheus collector of the store's counters
// (kvwin_memory_store_errors_total, kvwin_memory_store_unstored_turns_total). It reads an atomic; safe to call
// concurrently with everything else, after Close too.
func (s *Store) Collector() prometheus.Collector { return storeCollector{s} }

type storeCollector struct{ s *Store }

var _ prometheus.Collector = storeCollector{}

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- failuresDesc
	ch <- unstoredDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(c.s.failures.Load()))
	ch <- prometheus.MustNewConstMetric(unstoredDesc, prometheus.CounterValue, float64(c.s.unstored.Load()))
}

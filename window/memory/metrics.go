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

// heldDesc describes kvwin_memory_store_held_bytes.
var heldDesc = prometheus.NewDesc("kvwin_memory_store_held_bytes",
	"Bytes of conversation state the store holds in memory (estimated), by part: indexes (the conversations' branch indexes, bounded by half of --memory-max-bytes) and responses (the Responses chains' messages, an eighth).",
	[]string{"part"}, nil)

// held returns what the store holds in memory: its conversations'
// indexes and its Responses chains, in bytes as their LRUs measured them.
func (s *Store) held() (indexes, responses int64) {
	s.mu.Lock()
	indexes = s.convs.Bytes()
	s.mu.Unlock()
	s.resp.mu.Lock()
	if s.resp.convs != nil {
		responses = s.resp.convs.Bytes()
	}
	s.resp.mu.Unlock()
	return indexes, responses
}

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
// (kvwin_memory_store_errors_total, kvwin_memory_store_unstored_turns_total)
// and gauges (kvwin_memory_store_held_bytes). It reads atomics and takes
// the store's short locks; safe to call concurrently with everything
// else, after Close too.
func (s *Store) Collector() prometheus.Collector { return storeCollector{s} }

type storeCollector struct{ s *Store }

var _ prometheus.Collector = storeCollector{}

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- failuresDesc
	ch <- unstoredDesc
	ch <- heldDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(c.s.failures.Load()))
	ch <- prometheus.MustNewConstMetric(unstoredDesc, prometheus.CounterValue, float64(c.s.unstored.Load()))
	indexes, responses := c.s.held()
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(indexes), "indexes")
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(responses), "responses")
}
